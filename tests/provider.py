"""An OpenAI-compatible chat-completions server on loopback that a test controls:
it answers from a script, and can be made slow, rate-limited, failing with a
status, down (refusing connections) or streaming.

With :meth:`Provider.limit` it enforces requests and tokens per minute as a
provider does (:class:`ProviderLimits`): a 429 with ``retry-after`` past them,
``x-ratelimit-*`` headers on every answer, every request recorded.

A streamed answer (a request with ``"stream": true``) is sent as server-sent
events; a client that hangs up before its end is recorded
(``Served.disconnected``, :attr:`Provider.disconnects`).

Worker subprocesses reach it like any provider, through litellm's OpenAI path
(``model="openai/<name>"``, ``api_base=server.base_url``).
"""

from __future__ import annotations

import json
import math
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
# What every answer reports it used (unless ``Provider.usage`` says otherwise).
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
# A Retry-After as a number of seconds, or a header value sent as it is.
RetryAfter = float | str | None


@dataclass
class Served:
    """One request the server received, and how it answered."""

    at: float
    step: int
    status: int
    body: dict[str, Any] = field(repr=False)
    # A stream the client closed before its last event.
    disconnected: bool = False


@dataclass
class Bucket:
    """A provider's bucket: full at first, refilled continuously at
    ``capacity / 60`` a second up to ``capacity`` (Anthropic documents its
    limits so; OpenAI's replenish the same way)."""

    capacity: float
    level: float
    at: float

    @property
    def per_second(self) -> float:
        return self.capacity / 60

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.at) * self.per_second)
        self.at = now

    def wait_for(self, amount: float) -> float:
        """Seconds until ``amount`` is in the bucket (after :meth:`refill`)."""
        return max(0.0, (amount - self.level) / self.per_second)


def count_prompt(body: dict[str, Any]) -> int:
    """The request's prompt tokens, as litellm counts them for its model."""
    import litellm

    return int(litellm.token_counter(model=body.get("model", ""), messages=body["messages"]))


