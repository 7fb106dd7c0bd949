"""The global automation panel and the local composer status (spec §8, contract §8).

Thin views over the same selectors and services as the tools: loop_list / loops_targeting for
lists, services.loop_create and services.loop_delete for writes, fire_times for what comes next;
and over the operators' operations (contract §9, issue 15): pause and resume, run now, retry and
edit, each of which the audit trail records with the signed-in staff user as its actor.
"""

from __future__ import annotations

from functools import wraps
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.http import require_http_methods, require_POST

from core.errors import ApiError, UnknownLoop
from core.timeutil import truncate_to_ms
from core.validation import is_identifier
from loops import humanize, operations, services
from loops.events import Actor, loop_events
from loops.humanize import loop_zone, preview
from loops.models import LoopState
from loops.presenters import loop_state
from loops.selectors import fire_times, loop_get, loop_runs
from sessions_app.hosts import get_host

from . import queries, utf8
from .forms import LoopCreateForm, LoopEditForm
from .rows import event_row, loop_row, loop_title, loop_urls_maker, when

PAGE_SIZE = 50
RUN_HISTORY = 50
EVENT_HISTORY = 50
UPCOMING = 5
PICKER_SESSIONS = 200


def staff_required(view):
    """contract §8: staff only. Anonymous -> the admin login (then back); signed in but not staff -> 403.

    Then a query string that is not valid UTF-8 is refused (400) before the view reads it: Django
    would hand it over with U+FFFD in place of the bad bytes, e.g. `?session=%FF` as the session ID
    U+FFFD (issue 12). Form bodies are checked where they are read (create, delete).
    """

    @wraps(view)
    def guarded(request, *args, **kwargs):
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        if not (user.is_active and user.is_staff):
            return render(request, "panel/forbidden.html", status=403)
        undecodable = utf8.undecodable_query(request)
        if undecodable:
            return _not_utf8(request, undecodable, where="address")
        return view(request, *args, **kwargs)

    return guarded


def _not_utf8(request, fields: list[str], *, where: str):
    return render(request, "panel/bad_request.html", {"fields": fields, "where": where}, status=400)


def _health(now):
    return queries.scheduler_status(now)


def _global_title(global_session) -> str | None:
    if global_session is None:
        return None
    return global_session.title or global_session.session_id


def _back_here(request, *, after_delete: str | None = None) -> dict:
    """Where the controls (_controls.html) come back to: `here`, this page, and as the `next`
    parameter of their links, URL-encoded once for all of a list's rows (as the urlencode filter
    would)."""
    here = request.get_full_path()
    return {"here": here, "next_q": quote(here), "delete_next_q": quote(after_delete or here)}


def _query(params: dict, **changes) -> str:
    merged = {**{k: v for k, v in params.items() if v}, **changes}
    merged = {k: v for k, v in merged.items() if v not in (None, "")}
    return "?" + urlencode(merged) if merged else "?"


@staff_required
@require_http_methods(["GET", "HEAD"])
def index(request):
    now = timezone.now()
    filters = queries.Filters.from_query(request.GET)
    number = request.GET.get("page")
    page = queries.CappedPaginator(queries.panel_loops(filters, now=now), PAGE_SIZE, page=number).get_page(number)
    loops = list(page.object_list)
    filter_sessions = queries.target_session_choices()
    titles = dict(filter_sessions)
    titles.update(queries.session_titles(({loop.session_id for loop in loops} | {filters.session}) - titles.keys()))
    global_session = get_host().global_session()
    urls = loop_urls_maker()
    params = {"state": filters.state, "target": filters.target, "session": filters.session, "q": filters.q}
    context = {
        "now": now,
        "health": _health(now),
        "filters": filters,
        "states": queries.STATE_FILTERS,
        "targets": queries.TARGET_FILTERS,
        "filter_sessions": [(sid, title or sid) for sid, title in filter_sessions],
        "session_title": titles.get(filters.session),
        "page": page,
        "rows": [
            loop_row(loop, now=now, titles=titles, global_title=_global_title(global_session), urls=urls)
            for loop in loops
        ],
        "prev_query": _query(params, page=page.previous_page_number()) if page.has_previous() else None,
        "next_query": _query(params, page=page.next_page_number()) if page.has_next() else None,
        "new_query": _query({"session": filters.session}),
        **_back_here(request),
        "highlight": request.GET.get("created", ""),
        "has_global_session": global_session is not None,
    }
    return render(request, "panel/index.html", context)


