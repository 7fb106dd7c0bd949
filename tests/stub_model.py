"""A stub of DeepSeek's streaming chat API for tests that need a real DSH turn (no real model).

DSH is started with DEEPSEEK_BASE_URL pointing here and any DEEPSEEK_API_KEY
(../shared/DSH-HOST.md, Appendix A). What the "model" does, by the newest user messages:
- `CALLTOOL <name> <json>` → it calls tool <name> with those arguments, once; after the tool result
  it answers `done after tool` and the turn ends;
- `SLOW<n>` → it streams `tick 0 ` … `tick <n-1> `, one a second: a turn that runs for n seconds
  (long enough to be steered into or cancelled);
- `FAILNOW` in the turn's own message → it refuses the request (400 invalid_request_error "stub
  refuses"): a model error. A refused turn leaves no assistant message, so the next turn's request
  still carries that message; only the newest prompt counts, and that next turn is answered;
- anything else → it answers `ack: <the message's start>`;
- title requests → `Stub Title`.

Every request body is kept (`requests`), so a test can check what reached the model.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CALLTOOL = re.compile(r"CALLTOOL (\S+) (\{.*\})", re.DOTALL)
SLOW = re.compile(r"SLOW(\d+)")
# DSH's runtime-context snapshot, a user message a preset adds beside the prompt.
RUNTIME_CONTEXT = "Current runtime context."
REFUSAL = json.dumps({"error": {"message": "stub refuses", "type": "invalid_request_error"}}).encode()


def text_of(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args):
        pass

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        self.server.record(raw)
        body = json.loads(raw or b"{}")
        messages = body.get("messages", [])
        system = next((text_of(m.get("content")) for m in messages if m.get("role") == "system"), "")
        tail = []  # the user messages since the last assistant message (presets add context messages)
        for message in reversed(messages):
            if message.get("role") == "assistant":
                break
            if message.get("role") == "user":
                tail.append(text_of(message.get("content")))
        prompt = next((text for text in tail if not text.startswith(RUNTIME_CONTEXT)), "")  # the newest
        if "FAILNOW" in prompt and "concise title" not in system:
            self._refuse()
            return
        tool_call = None
        parts: list[str] = []  # streamed one a second after `text` (SLOW)
        if "concise title" in system:
            text = "Stub Title"
        elif messages and messages[-1].get("role") == "tool":
            text = "done after tool"
        elif match := CALLTOOL.search("\n".join(reversed(tail))):
            text = ""
            tool_call = {
                "index": 0,
                "id": f"call_stub_{self.server.next_id()}",
                "type": "function",
                "function": {"name": match[1], "arguments": match[2]},
            }
        elif slow := SLOW.search("\n".join(reversed(tail))):
            text, parts = "", [f"tick {index} " for index in range(int(slow[1]))]
        else:
            text = f"ack: {(tail[-1] if tail else '')[:40]}"  # the oldest: the prompt, not a preset's context
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        model = body.get("model")

        def send(obj):
            data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
            self.wfile.write(b"data: " + data + b"\n\n")
            self.wfile.flush()

        def chunk(delta, finish=None):
            choice = {"index": 0, "delta": delta, **({"finish_reason": finish} if finish else {})}
            return {"id": "stub", "object": "chat.completion.chunk", "model": model, "choices": [choice]}

        try:
            if text:
                send(chunk({"role": "assistant", "content": text}))
            for part in parts:
                send(chunk({"content": part}))
                time.sleep(1)  # the model's pace, so that the turn runs for a while
            if tool_call:
                send(chunk({"role": "assistant", "tool_calls": [tool_call]}))
            final = chunk({}, "tool_calls" if tool_call else "stop")
            final["usage"] = {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
            send(final)
            send(b"[DONE]")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _refuse(self) -> None:
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(REFUSAL)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(REFUSAL)
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.requests: list[bytes] = []
        self.calls = 0

    def record(self, raw: bytes) -> None:
        with self.lock:
            self.requests.append(raw)

    def next_id(self) -> int:
        with self.lock:
            self.calls += 1
            return self.calls


class StubModel:
    """The stub in a thread of the test process: `with StubModel() as model: model.env()`."""

    def __init__(self):
        self.server = _Server()
        self.thread = threading.Thread(target=self.server.serve_forever, name="stub-model", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def env(self) -> dict[str, str]:
        """What a DSH host needs to use this stub as its model."""
        return {"DEEPSEEK_BASE_URL": self.url, "DEEPSEEK_API_KEY": "sk-stub"}

    def requests(self) -> list[bytes]:
        with self.server.lock:
            return list(self.server.requests)

    def __enter__(self) -> StubModel:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
