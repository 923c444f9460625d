"""An OpenAI-compatible chat-completions server on loopback that a test controls:
it answers from a script, and can be made slow, rate-limited, failing with a
status, down (refusing connections) or streaming.

Worker subprocesses reach it like any provider, through litellm's OpenAI path
(``model="openai/<name>"``, ``api_base=server.base_url``).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Message = dict[str, Any]
# (step, request body) -> the assistant message to answer with
Script = Callable[[int, dict[str, Any]], Message]


@dataclass
class Served:
    """One request the server received, and how it answered."""

    at: float
    step: int
    status: int
    body: dict[str, Any] = field(repr=False)


def tool_calls(*calls: tuple[str, str, dict[str, Any]]) -> Message:
    """An assistant message calling ``(id, name, arguments)`` tools."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for call_id, name, args in calls
        ],
    }


def answer(text: str) -> Message:
    return {"role": "assistant", "content": text}


class Provider:
    """Start with :meth:`start`, stop with :meth:`stop` (or use it as a context manager)."""

    def __init__(self, script: Script, *, port: int = 0) -> None:
        self.script = script
        self.requests: list[Served] = []
        self.failure: tuple[int, float | None] | None = None  # (status, retry-after)
        self.latency = 0.0
        self.stream_delay = 0.0
        self._lock = threading.Lock()
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -------------------------------------------------------------- control

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    def start(self) -> Provider:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer._serve(self, json.loads(self.rfile.read(length) or b"{}"))

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        server.daemon_threads = True
        self._port = int(server.server_address[1])
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening: connections are refused until :meth:`start` again."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def fail(self, status: int = 503, *, retry_after: float | None = None) -> None:
        """Answer every request with ``status`` until :meth:`recover`."""
        self.failure = (status, retry_after)

    def recover(self) -> None:
        self.failure = None

    def refusing(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self._port), timeout=0.2):
                return False
        except OSError:
            return True

    def __enter__(self) -> Provider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------- requests

    def answered(self, status: int = 200) -> list[Served]:
        with self._lock:
            return [r for r in self.requests if r.status == status]

    def _record(self, step: int, status: int, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(Served(time.time(), step, status, body))

    def _serve(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        step = 1 + sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if self.latency:
            time.sleep(self.latency)
        failure = self.failure
        if failure is not None:
            status, retry_after = failure
            self._record(step, status, body)
            headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
            _send_json(handler, status, {"error": {"message": f"scripted {status}"}}, headers)
            return
        message = self.script(step, body)
        self._record(step, 200, body)
        if body.get("stream"):
            self._stream(handler, body, message)
            return
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        _send_json(
            handler,
            200,
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "loopback"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            },
        )

    def _stream(
        self, handler: BaseHTTPRequestHandler, body: dict[str, Any], message: Message
    ) -> None:
        """Server-sent events: the text a few characters at a time, then tool calls."""
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        chunk_id = f"chatcmpl-{uuid.uuid4().hex}"

        def event(delta: dict[str, Any], finish: str | None = None) -> None:
            payload = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": body.get("model", "loopback"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            handler.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            handler.wfile.flush()
            if self.stream_delay:
                time.sleep(self.stream_delay)

        event({"role": "assistant", "content": ""})
        text = message.get("content") or ""
        for start in range(0, len(text), 4):
            event({"content": text[start : start + 4]})
        for index, call in enumerate(message.get("tool_calls") or []):
            event({"tool_calls": [{"index": index, **call}]})
        event({}, "tool_calls" if message.get("tool_calls") else "stop")
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()
        handler.close_connection = True


def _send_json(
    handler: BaseHTTPRequestHandler,
    status: int,
    payload: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)
