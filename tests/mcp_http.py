"""The MCP test server (tests/mcp_servers.py) on streamable HTTP, in a process
of the test's own that the test stops, starts, and makes refuse every request
401 (a credential that expired under an open session); the calls the server
logged; and a gateway in front of it that answers as a load balancer does in a
bad moment (a 502, a page of HTML) after the server ran the call."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store.local import free_port
from tests.services import ROOT


class HttpServer:
    def __init__(self, folder: Path) -> None:
        self.log = folder / "http-calls.jsonl"
        self._flag = folder / "http-refuse"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp_servers", "http", str(self.port)],
            cwd=ROOT,
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT),
                 "RUNWRIGHT_TEST_MCP_LOG": str(self.log),
                 "RUNWRIGHT_TEST_MCP_REFUSE": str(self._flag)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "the MCP test server never listened"
                assert self.proc.poll() is None, "the MCP test server exited"
                time.sleep(0.1)

    def refuse(self, refusing: bool = True) -> None:
        """From now on (or no longer), every request is answered 401."""
        if refusing:
            self._flag.touch()
        else:
            self._flag.unlink(missing_ok=True)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


def serving(folder: Path) -> Iterator[HttpServer]:
    """A fixture's body: the server, started, and stopped at the end."""
    server = HttpServer(folder)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def calls(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line]


@dataclass(frozen=True)
class Answer:
    """What a gateway answers a request with in place of the server's answer:
    its status, content type and body (``body`` may be a function of the
    request's JSON-RPC id). With ``forward`` the request reaches the server
    first, which runs it; its answer is thrown away. With ``raw`` the body is
    the whole answer, status line and headers included, as sent."""

    status: int
    content_type: str | None
    body: bytes | Callable[[Any], bytes] = b""
    forward: bool = True
    raw: bool = False


class Gateway:
    """What stands in front of a server in production (a load balancer, an API
    gateway), on loopback, that a test controls: it passes every POST and
    DELETE through to ``upstream``, reading the server's answer whole, and
    answers the calls of a tool it was told to (:meth:`answer`) with what a
    gateway says in a bad moment. GETs (the server's own stream) are answered
    405, which a client must take. :meth:`close_after` stops it listening
    once it has read a request of a method, before it answers it: the next
    connection is refused."""

    def __init__(self, upstream: str) -> None:
        import urllib.parse

        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.path = parsed.path
        self.port = free_port()
        self._answers: dict[str, Answer] = {}
        self._close_after: str | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def answer(self, tool: str, answer: Answer | None) -> None:
        """From now on, answer each call of ``tool`` (or each request of that
        JSON-RPC method, ``initialize``) with ``answer`` (None: pass it on)."""
        if answer is None:
            self._answers.pop(tool, None)
        else:
            self._answers[tool] = answer

    def close_after(self, method: str) -> None:
        """Stop listening after the next request of JSON-RPC ``method`` arrives."""
        self._close_after = method

    def start(self) -> Gateway:
        import http.server

        gateway = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._reply(405, "text/plain", b"no stream here")

            def do_POST(self) -> None:
                gateway._pass(self)

            do_DELETE = do_POST

            def _reply(
                self, status: int, content_type: str | None, body: bytes, **headers: str
            ) -> None:
                self.send_response(status)
                if content_type:
                    self.send_header("Content-Type", content_type)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _pass(self, handler: Any) -> None:
        import http.client

        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        try:
            message = json.loads(body) if body else {}
        except ValueError:
            message = {}
        method = message.get("method") if isinstance(message, dict) else None
        params = (message.get("params") or {}) if isinstance(message, dict) else {}
        answer = self._answers.get(params.get("name") if method == "tools/call" else method)
        if self._close_after is not None and method == self._close_after:
            self._close_after = None
            threading.Thread(target=self.stop).start()
            while self._server is not None:
                time.sleep(0.01)
        if answer is None or answer.forward:
            skip = {"host", "content-length", "connection", "accept-encoding"}
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in skip}
            upstream = http.client.HTTPConnection(*self.upstream, timeout=30)
            try:
                upstream.request(handler.command, handler.path, body=body, headers=headers)
                response = upstream.getresponse()
                content = response.read()  # whole: the server has answered
            finally:
                upstream.close()
            if answer is None:
                kept = {
                    k: v
                    for k, v in response.getheaders()
                    if k.lower() not in ("content-length", "connection", "content-type")
                    and not k.lower().startswith("transfer-")
                }
                handler._reply(response.status, response.getheader("Content-Type"), content, **kept)
                return
        assert answer is not None
        made = answer.body(message.get("id")) if callable(answer.body) else answer.body
        if answer.raw:
            handler.close_connection = True
            handler.wfile.write(made)
            return
        handler._reply(answer.status, answer.content_type, made)
