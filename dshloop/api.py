"""The NinjaAPI assembly: routers, and the one place where errors become the contract's body."""

from __future__ import annotations

import logging
from functools import wraps

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest
from django.urls import register_converter
from django.urls.converters import PathConverter
from ninja import NinjaAPI, Router
from ninja.errors import AuthenticationError, HttpError, ValidationError
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from sessions_app.hosts.base import HostError

from .errors import ApiError, InvalidInput, NotFound, Unauthorized, host_unavailable
from .schemas import Identifier
from .validation import invalid_input_from

logger = logging.getLogger("dshloop.api")

api = NinjaAPI(
    title="dshloop",
    version="1",
    description="Durable cross-session loops for agent sessions. Tools at /api/tools/<name>.",
    urls_namespace="api",
    docs_url="/docs",
)


def _respond(request: HttpRequest, error: ApiError):
    return api.create_response(request, error.body(), status=error.status)


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


@api.exception_handler(RequestDataTooBig)
def on_too_big(request, exc):
    return _respond(request, InvalidInput("The request body is too large."))


CALLER_HEADER = "X-DSH-Session-Id"  # contract §2: the caller's session
_identifier = TypeAdapter(Identifier)


def _check_identifier(value: str, field: str) -> None:
    try:
        _identifier.validate_python(value)
    except PydanticValidationError as exc:
        raise invalid_input_from([{**e, "loc": (field,)} for e in exc.errors()]) from exc


def refuse_impossible_ids(view):
    """Path IDs and the caller header go straight into lookups: refuse what no ID can be.

    PostgreSQL cannot even compare text holding NUL, and neither database can encode a lone
    surrogate, so such a value would be a 500 instead of the contract's 4xx (contract §3).
    """

    @wraps(view)
    def checked(request: HttpRequest, *args, **kwargs):
        match = request.resolver_match
        for name, value in (match.kwargs if match else {}).items():
            if isinstance(value, str):
                _check_identifier(value, name)
        caller = request.headers.get(CALLER_HEADER, "").strip()
        if caller:
            _check_identifier(caller, CALLER_HEADER)
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


def _mount_routers() -> None:
    from loops.api import loops_router, tools_router
    from loops.health import router as health_router
    from sessions_app.api import host_router, session_tools_router

    from .tools import router as catalogue_router

    mounts = [
        ("/tools", catalogue_router),
        ("/tools", tools_router),
        ("/tools", session_tools_router),
        ("/loops", loops_router),
        ("/host", host_router),
    ]
    for prefix, router in mounts:
        router.add_decorator(refuse_impossible_ids)
        api.add_router(prefix, router)
    api.add_router("", health_router)  # no IDs, no caller: nothing to refuse
    api.add_router("", fallback_router)


_mount_routers()