@staff_required
@require_http_methods(["GET", "HEAD", "POST"])
def create(request):
    now = timezone.now()
    host = get_host()
    current = request.GET.get("session", "").strip()
    current = current if is_identifier(current) else ""
    sessions = host.list_sessions(limit=PICKER_SESSIONS)  # spec §8.2: session selection from list_sessions
    global_session = host.global_session()
    presets = queries.preset_names(extra=[s.preset for s in sessions])
    options = {"sessions": sessions, "current_session": current, "global_session": global_session, "presets": presets}
    if request.method == "POST":
        form = LoopCreateForm(
            request.POST, undecodable=utf8.undecodable_form(request), actor=Actor.user(request.user), **options
        )
        loop = form.save() if form.is_valid() else None
        if loop is not None:
            row = loop_row(
                loop,
                now=now,
                titles=queries.session_titles([loop.session_id]),
                global_title=_global_title(global_session),
            )
            next_text = f"next run {row.next_run.local}" if row.next_run else "no next run"
            messages.success(request, f"Created {loop.loop_id} — {row.schedule}, {next_text}.")
            return redirect(
                reverse("panel:index") + _query({"session": current, "created": loop.loop_id}) + f"#{loop.loop_id}"
            )
    else:
        form = LoopCreateForm(**options)
    context = {
        "now": now,
        "health": _health(now),
        "form": form,
        "current_session": current,
        "has_global_session": global_session is not None,
        "host_tz": settings.TIME_ZONE,
        "back_query": _query({"session": current}),
    }
    # 422 for a refused submission: the page shows the errors, and scripts and tests can tell.
    return render(request, "panel/create.html", context, status=422 if form.is_bound else 200)


@staff_required
@require_http_methods(["GET", "HEAD"])
def detail(request, loop_id: str):
    if not is_identifier(loop_id):
        raise Http404("No such loop.")
    now = timezone.now()
    try:
        loop = loop_get(loop_id)
    except UnknownLoop:
        loop = None
    # Runs and events outlive the loop: a deleted loop's page still shows both.
    try:
        runs = list(loop_runs(loop_id, limit=RUN_HISTORY))
    except UnknownLoop:
        runs = []
    try:
        events = list(loop_events(loop_id, limit=EVENT_HISTORY))
    except UnknownLoop:
        events = []
    if loop is None and not runs and not events:
        raise Http404("No such loop and no runs or changes recorded for it.")
    zone_name = loop_zone(loop) if loop else settings.TIME_ZONE
    row = upcoming = None
    if loop is not None:
        global_session = get_host().global_session() if loop.session_id == "self" else None
        titles = queries.session_titles([loop.session_id, loop.created_by_session_id])
        row = loop_row(loop, now=now, titles=titles, global_title=_global_title(global_session))
        # contract §4: the same code path as the scheduler, so DST shows here before it happens.
        upcoming = [
            {"when": when(moment, zone_name, now), "countdown": humanize.countdown(moment, now)}
            for moment in fire_times(loop, now=now, count=UPCOMING)
        ]
        creator = titles.get(loop.created_by_session_id)
    else:
        creator = None
    context = {
        "now": now,
        "health": _health(now),
        "loop": loop,
        "loop_id": loop_id,
        "row": row,
        "creator_title": creator,
        "created": when(loop.created_at, zone_name, now) if loop else None,
        "upcoming": upcoming,
        "runs": [
            {
                "run": run,
                "scheduled": when(run.scheduled_at, zone_name, now),
                "finished": when(run.finished_at, zone_name, now),
                "outcome_at": when(run.outcome_at, zone_name, now),
                "prompt": preview(run.prompt, 80),
            }
            for run in runs
        ],
        "events": [event_row(event, zone_name=zone_name, now=now) for event in events],
        "zone": zone_name,
        # A deleted loop's page is gone: delete comes back to the list.
        **_back_here(request, after_delete=reverse("panel:index")),
    }
    return render(request, "panel/detail.html", context)


