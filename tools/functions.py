"""The five agent tools, each one plain function `(payload, caller) -> Out` (STYLE 15).

REST (tools.api) and MCP (tools.mcp) are thin adapters over these functions: the rules a tool
applies on top of the services live here once, whichever transport carries the call — the caller
checks (contract §2), the v1 alias precedence and its log (spec §10). `caller` is the calling
session as the transport named it (the X-DSH-Session-Id header, the stdio --session flag), None
when it named none.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.conf import settings
from django.core import signing
from django.utils import timezone

from core.errors import Forbidden, InvalidInput, NoCurrentSession, UnknownSession
from core.http import CALLER_HEADER, IDEMPOTENCY_HEADER
from core.timeutil import truncate_to_ms
from core.validation import check_identifier
from loops.events import Actor
from loops.presenters import (
    LOOP_VIEW_COLUMNS,
    ROW_EPOCH_US,
    LoopListRow,
    loop_list_json,
    loop_list_json_of_chunks,
    loop_view,
)
from loops.schemas import LoopCreateIn, LoopDeleteIn, LoopDeleteOut, LoopListIn, LoopView
from loops.selectors import Position, loop_row_chunks, loop_rows, made_for_fresh_run
from loops.selectors import loop_list as select_loops
from loops.services import create, lifecycle
from sessions_app.hosts import get_host, global_session_id
from sessions_app.models import RESERVED_SESSION_IDS, ReservedTarget
from sessions_app.presenters import session_view
from sessions_app.schemas import CheckSessionStatusIn, ListSessionsIn, SessionsOut, SessionStatusView

from . import idempotency
from .aliases import log_deprecated_alias


def checked_caller(caller: str | None) -> str | None:
    """The caller's session as every tool reads it, or None; refuses what no session ID can be."""
    value = (caller or "").strip()
    if not value:
        return None
    if any("\ud800" <= ch <= "\udfff" for ch in value):  # bytes that were not UTF-8 (dshloop.wsgi)
        raise InvalidInput(
            f"{CALLER_HEADER} is not valid UTF-8: send the session ID as UTF-8 text.", field=CALLER_HEADER
        )
    if "," in value:
        # A server joins a repeated header with commas (RFC 9110 §5.3), so these look alike.
        raise InvalidInput(
            f"Send {CALLER_HEADER} once, with one session ID (it came twice, or holds a comma).", field=CALLER_HEADER
        )
    return check_identifier(value, field=CALLER_HEADER)


def caller_session(caller: str | None) -> str | None:
    """The caller as a session that loops can target or list (loop_create, loop_list)."""
    value = checked_caller(caller)
    if value in RESERVED_SESSION_IDS:
        # spec §9: no actual session is called "self", "new" or "global"; as the caller they would
        # silently turn {} into a self/new target (or a global list) and be recorded as the creator.
        raise InvalidInput(
            f"{CALLER_HEADER} must name the calling session, not the reserved {value!r}.", field=CALLER_HEADER
        )
    return value


def current_session(caller: str | None) -> str:
    """contract §2: where the spec says "the current session", the caller must be named and known."""
    if not caller:
        raise NoCurrentSession(
            f"No current session: send the {CALLER_HEADER} header, or name a session_id.", field="session_id"
        )
    if get_host().get_session(caller) is None:
        raise UnknownSession(f"The host knows no session {caller!r}; list_sessions shows the ones it knows.")
    return caller


def may_make_loops(caller: str | None) -> bool:
    """contract §15: a session dshloop made for a `new` run may create and delete loops only when
    DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS is on, so that unattended work cannot schedule more of
    itself; any other caller (or none) may. `caller` as checked_caller returns it."""
    return not caller or settings.DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS or not made_for_fresh_run(caller)


