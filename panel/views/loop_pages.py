"""One loop's pages: its detail (runs, changes, what comes next), the New loop form and the edit
form (contract §9 PATCH), each of which the audit trail records with the signed-in staff user."""

from __future__ import annotations

from typing import cast

from django.conf import settings
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from core.errors import UnknownLoop
from core.validation import is_identifier
from loops import humanize
from loops.events import Actor, loop_events
from loops.humanize import loop_zone, preview
from loops.models import Loop
from loops.selectors import RUN_PAGE, fire_times, loop_get, loop_runs
from sessions_app.hosts import get_host
from sessions_app.hosts.base import HostError, Workspaces
from sessions_app.models import ReservedTarget
from timing import schedules

from .. import queries, utf8
from ..edit_forms import LoopEditForm
from ..forms import OVERLAP_WORDS, LoopCreateForm
from ..rows import event_row, loop_row, loop_title, when
from .common import back_here, check_loop_id, global_title, gone, health, query, safe_next, staff_required

EVENT_HISTORY = 50
UPCOMING = 5
PICKER_SESSIONS = 200


def _form_options() -> dict:
    """What the New loop and edit forms offer: the sessions (spec §8.2: from list_sessions), the
    global interface session, and the presets."""
    host = get_host()
    sessions = host.list_sessions(limit=PICKER_SESSIONS)
    presets = queries.preset_names(extra=[session.preset for session in sessions])
    return {"sessions": sessions, "global_session": host.global_session(), "presets": presets}


def _workspace_options(loop: Loop) -> dict:
    """What the edit form of a `new` loop offers as its workspace (contract §14): the host's
    workspaces when it has them (Capabilities.workspaces). A host that cannot be asked leaves the
    loop's own workspace and a typed directory, and the page says why."""
    host = get_host()
    if loop.session_id != ReservedTarget.NEW or not host.capabilities.workspaces:
        return {}
    options: dict = {"default_workspace": settings.DSHLOOP_DSH_CWD}
    try:
        options["workspaces"] = cast(Workspaces, host).workspaces()
    except HostError as exc:
        options["workspaces_note"] = f"The host could not list its workspaces ({exc}); type a directory instead."
    return options


def _end_facts(loop: Loop | None, zone_name: str, now) -> dict | None:
    """contract §16: where the loop ends, how many runs it has delivered, and the delay of its
    deliveries when a cron jitter moves them (upcoming shows the delayed times)."""
    if loop is None:
        return None
    timing = loop.timing
    delay = timing.delay.total_seconds() if isinstance(timing, schedules.Delayed) else None
    return {
        "at": when(loop.ends_at, zone_name, now),
        "max_runs": loop.max_runs,
        "runs_delivered": loop.runs_delivered,
        "jitter": f"{delay:.3f}".rstrip("0").rstrip(".") if delay is not None else None,
    }


def _unattended_facts(loop: Loop | None) -> dict | None:
    """A `new` loop's workspace, permission preset and overlap as the detail page shows them."""
    if loop is None or loop.session_id != ReservedTarget.NEW:
        return None
    return {
        "workspace": loop.workspace,
        "permission_preset": loop.permission_preset,
        "overlap": OVERLAP_WORDS.get(loop.overlap, loop.overlap),
    }


def _submitted(request) -> dict:
    """A posted form's fields that were not UTF-8, and who submits it (the audit trail's actor)."""
    return {"undecodable": utf8.undecodable_form(request), "actor": Actor.user(request.user)}


@staff_required
@require_http_methods(["GET", "HEAD", "POST"])
def create(request):
    now = timezone.now()
    current = request.GET.get("session", "").strip()
    current = current if is_identifier(current) else ""
    options = _form_options() | {"current_session": current}
    global_session = options["global_session"]
    if request.method == "POST":
        form = LoopCreateForm(request.POST, **_submitted(request), **options)
        loop = form.save() if form.is_valid() else None
        if loop is not None:
            row = loop_row(
                loop,
                now=now,
                titles=queries.session_titles([loop.session_id]),
                global_title=global_title(global_session),
            )
            next_text = f"next run {row.next_run.local}" if row.next_run else "no next run"
            messages.success(request, f"Created {loop.loop_id} — {row.schedule}, {next_text}.")
            return redirect(
                reverse("panel:index") + query({"session": current, "created": loop.loop_id}) + f"#{loop.loop_id}"
            )
    else:
        form = LoopCreateForm(**options)
    context = {
        "now": now,
        "health": health(now),
        "form": form,
        "current_session": current,
        "has_global_session": global_session is not None,
        "host_tz": settings.TIME_ZONE,
        "back_query": query({"session": current}),
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
        runs = list(loop_runs(loop_id, limit=RUN_PAGE))
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
    # One read for every session the page names: the target, the creator, each run's session.
    named = {run.target_session_id for run in runs} | ({loop.session_id, loop.created_by_session_id} if loop else set())
    titles = queries.session_titles(named)
    if loop is not None:
        global_session = get_host().global_session() if loop.session_id == ReservedTarget.SELF else None
        row = loop_row(loop, now=now, titles=titles, global_title=global_title(global_session))
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
        "health": health(now),
        "loop": loop,
        "loop_id": loop_id,
        "row": row,
        "creator_title": creator,
        "unattended": _unattended_facts(loop),
        "ends": _end_facts(loop, zone_name, now),
        "created": when(loop.created_at, zone_name, now) if loop else None,
        "upcoming": upcoming,
        "runs": [
            {
                "run": run,
                "scheduled": when(run.scheduled_at, zone_name, now),
                "finished": when(run.finished_at, zone_name, now),
                "outcome_at": when(run.outcome_at, zone_name, now),
                "prompt": preview(run.prompt, 80),
                "target_title": titles.get(run.target_session_id),
            }
            for run in runs
        ],
        "events": [event_row(event, zone_name=zone_name, now=now) for event in events],
        "zone": zone_name,
        # A deleted loop's page is gone: delete comes back to the list.
        **back_here(request, after_delete=reverse("panel:index")),
    }
    return render(request, "panel/detail.html", context)


@staff_required
@require_http_methods(["GET", "HEAD", "POST"])
def edit(request, loop_id: str):
    """contract §9 PATCH as a form: the New loop form, pre-filled, plus the name."""
    check_loop_id(loop_id)
    now = timezone.now()
    back = safe_next(request, reverse("panel:detail", args=[loop_id]))
    try:
        loop = loop_get(loop_id)
    except UnknownLoop:
        messages.error(request, gone(loop_id))
        return redirect(reverse("panel:index"))
    options = _form_options() | _workspace_options(loop) | {"loop": loop}
    global_session = options["global_session"]
    if request.method == "POST":
        form = LoopEditForm(request.POST, **_submitted(request), **options)
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
        "health": health(now),
        "form": form,
        "loop": loop,
        "has_global_session": global_session is not None,
        "back": back,
        "host_zone": settings.TIME_ZONE,  # the zone the end's date and time are in (panel.forms)
    }
    # 422 for a refused submission, as the create form.
    return render(request, "panel/edit.html", context, status=422 if form.is_bound else 200)
