"""A real DSH host over HTTP (contract §6): bearer token, JSON, a 10 s timeout, pooled connections.

Failure mapping (the scheduler's failure policy, docs/tools-and-api.md "Semantics"): connection
refused, timeouts, 5xx, 429 and malformed JSON are transient; a 404 on the target is permanent
(or "missing" for lookups); any other 4xx is permanent, carrying the host's message.

Session headers the host returns are written to the local cache (SessionHeader), so that
list_sessions still answers with durable titles when a session is cold or the host is down:
one bulk upsert per list, and a session the host sent malformed is skipped (and logged), not
fatal for the others. dshloop never asks the host to generate or refresh a title.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from urllib.parse import quote

import httpx
from django.core.exceptions import ValidationError

from core.timeutil import from_ms
from sessions_app.models import SessionHeader, SessionStatus
from sessions_app.selectors import session_info, session_list
from sessions_app.services import session_headers_cache

from ..records import PresetInfo, SessionInfo
from .base import NO_PLACEMENT, Capabilities, Delivered, HostError, Message, Placement, deliver_each

_STATUSES = {choice.value for choice in SessionStatus}

logger = logging.getLogger("dshloop.hosts")


class NotFoundOnHost(HostError):
    def __init__(self, message: str):
        super().__init__(message, transient=False)


def _parse_time(value) -> datetime:
    if isinstance(value, bool) or value is None:
        raise ValueError("updated_at is missing")
    if isinstance(value, int | float):
        return from_ms(int(value))
    moment = datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _text(data: dict, key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def _storable(text: str) -> bool:
    """Whether every database can store the text: PostgreSQL refuses NUL, and none can store a
    lone surrogate (which JSON's "\\ud800" escapes can carry)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class HttpHost:
    label = "The HTTP host"
    capabilities = Capabilities(delivery_batch=1, transactional=False)

    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0, global_session_id: str = ""):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.global_session_id = global_session_id
        self._client: httpx.Client | None = None
        self._pid = 0

    @property
    def client(self) -> httpx.Client:
        # One pool per process: scheduler workers are forked, and a pool must not cross a fork.
        if self._client is None or self._pid != os.getpid():
            headers = {"Accept": "application/json"}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=self.timeout)
            self._pid = os.getpid()
        return self._client

    def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: dict | None = None,
        params: dict | None = None,
        headers: dict | None = None,
    ):
        what = f"{method} {path}"
        try:
            response = self.client.request(method, path, json=json_body, params=params, headers=headers)
        except httpx.TimeoutException as exc:
            raise HostError(
                f"The DSH host did not answer {what} within {self.timeout:g} s.", transient=True, unreachable=True
            ) from exc
        except httpx.HTTPError as exc:
            raise HostError(f"The DSH host is unreachable ({what}): {exc}", transient=True, unreachable=True) from exc
        if response.status_code == 404:
            raise NotFoundOnHost(f"The DSH host has no such resource ({what}).")
        if response.status_code >= 400:
            message = response.text.strip()[:300] or response.reason_phrase
            transient = response.status_code >= 500 or response.status_code == 429
            raise HostError(f"The DSH host answered {response.status_code} to {what}: {message}", transient=transient)
        if not response.content:
            return {}
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise HostError(f"The DSH host sent malformed JSON for {what}.", transient=True) from exc

    def _object(self, data, what: str) -> dict:
        if not isinstance(data, dict):
            raise HostError(f"The DSH host sent {type(data).__name__} where {what} was expected.", transient=True)
        return data

    def _header(self, data) -> SessionHeader:
        """One session from the host as an unsaved cache row, validated as the model validates
        (status, lengths) and storable, so that one bad session cannot fail a bulk write."""
        data = self._object(data, "a session object")
        session_id, status = data.get("session_id"), data.get("status")
        if not isinstance(session_id, str) or not session_id or status not in _STATUSES:
            raise HostError("The DSH host sent a session without a valid session_id and status.", transient=True)
        try:
            updated_at = _parse_time(data.get("updated_at"))
        except (ValueError, TypeError, OverflowError) as exc:
            raise HostError(f"The DSH host sent an invalid updated_at for {session_id!r}.", transient=True) from exc
        header = SessionHeader(
            session_id=session_id,
            status=status,
            updated_at=updated_at,
            preset=_text(data, "preset"),
            model=_text(data, "model"),
            # A host that already folded the title sends `title`; one with the durable fields sends those.
            user_title=_text(data, "user_title") or _text(data, "title"),
            generated_title=_text(data, "generated_title"),
            first_prompt=_text(data, "first_prompt"),
        )
        texts = (
            session_id,
            header.preset,
            header.model,
            header.user_title,
            header.generated_title,
            header.first_prompt,
        )
        try:
            if not all(_storable(text) for text in texts):
                raise ValidationError("a text holds a NUL character or a lone surrogate")
            header.full_clean(validate_unique=False, validate_constraints=False)
        except ValidationError as exc:
            raise HostError(
                f"The DSH host sent an invalid session {session_id[:80]!r}: {'; '.join(exc.messages)}", transient=True
            ) from exc
        return header

    def _cache(self, data) -> SessionInfo:
        """Validate one session from the host and refresh its cached header."""
        header = self._header(data)
        session_headers_cache(headers=[header])
        return session_info(header)

    def _headers(self, data) -> list[SessionHeader]:
        """The valid sessions of a GET /sessions answer; the invalid ones are skipped, and logged."""
        items = data.get("sessions") if isinstance(data, dict) else data
        if not isinstance(items, list):
            logger.warning(
                "The DSH host sent no session list for GET /sessions (%s); list_sessions answers from the cache.",
                type(items).__name__,
            )
            return []
        headers, problems = [], []
        for item in items:
            try:
                headers.append(self._header(item))
            except HostError as exc:
                problems.append(str(exc))
        if problems:
            logger.warning(
                "Skipped %d of %d sessions the DSH host sent for GET /sessions (the rest are cached); first: %s",
                len(problems),
                len(items),
                problems[0],
            )
        return headers

    # -- Host interface ---------------------------------------------------------------------------------

    def list_sessions(self, *, limit: int) -> list[SessionInfo]:
        """The host's live sessions merged into the cache (one bulk upsert), then the newest `limit`
        of both (spec §7)."""
        try:
            data = self._request("GET", "/sessions", params={"limit": limit})
        except HostError as exc:
            # The cached headers still answer (cold sessions live there anyway), perhaps stale: say why.
            logger.warning("list_sessions answers from the cached session headers: %s", exc)
        else:
            session_headers_cache(headers=self._headers(data))
        return session_list(limit=limit)

    def get_session(self, session_id: str) -> SessionInfo | None:
        try:
            return self._cache(self._request("GET", f"/sessions/{_quote(session_id)}"))
        except NotFoundOnHost:
            return None

    def global_session(self) -> SessionInfo | None:
        if self.global_session_id:
            return self.get_session(self.global_session_id)
        try:
            data = self._object(self._request("GET", "/global-session"), "the global session")
        except NotFoundOnHost:
            return None
        if "status" in data:
            return self._cache(data)
        # contract §6: a host may name the global session only; its header is at GET /sessions/{id}.
        session_id = data.get("session_id")
        if not isinstance(session_id, str) or not session_id:
            raise HostError("The DSH host sent a global session without a session_id.", transient=True)
        return self.get_session(session_id)

    def get_preset(self, name: str) -> PresetInfo | None:
        try:
            data = self._object(self._request("GET", f"/presets/{_quote(name)}"), "a preset object")
        except NotFoundOnHost:
            return None
        return PresetInfo(name, data.get("mountable", True) is not False)

    def resume_session(self, session_id: str) -> SessionInfo:
        self._request("POST", f"/sessions/{_quote(session_id)}/resume")
        session = self.get_session(session_id)
        if session is None:
            raise HostError(f"Session {session_id} disappeared while being resumed.", transient=False)
        return session

    def create_session(
        self, *, preset: str, model: str, first_prompt: str, source: dict, placement: Placement = NO_PLACEMENT
    ) -> str:
        # No workspaces or permission presets here (Capabilities.workspaces): the placement is not used.
        body = {"preset": preset, "first_prompt": first_prompt, "source": source}
        if model:
            body["model"] = model
        data = self._object(
            self._request(
                "POST", "/sessions", json_body=body, headers={"Idempotency-Key": f"new:{source['occurrence_key']}"}
            ),
            "a created session",
        )
        session_id = data.get("session_id")
        if not isinstance(session_id, str) or not session_id:
            raise HostError("The DSH host created a session but sent no session_id.", transient=True)
        return session_id

    def deliver(self, session_id: str, *, text: str, source: dict, occurrence_key: str) -> Delivered:
        data = self._object(
            self._request(
                "POST",
                f"/sessions/{_quote(session_id)}/inbox",
                json_body={"text": text, "wakeup": True, "source": source},
                headers={"Idempotency-Key": occurrence_key},
            ),
            "a delivery receipt",
        )
        delivery = data.get("delivery")
        if not isinstance(data.get("message_id"), str) or delivery not in {"next_turn", "next_step"}:
            raise HostError("The DSH host sent a delivery receipt without message_id and delivery.", transient=True)
        return Delivered(data["message_id"], delivery)

    def get_sessions(self, session_ids: set[str]) -> dict[str, SessionInfo]:
        found = {}
        for session_id in session_ids:
            try:
                session = self.get_session(session_id)
            except HostError:
                continue  # looked up again, one by one, when its run is delivered
            if session is not None:
                found[session_id] = session
        return found

    def deliver_many(self, messages: list[Message]) -> list[Delivered | HostError]:
        return deliver_each(self, messages)


def _quote(segment: str) -> str:
    return quote(segment, safe="")
