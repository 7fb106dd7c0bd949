"""Domain errors that carry the contract's error body (contract §3 "Errors")."""

from __future__ import annotations

import sys

from django.db import InterfaceError, OperationalError

# Errors a database raises when it cannot be reached: Django's wrapped ones (every ORM and cursor
# call goes through wrap_database_errors), and psycopg's own for code that talks to the driver
# directly (a LISTEN connection). database_unavailable() then looks at the driver's error, because
# these classes also carry bugs (SQLite's "no such table" is an OperationalError).
DATABASE_ERRORS = (OperationalError, InterfaceError)
# PostgreSQL SQLSTATE classes that say "not reachable now": 08 connection exceptions, 57P0x a server
# shutting down or starting up, 53 insufficient resources (too many connections, disk full). A
# client-side failure (connection refused, connection closed) has no SQLSTATE at all. Deadlocks and
# serialization failures (40) are not here: a request meeting one is a bug to fix, not an outage.
_PG_UNAVAILABLE_STATES = ("08", "57P", "53")
# Class 40: a deadlock or a serialization failure rolled the transaction back; the same work tried
# again later goes through (a scheduler's delivery retries it; a request answers it as a bug).
_PG_ROLLED_BACK_STATE = "40"
# SQLite's words for a file another process holds locked past the busy timeout, or cannot open.
_SQLITE_UNAVAILABLE = ("database is locked", "database table is locked", "unable to open database", "disk I/O error")
# Seconds a client is asked to wait (Retry-After) while the database is away: a restart takes a
# few seconds, and the first request after it reconnects.
RETRY_AFTER_SECONDS = 5


class ApiError(Exception):
    status = 422
    code = "invalid_input"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        if code:
            self.code = code
        if status:
            self.status = status

    def body(self) -> dict[str, dict[str, str]]:
        error = {"code": self.code, "message": self.message}
        if self.field:
            error["field"] = self.field
        return {"error": error}


class InvalidInput(ApiError):
    code = "invalid_input"


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class NotFound(ApiError):
    status, code = 404, "not_found"


class UnknownLoop(ApiError):
    status, code = 404, "unknown_loop"


class TargetUnavailable(ApiError):
    status, code = 409, "target_unavailable"


class RunInFlight(ApiError):
    status, code = 409, "run_in_flight"


class NotFailed(ApiError):
    status, code = 409, "not_failed"


class LoopCompleted(ApiError):
    status, code = 409, "loop_completed"


class OutcomeRecorded(ApiError):
    status, code = 409, "outcome_recorded"


class QuotaExceeded(ApiError):
    status, code = 409, "quota_exceeded"


class IdempotencyKeyReused(InvalidInput):
    """An Idempotency-Key the session already used for a different request (docs/tools-and-api.md): the
    contract's 422 `invalid_input` with `field` naming the header, as the contract lists no code of its own."""


class Unavailable(ApiError):
    """The database cannot be reached: nothing is wrong with the request, so the client retries."""

    status, code = 503, "unavailable"

    def __init__(self, message: str = "The database cannot be reached right now; try again in a few seconds."):
        super().__init__(message)


class UnexpectedError(ApiError):
    """A bug: the details go to the server's log (never to the client, who cannot act on them)."""

    status, code = 500, "internal_error"

    def __init__(self, message: str = "An unexpected error occurred on the server; its log has the details."):
        super().__init__(message)


class NoCurrentSession(ApiError):
    code = "no_current_session"


class UnknownSession(ApiError):
    code = "unknown_session"


class UnknownPreset(ApiError):
    code = "unknown_preset"


class IntervalTooShort(ApiError):
    code = "interval_too_short"


def host_unavailable(exc: Exception) -> TargetUnavailable:
    """The DSH host could not answer a lookup a tool needs: the target cannot be used right now."""
    return TargetUnavailable(f"{exc} Try again shortly.")


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` means the database cannot be reached right now (answer 503, retry later)
    rather than a bug (500)."""
    # A driver only if something imported it: none of its errors exists before, and on SQLite no
    # process should load PostgreSQL's driver (megabytes of imports) just to be able to name its errors.
    psycopg, sqlite3 = sys.modules.get("psycopg"), sys.modules.get("sqlite3")
    if psycopg is not None and isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        driver_error: BaseException | None = exc
    elif isinstance(exc, DATABASE_ERRORS):
        driver_error = exc.__cause__  # Django raises its own class `from` the driver's error
    else:
        return False
    if psycopg is not None and isinstance(driver_error, psycopg.Error):
        state = driver_error.sqlstate
        return state is None or state.startswith(_PG_UNAVAILABLE_STATES)
    if sqlite3 is not None and isinstance(driver_error, sqlite3.Error):
        return str(driver_error).startswith(_SQLITE_UNAVAILABLE)
    return True  # Django's own, with no driver error behind it: "connection already closed"


def transaction_rolled_back(exc: BaseException) -> bool:
    """Whether PostgreSQL rolled `exc`'s transaction back for a deadlock or a serialization failure
    (SQLSTATE class 40): nothing wrong with the work, which goes through when tried again."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None:
        return False
    driver_error = exc if isinstance(exc, psycopg.Error) else exc.__cause__
    state = driver_error.sqlstate if isinstance(driver_error, psycopg.Error) else None
    return state is not None and state.startswith(_PG_ROLLED_BACK_STATE)


def one_line(exc: BaseException) -> str:
    """An error's text for a log line: psycopg's span several lines ("…refused\n\tIs the server
    running…?"), which would break a line-per-record log."""
    return " ".join(str(exc).split()) or type(exc).__name__