class ProviderLimits:
    """Requests and tokens per minute, enforced as a provider does: a request
    takes one request and its estimate (the prompt's tokens plus its
    ``max_tokens``, else ``default_max_tokens``) or is refused with a 429 and
    the seconds until it could go; its answer gives back the tokens it did not
    use. ``overdrawn`` counts admissions that took a bucket below zero (never,
    by construction: a check that the accounting holds)."""

    def __init__(
        self,
        rpm: int | None,
        tpm: int | None,
        *,
        default_max_tokens: int = 256,
        count: Callable[[dict[str, Any]], int] = count_prompt,
    ) -> None:
        now = time.monotonic()
        self.requests = Bucket(rpm, rpm, now) if rpm else None
        self.tokens = Bucket(tpm, tpm, now) if tpm else None
        self.default_max_tokens = default_max_tokens
        self.count = count
        self.throttled = 0
        self.overdrawn = 0

    def admit(self, body: dict[str, Any]) -> tuple[int, int, dict[str, str]]:
        """(prompt tokens, tokens taken; 0 taken: refused) and the headers to send."""
        prompt = self.count(body)
        estimate = prompt + int(body.get("max_tokens") or self.default_max_tokens)
        now = time.monotonic()
        wait = 0.0
        for bucket, amount in ((self.requests, 1), (self.tokens, estimate)):
            if bucket is not None:
                bucket.refill(now)
                wait = max(wait, bucket.wait_for(amount))
        if wait > 0:
            self.throttled += 1
            return prompt, 0, {"retry-after": str(math.ceil(wait)), **self.headers()}
        for bucket, amount in ((self.requests, 1), (self.tokens, estimate)):
            if bucket is not None:
                bucket.level -= amount
                self.overdrawn += bucket.level < 0
        return prompt, estimate, self.headers()

    def settle(self, taken: int, used: int) -> None:
        if self.tokens is not None:
            self.tokens.level = min(self.tokens.capacity, self.tokens.level + taken - used)

    def headers(self) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` headers for the buckets as they are now."""
        sent = {}
        for name, bucket in (("requests", self.requests), ("tokens", self.tokens)):
            if bucket is not None:
                sent[f"x-ratelimit-limit-{name}"] = str(int(bucket.capacity))
                sent[f"x-ratelimit-remaining-{name}"] = str(max(0, int(bucket.level)))
                reset = (bucket.capacity - bucket.level) / bucket.per_second
                sent[f"x-ratelimit-reset-{name}"] = f"{max(0.0, reset):.3f}s"
        return sent


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
        self.failure: tuple[int, dict[str, str]] | None = None  # (status, its headers)
        # What every answer reports it used; None: no usage at all, as many
        # self-hosted servers answer (streams then end with no usage event).
        self.usage: dict[str, int] | None = dict(USAGE)
        self.latency = 0.0
        self.stream_delay = 0.0  # seconds after each streamed event
        self.chunk_chars = 4  # characters of text per streamed event
        self.limits: ProviderLimits | None = None
        self._failures_left: int | None = None  # None: until recover()
        self._drops: list[int] = []  # streams to cut short, by events to send first
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
            # Headers and body go out in two writes: with Nagle's algorithm the
            # second waits for the client's delayed ACK (40 ms on Linux), which
            # no provider makes a client wait.
            disable_nagle_algorithm = True

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

    def fail(
        self,
        status: int = 503,
        *,
        retry_after: RetryAfter = None,
        times: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer every request with ``status`` until :meth:`recover`, or only
        the next ``times`` requests. ``retry_after``: seconds for a Retry-After
        header, or a string sent as the header's value exactly; ``headers``:
        more headers to answer with (``retry-after-ms``, ...)."""
        sent = dict(headers or {})
        if retry_after is not None:
            sent["Retry-After"] = (
                retry_after if isinstance(retry_after, str) else f"{retry_after:g}"
            )
        with self._lock:
            self.failure = (status, sent)
            self._failures_left = times

    def limit(self, rpm: int | None = None, tpm: int | None = None, **options: Any) -> None:
        """Enforce ``rpm`` requests and ``tpm`` tokens a minute from now on
        (:class:`ProviderLimits`); answers then report the prompt's tokens as
        counted and the completion's from :attr:`usage`."""
        with self._lock:
            self.limits = ProviderLimits(rpm, tpm, **options)

    @property
    def throttled(self) -> int:
        """How many requests the limits refused with a 429."""
        with self._lock:
            return 0 if self.limits is None else self.limits.throttled

    def recover(self) -> None:
        with self._lock:
            self.failure = None
            self._failures_left = None

    def drop_stream(self, after: int) -> None:
        """Cut the next stream short: send ``after`` events, then close the
        connection with no finish reason, as a provider that fell over would."""
        with self._lock:
            self._drops.append(after)

    @property
    def disconnects(self) -> int:
        """How many streams the client closed before their end."""
        with self._lock:
            return sum(1 for r in self.requests if r.disconnected)

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

    def _record(self, step: int, status: int, body: dict[str, Any]) -> Served:
        served = Served(time.time(), step, status, body)
        with self._lock:
            self.requests.append(served)
        return served

    def _take_failure(self) -> tuple[int, dict[str, str]] | None:
        with self._lock:
            failure = self.failure
            if failure is not None and self._failures_left is not None:
                self._failures_left -= 1
                if self._failures_left <= 0:
                    self.failure = None
                    self._failures_left = None
            return failure

    def _serve(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        step = 1 + sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if self.latency:
            time.sleep(self.latency)
        failure = self._take_failure()
        if failure is not None:
            status, headers = failure
            self._record(step, status, body)
            _send_json(handler, status, {"error": {"message": f"scripted {status}"}}, headers)
            return
        usage, limit_headers = self.usage, {}
        if self.limits is not None:
            with self._lock:
                prompt, taken, limit_headers = self.limits.admit(body)
            if not taken:
                self._record(step, 429, body)
                error = {"error": {"message": "rate limit reached", "type": "rate_limit_exceeded"}}
                _send_json(handler, 429, error, limit_headers)
                return
            completion = (usage or USAGE)["completion_tokens"]
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
            with self._lock:
                self.limits.settle(taken, prompt + completion)
        message = self.script(step, body)
        served = self._record(step, 200, body)
        if body.get("stream"):
            with self._lock:
                drop = self._drops.pop(0) if self._drops else None
            try:
                self._stream(handler, body, message, drop)
            except (BrokenPipeError, ConnectionResetError):
                with self._lock:
                    served.disconnected = True
            handler.close_connection = True
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
                **({} if usage is None else {"usage": usage}),
            },
            limit_headers,
        )

    def _stream(
        self,
        handler: BaseHTTPRequestHandler,
        body: dict[str, Any],
        message: Message,
        drop: int | None = None,
    ) -> None:
        """Server-sent events: the text a few characters at a time, then the
        tool calls (their arguments in pieces too), the finish reason, and the
        usage if the request asked for it (``stream_options.include_usage``).
        ``drop``: stop after that many events, with no finish."""
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        chunk_id = f"chatcmpl-{uuid.uuid4().hex}"

        def send(payload: dict[str, Any]) -> None:
            payload = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": body.get("model", "loopback"),
                **payload,
            }
            handler.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            handler.wfile.flush()
            if self.stream_delay:
                time.sleep(self.stream_delay)

        events: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        text = message.get("content") or ""
        size = max(1, self.chunk_chars)
        events += [{"content": text[start : start + size]} for start in range(0, len(text), size)]
        for index, call in enumerate(message.get("tool_calls") or []):
            # As OpenAI streams a call: id and name first, the arguments in pieces.
            function = call["function"]
            head = {"name": function["name"], "arguments": ""}
            events.append({"tool_calls": [{**call, "index": index, "function": head}]})
            arguments = function["arguments"]
            events += [
                {
                    "tool_calls": [
                        {"index": index, "function": {"arguments": arguments[i : i + size]}}
                    ]
                }
                for i in range(0, len(arguments), size)
            ]
        for delta in events[:drop]:
            send({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        if drop is not None:
            return
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        send({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if self.usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            send({"choices": [], "usage": self.usage})
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()


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
