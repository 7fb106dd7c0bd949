"""A counting pass-through in front of DSH: dshloop's processes are pointed at it
(DSHLOOP_DSH_URL), so B5 can say how many DSH calls each occurrence and each composer poll cost,
by method. Every request is forwarded as it came, with DSH's own loopback Host header."""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


class CountingProxy:
    def __init__(self, target: str):
        self.target = urlsplit(target)
        self.calls: Counter[str] = Counter()
        self.trace: list[tuple[float, float, str]] = []  # (sent, answered, path): where the time goes
        self._lock = threading.Lock()
        self._local = threading.local()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle(self):
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the caller gave up (its timeout): its own log says so

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                path = self.path.split("?", 1)[0]
                with proxy._lock:
                    proxy.calls[path.removeprefix("/api/")] += 1
                sent = time.time()
                status, headers, data = proxy.send(self.command, self.path, self.headers, body)
                with proxy._lock:
                    proxy.trace.append((sent, time.time(), path))
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in _HOP:
                        self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_HEAD = _forward

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # the default 5 resets connections a burst's deliveries open at once

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def send(self, method: str, path: str, headers, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        # One kept-alive connection to DSH per proxy thread (a caller's connection keeps its thread).
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = http.client.HTTPConnection(self.target.netloc, timeout=60)
        forwarded = {k: v for k, v in headers.items() if k.lower() not in _HOP}
        forwarded["Host"] = self.target.netloc
        try:
            connection.request(method, path, body=body, headers=forwarded)
            response = connection.getresponse()
        except (OSError, http.client.HTTPException):
            connection.close()
            self._local.connection = None
            return 502, [], b"proxy: DSH did not answer"
        return response.status, response.getheaders(), response.read()

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.calls)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
