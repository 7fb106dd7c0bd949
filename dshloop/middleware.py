"""Middleware for the API's error contract, and the answer to every exception nothing else answered.

A request meets one of two kinds of failure that are not its own fault (contract §3 "Errors"):

- The database cannot be reached (core.errors.database_unavailable): 503 `unavailable` with
  `Retry-After`, logged as one warning line (an outage is not a bug: a traceback per request would
  bury the log), and this thread's broken connection is closed, so that the first request after the
  database is back opens a new one instead of failing on the dead one.
- Anything else is a bug: 500 `internal_error`, logged with its traceback and counted in /metrics
  (`dshloop_http_unexpected_errors_total`). The client gets no detail it could not act on.

`/api/` and `/metrics` answer with the contract's JSON error body (their clients are programs);
the panel and the admin with a short HTML page. Exceptions inside a view come here through
process_exception (or, under /api/, django-ninja's handler in dshloop.api, which calls
error_for_exception); one raised by another middleware reaches Django's handler500, server_error.
"""

from __future__ import annotations

import json
import logging
import sys

from django.conf import settings
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.db import connections
from django.http import Http404, HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParserError

from core.errors import RETRY_AFTER_SECONDS, ApiError, Unavailable, UnexpectedError, database_unavailable, one_line
from monitoring.metrics import count_unexpected_error

logger = logging.getLogger("dshloop.errors")

# What Django itself answers with a 4xx (django.core.handlers.exception.response_for_exception):
# left to it, never counted as bugs.
DJANGO_ANSWERS = (Http404, PermissionDenied, BadRequest, SuspiciousOperation, MultiPartParserError)
METRICS_PATH = "/metrics"
UNAVAILABLE_PAGE = (
    "<!doctype html><title>Service unavailable</title><h1>Service unavailable (503)</h1>"
    "<p>The database cannot be reached right now; try again in a few seconds.</p>"
)
SERVER_ERROR_PAGE = "<!doctype html><title>Server Error</title><h1>Server Error (500)</h1>"


def answers_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or request.path == METRICS_PATH


def drop_broken_connections() -> None:
    """Close this thread's connections that no longer work (as monitoring.health does), never inside a
    transaction: closing would doom it."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def error_for_exception(request: HttpRequest, exc: BaseException) -> ApiError:
    """Log (and count) an exception no handler expected; the contract's error to answer with."""
    if database_unavailable(exc):
        logger.warning(
            "%s %s: the database is unavailable, answered 503: %s", request.method, request.path, one_line(exc)
        )
        drop_broken_connections()
        return Unavailable()
    logger.error("%s %s: unexpected error, answered 500", request.method, request.path, exc_info=exc)
    count_unexpected_error()
    return UnexpectedError()


def with_retry_after(response: HttpResponse, error: ApiError) -> HttpResponse:
    if error.status == 503:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def error_response(request: HttpRequest, error: ApiError) -> HttpResponse:
    if answers_json(request):
        response = HttpResponse(json.dumps(error.body()), status=error.status, content_type="application/json")
    else:
        page = UNAVAILABLE_PAGE if error.status == 503 else SERVER_ERROR_PAGE
        response = HttpResponse(page, status=error.status, content_type="text/html; charset=utf-8")
    return with_retry_after(response, error)


class ServerErrors:
    """An exception a view raised and did not handle becomes the answer described above."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, DJANGO_ANSWERS):
            return None
        if settings.DEBUG and not answers_json(request) and not database_unavailable(exception):
            # Django's debug page is the developer's better answer; Django logs it (django.request).
            count_unexpected_error()
            return None
        return error_response(request, error_for_exception(request, exception))


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: an exception outside any view (in a middleware) that Django caught. Django logs
    it itself (the django.request logger, with its traceback) once this returns."""
    exc = sys.exception()
    if exc is not None and database_unavailable(exc):
        return error_response(request, error_for_exception(request, exc))
    count_unexpected_error()
    return error_response(request, UnexpectedError())


class ApiMethodNotAllowed:
    """contract §3: every 4xx from /api/ carries the error body — including the 405 that
    django-ninja answers by itself, before any exception handler runs, for a known path called
    with a method it does not take."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code != 405 or not request.path.startswith("/api/"):
            return response
        allowed = response.get("Allow", "")
        error = ApiError(f"{request.method} is not allowed here; use {allowed or 'another method'}.", status=405)
        replacement = HttpResponse(json.dumps(error.body()), status=405, content_type="application/json")
        if allowed:
            replacement["Allow"] = allowed
        return replacement
