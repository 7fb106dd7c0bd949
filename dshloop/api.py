"""The NinjaAPI assembly: routers, and the one place where errors become the contract's body."""

from __future__ import annotations

import logging
from functools import wraps
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.core.exceptions import BadRequest, PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.http import Http404, HttpRequest
from django.urls import register_converter
from django.urls.converters import PathConverter
from ninja import NinjaAPI, Router
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser

from core.errors import ApiError, Forbidden, InvalidInput, NotFound, Unauthorized, host_unavailable
from core.http import RAW_PATH_INFO
from core.jsonparse import json_loads
from core.validation import check_identifier, invalid_input_from
from dshloop.middleware import error_for_exception, with_retry_after
from loops.api import loops_router, manage_router, runs_router
from monitoring.health import router as health_router
from monitoring.metrics import series_catalogue
from scheduler.api import host_runs_router
from sessions_app.api import host_router, plugin_router
from sessions_app.hosts.base import HostError
from tokens.auth import docs_access
from tools.api import router as tools_router

logger = logging.getLogger("dshloop.api")


class JsonParser(Parser):
    """ninja's parser with json_loads: a refused body makes ninja's 400, "not valid JSON" (on_http_error)."""

    def parse_body(self, request: HttpRequest):
        return json_loads(request.body)


# ErrorOut is in the components already: every operation documents its 4xx with it (schemas.answers).
UNAVAILABLE_RESPONSE = {
    "description": (
        "`unavailable`: the database cannot be reached right now; nothing is wrong with the request. "
        "Retry after the seconds in the `Retry-After` header."
    ),
    "headers": {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}},
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
}


class DshloopApi(NinjaAPI):
    def get_openapi_schema(self, **kwargs):
        """The operations' own responses, plus the 503 that any of them answers when the database
        cannot be reached (on_unexpected); /api/health documents its own 503 (its verdict)."""
        schema = super().get_openapi_schema(**kwargs)
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                if isinstance(operation, dict) and "responses" in operation:
                    operation["responses"].setdefault(503, UNAVAILABLE_RESPONSE)
        return schema


api = DshloopApi(
    title="dshloop",
    version="1",
    description=(
        "Durable cross-session loops for agent sessions. Tools at /api/tools/<name>. "
        "Outside /api/: `GET /metrics` (scope manage) answers in the Prometheus text format "
        f"({', '.join(series_catalogue())}); see docs/monitoring.md "
        'in the repository. Every error has the body `{"error": {"code", "message", "field"?}}`; '
        "besides each operation's own, any of them may answer 503 `unavailable` (the database cannot be reached: "
        "retry after the `Retry-After` header's seconds) or, for a bug, 500 `internal_error`."
    ),
    urls_namespace="api",
    docs_url="/docs",
    docs_decorator=docs_access,
    parser=JsonParser(),
)


def _respond(request: HttpRequest, error: ApiError):
    return with_retry_after(api.create_response(request, error.body(), status=error.status), error)


@api.exception_handler(ApiError)
def on_api_error(request, exc: ApiError):
    return _respond(request, exc)


@api.exception_handler(HostError)
def on_host_error(request, exc: HostError):
    return _respond(request, host_unavailable(exc))


@api.exception_handler(ValidationError)
def on_validation_error(request, exc: ValidationError):
    return _respond(request, invalid_input_from(exc.errors))


@api.exception_handler(AuthenticationError)
def on_authentication_error(request, exc):
    return _respond(request, Unauthorized("A valid bearer token is required."))


@api.exception_handler(HttpError)
def on_http_error(request, exc: HttpError):
    if exc.status_code == 400:  # ninja: the body is not JSON
        return _respond(request, InvalidInput("The request body is not valid JSON (UTF-8 encoded)."))
    return _respond(request, ApiError(str(exc), status=exc.status_code, code="invalid_input"))


@api.exception_handler(Http404)
def on_not_found(request, exc):
    return _respond(request, NotFound("Nothing is at this path."))


