"""Writes to the loop registry: loop_create and loop_delete (spec §2.1, §2.3, §9)."""

from __future__ import annotations

import logging
import secrets
import threading
from collections import OrderedDict
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from dshloop.errors import (
    InvalidInput,
    NoCurrentSession,
    QuotaExceeded,
    TargetUnavailable,
    UnknownPreset,
    UnknownSession,
)
from dshloop.timeutil import truncate_to_ms
from sessions_app.hosts import get_host

from . import schedules
from .models import Loop, LoopState
from .schemas import AfterSchedule, CronSchedule, EverySchedule, LoopCreateIn
from .selectors import active_loops_in_quota, loop_get

logger = logging.getLogger("dshloop.loops")

SELF, NEW, GLOBAL = "self", "new", "global"


# spec §10: the deprecated v1 aliases (loop_create time_in_seconds, loop_delete {id}). Operators need to
# see *who* still speaks v1, not one line per call: each (alias, caller) pair is logged once per
# process, at WARNING. The memory is a small LRU of at most ALIAS_CALLERS_REMEMBERED pairs, so a
# stream of distinct callers cannot grow it; a caller pushed out of it is simply named again.
ALIAS_CALLERS_REMEMBERED = 4096
_alias_callers: OrderedDict[tuple[str, str], None] = OrderedDict()
_alias_callers_lock = threading.Lock()  # the server may handle requests on several threads


def log_deprecated_alias(alias: str, *, caller_session_id: str | None) -> bool:
    """Log the first use of a deprecated alias by a caller; returns whether it logged."""
    key = (alias, caller_session_id or "")
    with _alias_callers_lock:
        if key in _alias_callers:
            _alias_callers.move_to_end(key)
            return False
        _alias_callers[key] = None
        while len(_alias_callers) > ALIAS_CALLERS_REMEMBERED:
            _alias_callers.popitem(last=False)
    logger.warning("deprecated v1 alias %s used by session %s; switch it to the v2 form (logged once per caller)",
                   alias, repr(caller_session_id) if caller_session_id else "(none: no X-DSH-Session-Id)")
    return True


def new_loop_id() -> str:
    return "loop_" + secrets.token_hex(8)


def require_caller(caller_session_id: str | None) -> str:
    if not caller_session_id:
        raise NoCurrentSession(
            "No current session: send the X-DSH-Session-Id header, or name a session_id.", field="session_id"
        )
    return caller_session_id


def schedule_from_input(data: LoopCreateIn, *, now: datetime) -> schedules.Schedule:
    if data.schedule is not None and data.v1_interval is not None:
        raise InvalidInput(
            "Give either 'schedule' or the deprecated 'time_in_seconds', not both.", field="time_in_seconds"
        )
    if data.schedule is None and data.v1_interval is None:
        raise InvalidInput("'schedule' is required, e.g. {\"kind\": \"every\", \"every_seconds\": 600}.",
                           field="schedule")
    if data.v1_interval is not None:
        return schedules.Every(data.v1_interval)  # spec §10: the v1 alias
    if isinstance(data.schedule, EverySchedule):
        return schedules.Every(data.schedule.every_seconds)
    if isinstance(data.schedule, AfterSchedule):
        return schedules.After(data.schedule.after_seconds)
    assert isinstance(data.schedule, CronSchedule)
    try:
        return schedules.validate_cron(data.schedule.expr, data.schedule.tz, host_tz=settings.TIME_ZONE, now=now)
    except schedules.ScheduleError as exc:
        raise InvalidInput(exc.message, field=exc.field, code=exc.code) from exc


def resolve_target(*, session_id: str | None, preset: str | None, caller_session_id: str | None) -> str:
    """The stored target: "self", "new" or a session ID the host knows (spec §2.1, §9)."""
    host = get_host()
    target = session_id if session_id is not None else require_caller(caller_session_id)
    if target == GLOBAL:
        raise InvalidInput("'global' is a loop_list selector, not a target; use \"self\" for the global "
                           "interface session.", field="session_id")
    if preset is not None:
        if target != NEW:
            raise InvalidInput("'preset' is only accepted with session_id \"new\": presets are mounted when a "
                               "session starts.", field="preset")
        found = host.get_preset(preset)
        if found is None or not found.mountable:
            reason = "does not exist" if found is None else "cannot be mounted on a new session"
            raise UnknownPreset(f"Preset {preset!r} {reason}.", field="preset")
    if target == SELF:
        if host.global_session() is None:
            raise TargetUnavailable("The global interface session is unavailable, so \"self\" cannot be "
                                    "targeted; pick another session.", field="session_id")
    elif target != NEW and host.get_session(target) is None:
        field = "session_id" if session_id is not None else None
        raise UnknownSession(f"The host knows no session {target!r}; list_sessions shows the ones it knows.",
                             field=field)
    return target


