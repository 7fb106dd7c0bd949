"""Making a loop (spec §2.1): its target and quota rules, and the one place a loop is made."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from core.errors import (
    Forbidden,
    IntervalTooShort,
    InvalidInput,
    QuotaExceeded,
    TargetUnavailable,
    UnknownPreset,
    UnknownSession,
)
from core.locks import lock_until_commit
from core.notify import notify_clocks
from core.timeutil import truncate_to_ms
from loops.events import Actor, record_event
from loops.models import AWAITING_APPROVAL, ActorKind, EventKind, Loop, LoopState, timing_of
from loops.schemas import LoopCreateIn
from loops.selectors import active_loops_in_quota
from loops.services.unattended import unattended_defaults
from sessions_app.hosts import get_host, global_session_id
from sessions_app.models import ReservedTarget
from timing import schedules
from timing.schedule_gaps import shortest_gap


def new_loop_id() -> str:
    return "loop_" + secrets.token_hex(8)


def check_target(*, target: str, preset: str | None) -> None:
    """A loop's target is "self", "new" or a session the host knows; a preset only for "new", and
    only one that can be mounted (spec §2.1, §9). Raises the contract's error."""
    host = get_host()
    if target == ReservedTarget.GLOBAL:
        raise InvalidInput(
            "'global' is a loop_list selector, not a target; use \"self\" for the global interface session.",
            field="session_id",
        )
    if preset is not None:
        if target != ReservedTarget.NEW:
            raise InvalidInput(
                "'preset' is only accepted with session_id \"new\": presets are mounted when a session starts.",
                field="preset",
            )
        found = host.get_preset(preset)
        if found is None or not found.mountable:
            reason = "does not exist" if found is None else "cannot be mounted on a new session"
            raise UnknownPreset(f"Preset {preset!r} {reason}.", field="preset")
    if target == ReservedTarget.SELF:
        if host.global_session() is None:
            raise TargetUnavailable(
                'The global interface session is unavailable, so "self" cannot be targeted; pick another session.',
                field="session_id",
            )
    elif target != ReservedTarget.NEW and host.get_session(target) is None:
        raise UnknownSession(
            f"The host knows no session {target!r}; list_sessions shows the ones it knows.", field="session_id"
        )


def check_interval(*, schedule: schedules.Schedule, target: str, now: datetime) -> None:
    """contract §14: an every/cron loop targeting "new" starts a fresh agent at each occurrence, with
    nobody watching, so its occurrences are at least DSHLOOP_MIN_NEW_INTERVAL_SECONDS apart (a cron
    schedule's shortest gap counts). Loops into existing sessions keep no floor."""
    floor = settings.DSHLOOP_MIN_NEW_INTERVAL_SECONDS
    if target != ReservedTarget.NEW or not floor or schedule.one_shot:
        return
    gap = shortest_gap(schedule, now=now, host_tz=settings.TIME_ZONE)
    if gap is None or gap >= timedelta(seconds=floor):
        return
    raise IntervalTooShort(
        f'A loop that starts a fresh session ("new") at each run fires at most once every {floor} s '
        f"(DSHLOOP_MIN_NEW_INTERVAL_SECONDS); this schedule fires {gap.total_seconds():g} s apart. "
        "Choose a longer interval, or target an existing session.",
        field="schedule",
    )


def needs_approval(*, target: str, actor: Actor, vouched: bool = True) -> bool:
    """contract §14: with DSHLOOP_APPROVE_AGENT_NEW_LOOPS on, a `new` loop an agent makes (through
    the tools) waits, paused, until an operator approves it by resuming it. So does one made by a
    caller no person is known to stand behind (`vouched` false: DSH Web's Loops panel, whose channel
    any local process can call, an agent's bash included; loops.api.vouched)."""
    agent_like = actor.kind == ActorKind.SESSION or not vouched
    return settings.DSHLOOP_APPROVE_AGENT_NEW_LOOPS and target == ReservedTarget.NEW and agent_like


def refuse_unvouched_approval(loop: Loop, *, vouched: bool, doing: str) -> None:
    """An approval is a person's (contract §14): a loop awaiting it is not resumed (approved) or run
    by a caller no person is known to stand behind, whatever DSHLOOP_APPROVE_AGENT_NEW_LOOPS says
    now. Call it under the loop's row lock, so that it judges the state the change applies to."""
    if vouched or loop.pause_reason != AWAITING_APPROVAL:
        return
    raise Forbidden(
        f"{loop.loop_id} awaits a person's approval, and this client cannot show that a person is "
        f"asking to {doing} it (any local process can call DSH Web's channel): approve it in dshloop's "
        "own panel, signed in."
    )