@api.exception_handler(PermissionDenied)
def on_permission_denied(request, exc):
    return _respond(request, Forbidden("You may not do this."))


@api.exception_handler(BadRequest)
@api.exception_handler(SuspiciousOperation)
def on_bad_request(request, exc):
    # What Django itself would answer 400; RequestDataTooBig, a SuspiciousOperation, has its own below.
    return _respond(request, InvalidInput("The request was refused as malformed.", status=400))


@api.exception_handler(Exception)
def on_unexpected(request, exc: Exception):
    """Everything else: 503 `unavailable` when the database cannot be reached, otherwise a bug, logged
    with its traceback, counted, and answered 500 `internal_error` (dshloop.middleware) — also under
    DEBUG, where ninja would answer the traceback as text."""
    return _respond(request, error_for_exception(request, exc))


@api.exception_handler(RequestDataTooBig)
def on_too_big(request, exc):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return _respond(
        request,
        ApiError(f"The request body is too large: at most {limit:,} bytes are read.", status=413, code="too_large"),
    )


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _check_path_is_utf8(request: HttpRequest, path_ids: dict) -> None:
    """Django decodes a path that is not UTF-8 by re-escaping the bad bytes ("%FF" stays "%FF"), so
    a path ID would silently become other text; refuse it, as a JSON body that is not UTF-8 is."""
    try:  # the percent-decoded bytes as Latin-1, as the server gave them (dshloop.wsgi, dshloop.asgi)
        raw = request.META.get(RAW_PATH_INFO, "").encode("latin-1")
    except UnicodeEncodeError:  # already text: nothing was replaced
        return
    if _is_utf8(raw):
        return
    broken = [name for name, value in path_ids.items() if not _is_utf8(unquote_to_bytes(value))]
    field = broken[0] if broken else None
    what = f"The path's '{field}'" if field else "The path"
    raise InvalidInput(f"{what} is not valid UTF-8 once its %-escapes are decoded.", field=field)


def refuse_impossible_ids(view):
    """Path IDs go straight into lookups: refuse what no ID can be (the caller header is checked by
    the tools, tools.functions, whichever transport carries it).

    PostgreSQL cannot even compare text holding NUL, and neither database can encode a lone
    surrogate, so such a value would be a 500 instead of the contract's 4xx (contract §3). Bytes
    that are not UTF-8 would be guessed at (U+FFFD, re-escaped, or Latin-1): refused too.
    """

    @wraps(view)
    def checked(request: HttpRequest, *args, **kwargs):
        match = request.resolver_match
        path_ids = {name: value for name, value in (match.kwargs if match else {}).items() if isinstance(value, str)}
        _check_path_is_utf8(request, path_ids)
        for name, value in path_ids.items():
            check_identifier(value, field=name)
        return view(request, *args, **kwargs)

    return checked


class AnyPathConverter(PathConverter):
    regex = r"(?s:.+)"  # Django's `path` stops at a newline; an unknown path may hold one.


register_converter(AnyPathConverter, "anypath")

# Mounted last, so only paths no other route answers reach it: their 404 carries the error body too.
fallback_router = Router(auth=None)
_ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE"]


@fallback_router.api_operation(_ANY_METHOD, "", include_in_schema=False)
def api_root(request):
    raise NotFound("Nothing is at /api/ itself; GET /api/tools lists the tools and /api/docs the whole API.")


@fallback_router.api_operation(_ANY_METHOD, "/{anypath:rest}", include_in_schema=False)
def unknown_path(request, rest: str):
    raise NotFound("Nothing is at this path; GET /api/tools lists the tools and /api/docs the whole API.")


for prefix, router in [
    ("/tools", tools_router),
    ("/loops", loops_router),
    ("/loops", manage_router),
    ("/runs", runs_router),
    ("/host", host_router),
    ("/host", host_runs_router),
    ("/dsh", plugin_router),
]:
    router.add_decorator(refuse_impossible_ids)
    api.add_router(prefix, router)
api.add_router("", health_router)  # no IDs: nothing to refuse
api.add_router("", fallback_router)