def check_loop_quota(*, target: str, creator: str | None, pending: int = 0) -> None:
    """Refuse a loop that would pass DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION (contract §3 quota_exceeded).

    Counted per target session; "new" and "self" loops per creator (selectors.active_loops_in_quota).
    `pending`: loops about to be added to the same count that are not rows yet (a dry-run import).
    Call it inside the transaction that inserts the loop, after lock_quota_count(), so that creates
    racing at the limit cannot each pass.
    """
    limit = settings.DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION
    count = active_loops_in_quota(target=target, created_by=creator) + pending
    if count < limit:
        return
    advice = (f"DSHLOOP_MAX_ACTIVE_LOOPS_PER_SESSION allows at most {limit}; delete some (loop_delete) or "
              "have an operator raise that setting.")
    if target not in {NEW, SELF}:
        raise QuotaExceeded(f"Session {target!r} already has {count} active loops and {advice}")
    by = f"Session {creator!r} has" if creator else "Callers with no session (the panel with no global interface) have"
    raise QuotaExceeded(f"{by} already created {count} active loops targeting \"new\" or \"self\" (counted "
                        f"together per creator) and {advice}")


def lock_quota_count(*, target: str, creator: str | None) -> None:
    """Serialize the creates that join one quota count, until the transaction ends. PostgreSQL: a
    transaction-scoped advisory lock on the count's name; SQLite: its IMMEDIATE transactions
    already serialize every writer."""
    if connection.vendor != "postgresql":
        return
    bucket = f"creator:{creator}" if target in {NEW, SELF} else f"target:{target}"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"dshloop-quota {bucket}"])


def loop_create(*, data: LoopCreateIn, caller_session_id: str | None, now: datetime | None = None) -> Loop:
    now = truncate_to_ms(now or timezone.now())
    schedule = schedule_from_input(data, now=now)
    if data.v1_interval is not None:
        log_deprecated_alias("loop_create time_in_seconds", caller_session_id=caller_session_id)
    target = resolve_target(session_id=data.session_id, preset=data.preset, caller_session_id=caller_session_id)
    creator = caller_session_id
    if not creator:
        # contract §2: loops created without a caller session (e.g. the panel) record the global interface.
        # With none (an HTTP host without one, or it was removed) the creator is recorded as none (""; the
        # field stays a string, spec §4) rather than refusing the loop (issue 12): the target was named,
        # and at delivery a `new` loop inherits the profile default, recorded on the run (spec §2.1).
        global_session = get_host().global_session()
        creator = global_session.session_id if global_session is not None else ""
    loop = Loop(
        loop_id=new_loop_id(),
        prompt=data.prompt,
        kind=schedule.kind,
        every_seconds=getattr(schedule, "every_seconds", None),
        after_seconds=getattr(schedule, "after_seconds", None),
        cron_expr=getattr(schedule, "expr", ""),
        tz=getattr(schedule, "tz", None) or "",
        session_id=target,
        preset=data.preset or "",
        created_by_session_id=creator,
        created_at=now,
        next_at=schedules.first_occurrence(schedule, created_at=now, host_tz=settings.TIME_ZONE),
        state=LoopState.SCHEDULED,
    )
    loop.full_clean()
    with transaction.atomic():
        lock_quota_count(target=target, creator=creator)
        check_loop_quota(target=target, creator=creator)
        loop.save(force_insert=True)
    transaction.on_commit(wake_clocks)
    return loop


def loop_delete(*, loop_id: str) -> str:
    """Delete by globally unique ID, from any caller (spec §2.3). Run history stays."""
    deleted, _ = Loop.objects.filter(loop_id=loop_id).delete()
    if not deleted:
        loop_get(loop_id)  # raises unknown_loop
    transaction.on_commit(wake_clocks)
    return loop_id


def wake_clocks() -> None:
    """Tell sleeping schedulers that the earliest deadline may have changed (see loops.clock)."""
    from .clock import notify_clocks

    notify_clocks()
