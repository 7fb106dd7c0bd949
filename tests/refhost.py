"""A reference DSH host: contract §6 over real loopback sockets, with an in-memory store.

Tests use it as a real peer for DSHLOOP_HOST=http, and tell it to misbehave: go down (the port
refuses connections), answer 500, hang past the client's timeout, or send malformed JSON. Two
answers a real host may give are switches too: `global_id_only` (GET /global-session names the
session only) and `listed_extra` (raw items added to every GET /sessions answer, e.g. invalid ones).
"""

from __future__ import annotations

import json
import re
import secrets
import socket
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

FAULTS = {"ok", "error500", "hang", "malformed"}


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class RefHost:
    def __init__(self, token: str = "host-secret", hang_seconds: float = 12.0):
        self.token = token
        self.hang_seconds = hang_seconds
        self.lock = threading.RLock()
        self.sessions: dict[str, dict] = {}
        self.presets: dict[str, bool] = {}
        self.global_id: str | None = None
        self.inbox: dict[str, list[dict]] = {}
        self.messages_by_key: dict[str, dict] = {}
        self.sessions_by_key: dict[str, str] = {}
        self.new_message_keys: Counter = Counter()  # Idempotency-Key -> times it created a new message
        self.calls: list[tuple[str, str]] = []
        self.fault = "ok"
        self.global_id_only = False  # GET /global-session answers {"session_id"} alone (contract §6 allows it)
        self.listed_extra: list = []  # appended as they are to every GET /sessions answer
        self.server: ThreadingHTTPServer | None = None
        self.port = 0
        self.connections: set = set()

    # -- lifecycle -----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RefHost:
        handler = type("Handler", (_Handler,), {"host": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        """Go down: the port refuses connections until start() (same port) is called again."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        # Kept-alive connections die with the host too, as they would with a real process.
        with self.lock:
            for connection in list(self.connections):
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.connections.clear()

    # -- the store, for tests ------------------------------------------------------------------------

    def put_session(self, session_id: str, **fields) -> dict:
        with self.lock:
            session = self.sessions.setdefault(session_id, {"session_id": session_id, "status": "idle"})
            if fields.pop("global_interface", False):
                self.global_id = session_id
            session.update({key: value for key, value in fields.items() if value is not None})
            session["updated_at"] = _now_iso()
            return dict(session)

    def put_preset(self, name: str, mountable: bool = True) -> None:
        with self.lock:
            self.presets[name] = mountable

    def messages(self, session_id: str | None = None) -> list[dict]:
        with self.lock:
            if session_id is not None:
                return list(self.inbox.get(session_id, []))
            return [message for messages in self.inbox.values() for message in messages]

    # -- contract §6 ---------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict, body: dict | None, headers) -> tuple[int, object]:
        with self.lock:
            self.calls.append((method, path))
        if method == "GET" and path == "/sessions":
            limit = int(query.get("limit", ["50"])[0])
            with self.lock:
                ordered = sorted(self.sessions.values(), key=lambda s: s["updated_at"], reverse=True)
                extra = list(self.listed_extra)
            return 200, {"sessions": ordered[:limit] + extra}
        if method == "GET" and path == "/global-session":
            with self.lock:
                session = self.sessions.get(self.global_id or "")
            if session and self.global_id_only:
                return 200, {"session_id": session["session_id"]}
            return (200, session) if session else (404, {"error": "no global interface"})
        if match := re.fullmatch(r"/presets/([^/]+)", path):
            with self.lock:
                mountable = self.presets.get(unquote(match[1]))
            return (
                (404, {"error": "unknown preset"})
                if mountable is None
                else (200, {"name": unquote(match[1]), "mountable": mountable})
            )
        if method == "POST" and path == "/sessions":
            return self._create(body or {}, headers.get("Idempotency-Key"))
        if match := re.fullmatch(r"/sessions/([^/]+)(/resume|/inbox)?", path):
            session_id, action = unquote(match[1]), match[2]
            with self.lock:
                session = self.sessions.get(session_id)
            if session is None:
                return 404, {"error": "unknown session"}
            if method == "GET" and not action:
                return 200, session
            if method == "POST" and action == "/resume":
                with self.lock:
                    if session["status"] == "cold":
                        session.update(status="idle", updated_at=_now_iso())
                return 200, session
            if method == "POST" and action == "/inbox":
                return self._deliver(session, body or {}, headers.get("Idempotency-Key"))
        return 404, {"error": f"no route {method} {path}"}

    def _create(self, body: dict, key: str | None) -> tuple[int, dict]:
        with self.lock:
            if key and key in self.sessions_by_key:
                return 200, {"session_id": self.sessions_by_key[key]}
            session_id = "ses_" + secrets.token_hex(6)
            self.sessions[session_id] = {
                "session_id": session_id,
                "status": "idle",
                "preset": body.get("preset", ""),
                "model": body.get("model", ""),
                "first_prompt": body.get("first_prompt", ""),
                "updated_at": _now_iso(),
            }
            if key:
                self.sessions_by_key[key] = session_id
            return 201, {"session_id": session_id}

    def _deliver(self, session: dict, body: dict, key: str | None) -> tuple[int, dict]:
        if not key or body.get("wakeup") is not True or not isinstance(body.get("text"), str):
            return 400, {"error": "text, wakeup: true and an Idempotency-Key are required"}
        with self.lock:
            if key in self.messages_by_key:
                message = self.messages_by_key[key]
                return 200, {"message_id": message["message_id"], "delivery": message["delivery"]}
            message = {
                "message_id": "msg_" + secrets.token_hex(6),
                "text": body["text"],
                "source": body.get("source"),
                "occurrence_key": key,
                "session_id": session["session_id"],
                "delivery": "next_step" if session["status"] == "running" else "next_turn",
                "created_at": _now_iso(),
            }
            self.messages_by_key[key] = message
            self.new_message_keys[key] += 1
            self.inbox.setdefault(session["session_id"], []).append(message)
            return 201, {"message_id": message["message_id"], "delivery": message["delivery"]}


class _Handler(BaseHTTPRequestHandler):
    host: RefHost
    protocol_version = "HTTP/1.1"  # keep-alive, so the client's connection reuse is exercised

    def log_message(self, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        with self.host.lock:
            self.host.connections.add(self.connection)

    def finish(self):
        with self.host.lock:
            self.host.connections.discard(self.connection)
        super().finish()

    def _serve(self):
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.headers.get("Authorization") != f"Bearer {self.host.token}":
            return self._reply(401, {"error": "bad token"})
        fault = self.host.fault
        if fault == "hang":
            time.sleep(self.host.hang_seconds)
        if fault == "error500":
            return self._reply(500, {"error": "the host is having a bad day"})
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return self._reply(400, {"error": "bad json"})
        status, payload = self.host.handle(self.command, parts.path, parse_qs(parts.query), body, self.headers)
        if fault == "malformed" and status < 300:
            return self._reply(status, None, raw=b'{"message_id": "oops", "deliv')
        self._reply(status, payload)

    def _reply(self, status: int, payload, raw: bytes | None = None):
        data = raw if raw is not None else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_POST = do_PUT = do_DELETE = _serve


def main() -> None:
    """`python -m tests.refhost`: run the reference host by hand, to try DSHLOOP_HOST=http."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=7070)
    parser.add_argument("--token", default="host-secret")
    args = parser.parse_args()
    host = RefHost(token=args.token)
    host.port = args.port
    host.put_session("ses_demo", status="idle", preset="default", model="default", user_title="Demo session")
    host.put_session("ses_ui", status="idle", global_interface=True, user_title="Global interface")
    host.start()
    print(f"reference DSH host on {host.url} (token {args.token}); sessions ses_demo, ses_ui (global)")
    try:
        while True:
            time.sleep(5)
            print(f"{len(host.messages())} message(s) delivered so far")
    except KeyboardInterrupt:
        host.stop()


if __name__ == "__main__":
    main()
