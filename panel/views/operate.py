"""Operating a loop from the panel (contract §9, spec §2.3): pause, resume, run now, retry and
delete, each of which the audit trail records with the signed-in staff user as its actor."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from core.errors import ApiError, UnknownLoop
from core.timeutil import truncate_to_ms
from loops.events import Actor
from loops.humanize import loop_zone
from loops.models import AWAITING_APPROVAL, LoopState
from loops.selectors import loop_get
from loops.services import lifecycle
from sessions_app.hosts import get_host
from sessions_app.models import ReservedTarget

from .. import queries, utf8
from ..rows import loop_row, loop_title, when
from .common import check_loop_id, global_title, gone, health, not_utf8, safe_next, staff_required

# -- operating a loop (contract §9) ------------------------------------------------------------
#
# Pause and resume are immediate and idempotent: one POST from a button on the row or the loop's page.
# Run now and retry deliver at once, so, like delete, a GET asks first and the POST acts. Every POST
# is CSRF-protected and goes back (`next`, if it is on this site) with a message saying what happened;
# a refusal (409 run_in_flight, not_failed, ...) is that message, never an error page.


def _operate(request, loop_id: str, action) -> HttpResponseRedirect:
    """POST: run `action(loop, actor, now) -> (level, text)` and go back with its message."""
    check_loop_id(loop_id)
    undecodable = utf8.undecodable_form(request)
    if undecodable:  # e.g. the `next` field: not a URL to follow with U+FFFD in it
        return not_utf8(request, undecodable, where="form")
    back = safe_next(request, reverse("panel:detail", args=[loop_id]))
    now = truncate_to_ms(timezone.now())  # for the message: an operation reads the clock under its lock
    try:
        level, text = action(loop_get(loop_id), Actor.user(request.user), now)
    except UnknownLoop:
        messages.error(request, gone(loop_id))
        back = safe_next(request, reverse("panel:index"))  # its page may not exist any more
    except ApiError as exc:  # 409 run_in_flight, not_failed, loop_completed (pausing a completed loop)
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
    lifecycle.loop_pause(loop_id=loop.loop_id, actor=actor)
    return messages.SUCCESS, f"Paused {loop_title(loop)}: it will not run until it is resumed."


def _resume(loop, actor, now):
    if loop.state != LoopState.PAUSED:
        return messages.INFO, f"{loop_title(loop)} was not paused."
    verb = "Approved" if loop.pause_reason == AWAITING_APPROVAL else "Resumed"
    loop = lifecycle.loop_resume(loop_id=loop.loop_id, actor=actor)
    return messages.SUCCESS, f"{verb} {loop_title(loop)} — {_next_run_words(loop, now)}."


def _run_now(loop, actor, now):
    run = lifecycle.loop_run_now(loop_id=loop.loop_id, actor=actor)
    return (
        messages.SUCCESS,
        f"Queued a manual run of {loop_title(loop)} ({run.run_id}, revision {run.revision}); "
        "its schedule is unchanged.",
    )


def _retry(loop, actor, now):
    loop = lifecycle.loop_retry(loop_id=loop.loop_id, actor=actor)
    return messages.SUCCESS, f"Retrying {loop_title(loop)}: it fires once, now."


@staff_required
@require_POST
def pause(request, loop_id: str):
    return _operate(request, loop_id, _pause)


@staff_required
@require_POST
def resume(request, loop_id: str):
    return _operate(request, loop_id, _resume)


def confirmation(loop, *, now, back: str) -> dict:
    """What a confirmation page (delete, run now, retry) shows of the loop it asks about."""
    titles = queries.session_titles([loop.session_id])
    global_session = get_host().global_session() if loop.session_id == ReservedTarget.SELF else None
    return {
        "now": now,
        "health": health(now),
        "row": loop_row(loop, now=now, titles=titles, global_title=global_title(global_session)),
        "back": back,
    }


def _confirm(request, loop_id: str, action, *, template: str):
    """GET: ask (the loop's facts, and why it may be refused). POST: act, as _operate."""
    if request.method == "POST":
        return _operate(request, loop_id, action)
    check_loop_id(loop_id)
    back = safe_next(request, reverse("panel:detail", args=[loop_id]))
    now = timezone.now()
    try:
        loop = loop_get(loop_id)
    except UnknownLoop:
        messages.error(request, gone(loop_id))
        return redirect(safe_next(request, reverse("panel:index")))
    context = confirmation(loop, now=now, back=back)
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
def delete(request, loop_id: str):
    """GET: ask. POST (CSRF-protected): delete through the service (spec §2.3)."""
    check_loop_id(loop_id)
    back = safe_next(request, reverse("panel:index"))
    if request.method == "POST":
        undecodable = utf8.undecodable_form(request)
        if undecodable:  # e.g. the `next` field: not a URL to follow with U+FFFD in it
            return not_utf8(request, undecodable, where="form")
        try:
            lifecycle.loop_delete(loop_id=loop_id, actor=Actor.user(request.user))
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
    context = confirmation(loop, now=now, back=back)
    return render(request, "panel/delete.html", context)
