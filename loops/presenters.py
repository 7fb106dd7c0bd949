"""Loop and run records as the contract's JSON shapes (epoch ms; unset fields omitted)."""

from __future__ import annotations

from datetime import datetime, timedelta

from dshloop.timeutil import to_ms

from .models import Loop, LoopEvent, LoopRun, LoopState, ScheduleKind

# spec §4 / contract §3: scheduled, unclaimed, and next_at more than 30 s in the past.
OVERDUE_AFTER = timedelta(seconds=30)


def _ms(moment: datetime | None) -> int | None:
    return to_ms(moment) if moment else None


def schedule_view(loop: Loop) -> dict:
    if loop.kind == ScheduleKind.EVERY:
        return {"kind": "every", "every_seconds": loop.every_seconds}
    if loop.kind == ScheduleKind.AFTER:
        return {"kind": "after", "after_seconds": loop.after_seconds}
    view = {"kind": "cron", "expr": loop.cron_expr}
    if loop.tz:
        view["tz"] = loop.tz
    return view


def loop_state(loop: Loop, now: datetime) -> str:
    if loop.state == LoopState.SCHEDULED and loop.next_at and loop.next_at < now - OVERDUE_AFTER:
        return "overdue"
    return loop.state


def loop_view(loop: Loop, *, now: datetime) -> dict:
    view = {
        "loop_id": loop.loop_id,
        "prompt": loop.prompt,
        "schedule": schedule_view(loop),
        "session_id": loop.session_id,
        "preset": loop.preset or None,
        "created_by_session_id": loop.created_by_session_id,
        "created_at": to_ms(loop.created_at),
        "next_at": _ms(loop.next_at),
        "last_run_at": _ms(loop.last_run_at),
        "last_result": loop.last_result or None,
        "last_error": loop.last_error or None,
        "state": loop_state(loop, now),
    }
    return {key: value for key, value in view.items() if value is not None}


def run_view(run: LoopRun) -> dict:
    view = {
        "run_id": run.run_id,
        "loop_id": run.loop_id,
        "occurrence_key": run.occurrence_key,
        "scheduled_at": to_ms(run.scheduled_at),
        "status": run.status,
        "attempt": run.attempt,
        "missed": run.missed or None,
        "target_session_id": run.target_session_id or None,
        "started_at": _ms(run.started_at),
        "finished_at": _ms(run.finished_at),
        "error": run.error or None,
        "fallback": run.fallback or None,
        "revision": run.revision,
        "manual": run.manual,
        "outcome": run.outcome or None,
        "summary": run.summary or None,
        "outcome_at": _ms(run.outcome_at),
    }
    return {key: value for key, value in view.items() if value is not None}


def loop_detail_view(loop: Loop, *, now: datetime) -> dict:
    """contract §9 LoopDetail: the LoopView plus the operators' fields."""
    detail = {
        **loop_view(loop, now=now),
        "name": loop.name or None,
        "revision": loop.revision,
        "paused_at": _ms(loop.paused_at),
        "pause_reason": loop.pause_reason or None,
        "consecutive_failures": loop.consecutive_failures,
    }
    return {key: value for key, value in detail.items() if value is not None}


def event_view(event: LoopEvent) -> dict:
    view = {
        "at": to_ms(event.at),
        "kind": event.kind,
        "actor": {"kind": event.actor_kind, **({"id": event.actor_id} if event.actor_id else {})},
        "revision": event.revision,
        "changes": event.changes,
    }
    return {key: value for key, value in view.items() if value is not None}
