"""The NinjaAPI assembly: routers, and the one place where errors become the contract's body."""

from __future__ import annotations

import logging

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from .errors import ApiError, InvalidInput, NotFound, Unauthorized
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


def _mount_routers() -> None:
    from loops.api import loops_router, tools_router
    from loops.health import router as health_router
    from sessions_app.api import host_router, session_tools_router

    from .tools import router as catalogue_router

    api.add_router("/tools", catalogue_router)
    api.add_router("/tools", tools_router)
    api.add_router("/tools", session_tools_router)
    api.add_router("/loops", loops_router)
    api.add_router("/host", host_router)
    api.add_router("", health_router)


_mount_routers()