def default_creator() -> str:
    """Who a loop made without a calling session records as its creator (contract §2): the global
    interface session, or none ("", still a string in LoopView) when there is none. At
    delivery a `new` loop inherits from its creator, or from the profile default (spec §2.1)."""
    return global_session_id() or ""


def check_loop_quota(*, target: str, creator: str | None) -> None:
    """Refuse a loop that would pass DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION (contract §3 quota_exceeded).

    Counted per target session; "new" and "self" loops per creator (selectors.active_loops_in_quota).
    Call it inside the transaction that inserts the loop, after lock_quota_count(), so that creates
    racing at the limit cannot each pass.
    """
    limit = settings.DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION
    count = active_loops_in_quota(target=target, created_by=creator)
    if count < limit:
        return
    advice = (
        f"DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION allows at most {limit}; delete some (loop_delete) or "
        "have an operator raise that setting."
    )
    if target not in {ReservedTarget.NEW, ReservedTarget.SELF}:
        raise QuotaExceeded(f"Session {target!r} already has {count} active loops and {advice}")
    by = f"Session {creator!r} has" if creator else "Callers with no session (the panel with no global interface) have"
    raise QuotaExceeded(
        f'{by} already created {count} active loops targeting "new" or "self" (counted '
        f"together per creator) and {advice}"
    )


def lock_quota_count(*, target: str, creator: str | None) -> None:
    """Serialize the creates that join one quota count, until the transaction ends. PostgreSQL: a
    transaction-scoped advisory lock on the count's name; SQLite: its IMMEDIATE transactions
    already serialize every writer."""
    bucket = f"creator:{creator}" if target in {ReservedTarget.NEW, ReservedTarget.SELF} else f"target:{target}"
    lock_until_commit(f"dshloop-quota {bucket}")


def loop_create(
    *,
    prompt: str,
    schedule: schedules.Schedule,
    target: str,
    preset: str | None,
    created_by: str,
    created_at: datetime,
    actor: Actor,
    v1_id: str | None = None,
    now: datetime | None = None,
    vouched: bool = True,
) -> Loop:
    """The one place a loop is made (the tools, the panel and the v1 import call it).

    `target` is "self", "new" or a session ID; `created_by` the creating session ("" for none).
    The first deadline is computed from `created_at` as seen at `now` (default: created_at): an
    imported v1 loop whose grid started earlier gets one catch-up, not a replay (spec §3).
    """
    created_at = truncate_to_ms(created_at)
    check_target(target=target, preset=preset)
    check_interval(schedule=schedule, target=target, now=created_at)
    loop_id = new_loop_id()
    loop = Loop(
        loop_id=loop_id,
        prompt=prompt,
        session_id=target,
        preset=preset or "",
        created_by_session_id=created_by,
        created_at=created_at,
        next_at=schedules.next_due(
            timing_of(schedule, loop_id),
            created_at=created_at,
            now=max(now or created_at, created_at),
            host_tz=settings.TIME_ZONE,
        ),
        state=LoopState.SCHEDULED,
        v1_id=v1_id,
    )
    loop.schedule = schedule
    if target == ReservedTarget.NEW:
        for field, value in unattended_defaults(creator=created_by).items():
            setattr(loop, field, value)
    if needs_approval(target=target, actor=actor, vouched=vouched):
        loop.state, loop.next_at, loop.paused_at, loop.pause_reason = (
            LoopState.PAUSED,
            None,
            created_at,
            AWAITING_APPROVAL,
        )
    loop.full_clean(validate_unique=False)  # uniqueness (v1_id): the database's, at the insert (races)
    with transaction.atomic():
        lock_quota_count(target=target, creator=created_by)
        check_loop_quota(target=target, creator=created_by)
        loop.save(force_insert=True)
        record_event(loop, EventKind.CREATED, actor, at=created_at)
    transaction.on_commit(notify_clocks)
    return loop


def loop_create_from(
    data: LoopCreateIn, *, target: str, created_by: str, actor: Actor, now: datetime, vouched: bool = True
) -> Loop:
    """A loop from the loop_create input (the tool's and the panel's, validated as LoopCreateIn):
    its schedule read at `now`, which is also its creation time. The caller decides the target
    (the input's session_id, or the calling session) and the creator; `vouched` as needs_approval."""
    return loop_create(
        prompt=data.prompt,
        schedule=data.to_schedule(host_tz=settings.TIME_ZONE, now=now),
        target=target,
        preset=data.preset,
        created_by=created_by,
        created_at=now,
        actor=actor,
        vouched=vouched,
    )
