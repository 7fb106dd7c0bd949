"""Bearer-token authentication with scopes (contract §2)."""

from __future__ import annotations

from functools import wraps

from django.http import HttpRequest, JsonResponse
from ninja.security import HttpBearer

from core.errors import ApiError, Forbidden, Unauthorized
from tokens.models import ApiToken
from tokens.services import token_authenticate


class ScopedBearer(HttpBearer):
    def __init__(self, scope: str):
        super().__init__()
        self.scope = scope

    def __call__(self, request: HttpRequest):
        # ninja answers a missing header with its own bare 401; ours carries the error body.
        if not request.headers.get(self.header):
            raise Unauthorized("Send 'Authorization: Bearer <token>'; create a token with manage.py create_api_token.")
        return super().__call__(request)

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken:
        api_token = token_authenticate(token)
        if api_token is None:
            raise Unauthorized("The bearer token is unknown or revoked.")
        if not api_token.has_scope(self.scope):
            raise Forbidden(f"This token lacks the '{self.scope}' scope needed here.")
        return api_token


tools_auth = ScopedBearer("tools")
host_auth = ScopedBearer("host")


def docs_access(view):
    """contract §2: every /api/ call but health needs a bearer token, the API's description
    (/api/docs, /api/openapi.json) too; any scope will do. A signed-in staff user (the panel's
    login) reads it too: a browser opening /api/docs cannot send the header."""

    @wraps(view)
    def guarded(request: HttpRequest, *args, **kwargs):
        user = getattr(request, "user", None)
        if user is not None and user.is_active and user.is_staff:
            return view(request, *args, **kwargs)
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            error = Unauthorized(
                "Send 'Authorization: Bearer <token>' (any scope), or sign in at "
                f"/admin/login/?next={request.path} to read it in a browser."
            )
        elif token_authenticate(token.strip()) is None:
            error = Unauthorized("The bearer token is unknown or revoked.")
        else:
            return view(request, *args, **kwargs)
        return JsonResponse(error.body(), status=error.status)

    return guarded


manage_auth = ScopedBearer("manage")


def bearer_scope(scope: str):
    """A plain Django view (outside the NinjaAPI, e.g. GET /metrics) behind a bearer token with
    `scope`, answering 401/403 with the contract's error body like the API does."""

    def decorate(view):
        @wraps(view)
        def guarded(request: HttpRequest, *args, **kwargs):
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            api_token = token_authenticate(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
            error: ApiError
            if not token.strip() or scheme.lower() != "bearer":
                error = Unauthorized(
                    "Send 'Authorization: Bearer <token>'; create a token with manage.py create_api_token."
                )
            elif api_token is None:
                error = Unauthorized("The bearer token is unknown or revoked.")
            elif not api_token.has_scope(scope):
                error = Forbidden(f"This token lacks the '{scope}' scope needed here.")
            else:
                return view(request, *args, **kwargs)
            return JsonResponse(error.body(), status=error.status)

        return guarded

    return decorate
