"""Domain errors that carry the contract's error body (contract §3 "Errors")."""

from __future__ import annotations


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

    def body(self) -> dict:
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


class NoCurrentSession(ApiError):
    code = "no_current_session"


class UnknownSession(ApiError):
    code = "unknown_session"


class UnknownPreset(ApiError):
    code = "unknown_preset"


def host_unavailable(exc: Exception) -> TargetUnavailable:
    """The DSH host could not answer a lookup a tool needs: the target cannot be used right now."""
    return TargetUnavailable(f"{exc} Try again shortly.")
