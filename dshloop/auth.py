"""Bearer-token authentication with scopes (contract §2)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer

from tokens.models import ApiToken
from tokens.services import token_authenticate

from .errors import Forbidden, Unauthorized


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