def _safe_next(request, fallback: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return fallback


@staff_required
@require_http_methods(["GET", "HEAD", "POST"])
def delete(request, loop_id: str):
    """GET: ask. POST (CSRF-protected): delete through the service (spec §2.3)."""
    if not is_identifier(loop_id):
        raise Http404("No such loop.")
    back = _safe_next(request, reverse("panel:index"))
    if request.method == "POST":
        undecodable = utf8.undecodable_form(request)
        if undecodable:  # e.g. the `next` field: not a URL to follow with U+FFFD in it
            return _not_utf8(request, undecodable, where="form")
        try:
            services.loop_delete(loop_id=loop_id, actor=Actor.user(request.user))
        except UnknownLoop:
            # spec §2.3: "Deletion is idempotent only at the UI layer" — gone is what was asked for.
            messages.info(request, f"{loop_id} was already deleted.")
        else:
            messages.success(request, f"Deleted {loop_id}. Its run history stays on its detail page.")
        if back.startswith(reverse("panel:detail", args=[loop_id])):
            back = reverse("panel:index")
        return redirect(back)
    now = timezone.now()
    try:
        loop = loop_get(loop_id)
    except UnknownLoop:
        messages.info(request, f"{loop_id} was already deleted.")
        return redirect(back)
    context = _confirmation(loop, now=now, back=back)
    return render(request, "panel/delete.html", context)


# -- operating a loop (contract §9, issue 15) ------------------------------------------------------------
#
# Pause and resume are immediate and idempotent: one POST from a button on the row or the loop's page.
# Run now and retry deliver at once, so, like delete, a GET asks first and the POST acts. Every POST
# is CSRF-protected and goes back (`next`, if it is on this site) with a message saying what happened;
# a refusal (409 run_in_flight, not_failed, ...) is that message, never an error page.


def _check_loop_id(loop_id: str):
    if not is_identifier(loop_id):
        raise Http404("No such loop.")


def _gone(loop_id: str) -> str:
    return f"There is no loop {loop_id} any more: it was deleted."


def _operate(request, loop_id: str, action) -> HttpResponseRedirect:
    """POST: run `action(loop, actor, now) -> (level, text)` and go back with its message."""
    _check_loop_id(loop_id)
    undecodable = utf8.undecodable_form(request)
    if undecodable:  # e.g. the `next` field: not a URL to follow with U+FFFD in it
        return _not_utf8(request, undecodable, where="form")
    back = _safe_next(request, reverse("panel:detail", args=[loop_id]))
    now = truncate_to_ms(timezone.now())  # for the message: an operation reads the clock under its lock
    try:
        level, text = action(loop_get(loop_id), Actor.user(request.user), now)
    except UnknownLoop:
        messages.error(request, _gone(loop_id))
        back = _safe_next(request, reverse("panel:index"))  # its page may not exist any more
    except ApiError as exc:  # 409 run_in_flight, not_failed; 422 pausing a completed loop
        messages.error(request, exc.message)
    else:
        messages.add_message(request, level, text)
    return redirect(back)


def _next_run_words(loop, now) -> str:
    moment = when(loop.next_at, loop_zone(loop), now)
    return f"next run {moment.local}" if moment else "no next run"


def _pause(loop, actor, now):
    if loop.state == LoopState.PAUSED:
        return messages.INFO, f"{loop_title(loop)} was already paused."
    operations.loop_pause(loop_id=loop.loop_id, actor=actor)
    return messages.SUCCESS, f"Paused {loop_title(loop)}: it will not run until it is resumed."


def _resume(loop, actor, now):
    if loop.state != LoopState.PAUSED:
        return messages.INFO, f"{loop_title(loop)} was not paused."
    loop = operations.loop_resume(loop_id=loop.loop_id, actor=actor)
    return messages.SUCCESS, f"Resumed {loop_title(loop)} — {_next_run_words(loop, now)}."


def _run_now(loop, actor, now):
    run = operations.loop_run_now(loop_id=loop.loop_id, actor=actor)
    return (
        messages.SUCCESS,
        f"Queued a manual run of {loop_title(loop)} ({run.run_id}, revision {run.revision}); "
        "its schedule is unchanged.",
    )


def _retry(loop, actor, now):
    loop = operations.loop_retry(loop_id=loop.loop_id, actor=actor)
    return messages.SUCCESS, f"Retrying {loop_title(loop)}: it fires once, now."


@staff_required
@require_POST
def pause(request, loop_id: str):
    return _operate(request, loop_id, _pause)


@staff_required
@require_POST
def resume(request, loop_id: str):
    return _operate(request, loop_id, _resume)


def _confirmation(loop, *, now, back: str) -> dict:
    """What a confirmation page (delete, run now, retry) shows of the loop it asks about."""
    titles = queries.session_titles([loop.session_id])
    global_session = get_host().global_session() if loop.session_id == "self" else None
    return {
        "now": now,
        "health": _health(now),
        "row": loop_row(loop, now=now, titles=titles, global_title=_global_title(global_session)),
        "back": back,
    }


def _confirm(request, loop_id: str, action, *, template: str):
    """GET: ask (the loop's facts, and why it may be refused). POST: act, as _operate."""
    if request.method == "POST":
        return _operate(request, loop_id, action)
    _check_loop_id(loop_id)
    back = _safe_next(request, reverse("panel:detail", args=[loop_id]))
    now = timezone.now()
    try:
        loop = loop_get(loop_id)
    except UnknownLoop:
        messages.error(request, _gone(loop_id))
        return redirect(_safe_next(request, reverse("panel:index")))
    context = _confirmation(loop, now=now, back=back)
    return render(request, template, context)


@staff_required
@require_http_methods(["GET", "HEAD", "POST"])
def run_now(request, loop_id: str):
    """contract §9 run: one manual occurrence, now, through the scheduler's delivery path."""
    return _confirm(request, loop_id, _run_now, template="panel/run_now.html")


@staff_required
@require_http_methods(["GET", "HEAD", "POST"])
def retry(request, loop_id: str):
    """contract §9 retry: a failed loop fires once, now."""
    return _confirm(request, loop_id, _retry, template="panel/retry.html")


@staff_required
@require_http_methods(["GET", "HEAD", "POST"])
def edit(request, loop_id: str):
    """contract §9 PATCH as a form: the New loop form, pre-filled, plus the name."""
    _check_loop_id(loop_id)
    now = timezone.now()
    back = _safe_next(request, reverse("panel:detail", args=[loop_id]))
    try:
        loop = loop_get(loop_id)
    except UnknownLoop:
        messages.error(request, _gone(loop_id))
        return redirect(reverse("panel:index"))
    host = get_host()
    sessions = host.list_sessions(limit=PICKER_SESSIONS)
    global_session = host.global_session()
    presets = queries.preset_names(extra=[s.preset for s in sessions])
    options: dict[str, Any] = {"loop": loop, "sessions": sessions, "global_session": global_session, "presets": presets}
    if request.method == "POST":
        form = LoopEditForm(
            request.POST, undecodable=utf8.undecodable_form(request), actor=Actor.user(request.user), **options
        )
        saved = form.save() if form.is_valid() else None
        if saved is not None:
            if saved.revision == loop.revision:
                messages.info(request, f"Nothing changed: {loop_title(saved)} stays at revision {saved.revision}.")
            else:
                messages.success(request, f"Saved {loop_title(saved)} as revision {saved.revision}.")
            return redirect(back)
    else:
        form = LoopEditForm(**options)
    context = {
        "now": now,
        "health": _health(now),
        "form": form,
        "loop": loop,
        "has_global_session": global_session is not None,
        "back": back,
    }
    # 422 for a refused submission, as the create form.
    return render(request, "panel/edit.html", context, status=422 if form.is_bound else 200)


@staff_required
@require_http_methods(["GET", "HEAD"])
@xframe_options_exempt  # embeddable anywhere: it has no controls to click-jack, only a link
def session_status(request, session_id: str):
    """spec §8.1: a compact view of one session's loops, embeddable in its composer.

    ?fragment=1 returns the bare partial for a host page that inserts it; without it a tiny
    document for an <iframe> that styles itself and keeps its countdown ticking.
    """
    if not is_identifier(session_id):
        raise Http404("No such session.")
    now = timezone.now()
    status = queries.composer_status(session_id, now=now)
    nearest_zone = settings.TIME_ZONE
    context = {
        "now": now,
        "status": status,
        "nearest": when(status.nearest, nearest_zone, now),
        "nearest_countdown": humanize.countdown(status.nearest, now),
        "items": [
            {
                "loop_id": loop.loop_id,
                "preview": preview(loop.prompt, 60),
                "state": loop_state(loop, now),
                "countdown": humanize.countdown(loop.next_at, now),
                "next_run": when(loop.next_at, loop_zone(loop), now),
                "schedule": humanize.schedule_words(loop, now=now, host_tz=settings.TIME_ZONE)[0],
            }
            for loop in status.loops
        ],
        "panel_url": reverse("panel:index") + _query({"session": session_id}),
        "new_url": reverse("panel:create") + _query({"session": session_id}),
        "health": _health(now),
    }
    template = "panel/_status.html" if request.GET.get("fragment") else "panel/status.html"
    return render(request, template, context)
