"""Middleware for the API's error contract."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse

from .errors import ApiError


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