def check_may_make_loops(caller: str | None, tool: str) -> None:
    if not may_make_loops(caller):
        raise Forbidden(
            f"{tool} is not available to session {caller!r}: dshloop made it for an unattended run of a "
            "'new' loop, and such runs may not create or delete loops (an operator can allow it with "
            "DSHLOOP_FRESH_RUNS_MAY_CREATE_LOOPS=1). Report what you would schedule in your answer instead."
        )


def loop_create(payload: LoopCreateIn, caller: str | None, idempotency_key: str | None = None) -> LoopView:
    """spec §2.1: a prompt, a schedule (every / after / cron) and a target session. With an
    `idempotency_key`, a retry of the same request by the same session answers the loop the first
    call made (tools.idempotency)."""
    caller = caller_session(caller)
    check_may_make_loops(caller, "loop_create")
    if idempotency_key is None:
        return _create(payload, caller)
    key = check_identifier(idempotency_key, field=IDEMPOTENCY_HEADER)
    fingerprint = idempotency.request_hash(payload)

    def made() -> tuple[str, str]:
        view = _create(payload, caller)
        return view.loop_id, view.model_dump_json()

    answer = idempotency.create_once(
        session_id=caller or "", key=key, fingerprint=fingerprint, now=timezone.now(), create=made
    )
    return LoopView.model_validate_json(answer)


def _create(payload: LoopCreateIn, caller: str | None) -> LoopView:
    now = truncate_to_ms(timezone.now())
    if payload.v1_interval is not None:
        log_deprecated_alias("loop_create time_in_seconds", caller_session_id=caller)
    target = payload.session_id if payload.session_id is not None else current_session(caller)
    if caller is not None and payload.session_id is not None and get_host().get_session(caller) is None:
        # The caller is recorded as the creator, inherited from by `new` loops and counted by the
        # quota: an unknown one would let any header value open a fresh quota.
        raise UnknownSession(
            f"{CALLER_HEADER} names {caller!r}, a session the host does not know; send your own session ID.",
            field=CALLER_HEADER,
        )
    loop = create.loop_create_from(
        payload, target=target, created_by=caller or create.default_creator(), actor=Actor.session(caller), now=now
    )
    return LoopView.model_validate(loop_view(loop, now=now))


@dataclass(frozen=True)
class Encoded:
    """A tool's output already encoded as its output model's JSON: REST sends these bytes as they
    are, MCP parses them (tools.call), so both transports answer the same content."""

    json: bytes


def loop_list(payload: LoopListIn, caller: str | None) -> Encoded:
    """spec §2.2: {} for the caller's session, {"session_id": "global"} for all, or one session's;
    contract §3: the whole list, or pages of `limit` with `next_cursor` while more remain.

    The answer is LoopListOut encoded by loops.presenters.loop_list_json straight from database
    rows, not a model per loop: at 100,000 loops building and validating those would cost seconds.
    A whole list is encoded a chunk at a time as the database streams it, so the two work at
    once. tests/tools/test_loop_list_paging.py checks the encoding against the model.
    """
    caller = caller_session(caller)
    scope = payload.session_id if payload.session_id is not None else current_session(caller)
    # Refuses "self" and "new" before the cursor is read; only a session's list asks the host.
    global_id = None if scope == ReservedTarget.GLOBAL else global_session_id()
    loops = select_loops(scope=scope, global_session_id=global_id)
    after = None
    if payload.cursor is not None:
        if payload.limit is None:
            raise InvalidInput(
                "'cursor' needs 'limit': send the page size with every page (next_cursor continues a paged list).",
                field="cursor",
            )
        after = list_position(payload.cursor, scope=scope)
    now = timezone.now()
    limit = payload.limit
    if limit is None:  # the whole list, encoded as the database streams it
        return Encoded(loop_list_json_of_chunks(loop_row_chunks(loops, columns=LOOP_VIEW_COLUMNS), now=now))
    # One row more than the page, to know whether more remain.
    rows = loop_rows(loops, columns=LOOP_VIEW_COLUMNS, after=after, limit=limit + 1)
    if len(rows) <= limit:
        return Encoded(loop_list_json(rows, now=now))
    rows = rows[:limit]
    return Encoded(loop_list_json(rows, now=now, next_cursor=list_cursor(LoopListRow._make(rows[-1]), scope=scope)))


# --- loop_list cursors (contract §3: opaque) ------------------------------------------------------
# A cursor is the last listed loop's sort key (next_at, created_at, loop_id; instants in Unix epoch
# µs, whichever epoch list rows count from) and a digest of the list it belongs to, as signed JSON
# (django.core.signing, SECRET_KEY): a cursor that was changed, cut short or made up is refused
# instead of silently paging from somewhere else.
_CURSOR_SALT = "dshloop.loop_list.cursor"
_CURSOR_VERSION = 1


def _list_digest(scope: str) -> str:
    # Not the scope itself: a session ID can be 255 characters, and cursors stay short.
    return hashlib.sha256(scope.encode()).hexdigest()[:16]


def list_cursor(row: LoopListRow, *, scope: str) -> str:
    """next_cursor: the next page starts after `row`, in the list `scope` names."""
    next_us = None if row.next_at_us is None else row.next_at_us + ROW_EPOCH_US
    key = [_CURSOR_VERSION, _list_digest(scope), next_us, row.created_at_us + ROW_EPOCH_US, row.loop_id]
    return signing.Signer(salt=_CURSOR_SALT).sign_object(key)


def list_position(cursor: str, *, scope: str) -> Position:
    """The position a cursor names, if this server issued it for the list `scope` names."""
    try:
        key = signing.Signer(salt=_CURSOR_SALT).unsign_object(cursor)
    except signing.BadSignature:
        key = None
    match key:
        case [version, str() as digest, int() | None as next_us, int() as created_us, str() as loop_id] if (
            version == _CURSOR_VERSION
        ):
            pass
        case _:
            raise InvalidInput(
                "'cursor' is not a next_cursor this server issued (changed, cut short, or older than its "
                "secret key): send next_cursor exactly as it came, or start again without a cursor.",
                field="cursor",
            )
    if digest != _list_digest(scope):
        raise InvalidInput(
            "'cursor' belongs to another list: send it with the session_id (and the caller, for {}) of "
            "the page it came from.",
            field="cursor",
        )
    return (None if next_us is None else next_us - ROW_EPOCH_US), created_us - ROW_EPOCH_US, loop_id


def loop_delete(payload: LoopDeleteIn, caller: str | None) -> LoopDeleteOut:
    """spec §2.3: any loop, by its ID, from any caller (none is needed)."""
    caller = checked_caller(caller)
    check_may_make_loops(caller, "loop_delete")
    if payload.loop_id is not None and payload.v1_id is not None:
        raise InvalidInput("Give 'loop_id' or the deprecated 'id', not both.", field="id")
    loop_id = payload.loop_id if payload.loop_id is not None else payload.v1_id
    if loop_id is None:
        raise InvalidInput("'loop_id' is required.", field="loop_id")
    if payload.v1_id is not None:
        log_deprecated_alias("loop_delete {id}", caller_session_id=caller)
    return LoopDeleteOut(deleted=True, loop_id=lifecycle.loop_delete(loop_id=loop_id, actor=Actor.session(caller)))


def list_sessions(payload: ListSessionsIn, caller: str | None) -> SessionsOut:
    """spec §7: sessions, newest activity first, live and cold, with durable titles."""
    checked_caller(caller)
    sessions = get_host().list_sessions(limit=payload.limit)
    return SessionsOut.model_validate({"sessions": [session_view(session) for session in sessions]})


def check_session_status(payload: CheckSessionStatusIn, caller: str | None) -> SessionStatusView:
    """spec §7: running, idle, cold or missing for one exact session; never resumes it."""
    checked_caller(caller)
    session = get_host().get_session(payload.session_id)
    if session is None:
        return SessionStatusView(session_id=payload.session_id, status="missing")
    return SessionStatusView.model_validate(session_view(session))
