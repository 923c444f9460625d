"""One MCP session per server declaration and worker process, kept open.

The SDK's client is an anyio context manager whose task group belongs to the
task that entered it, so each session is held open by a task of its own on the
process's runtime loop (runner/core/runtime.py); calls from the runs'
tasks go through it. A session whose task ended (the server's process exited,
its HTTP session was dropped, the connection broke) is opened again by the
next call that needs it.

What a request met decides what its caller is told (:meth:`Session._guarded`):
the server's own JSON-RPC refusal is :class:`MCPToolError`, for the model;
no JSON-RPC answer (the connection broke, the stdio server's process exited,
a gateway answered a 502 or a page of HTML: runner/core/mcp/httpclient.py) means
the session cannot be trusted with the request (``_Broken``), and for an
effect that the server may have run, an unknown outcome; a request that
provably never left (its connection was refused) is ``_Unsent``, which may
be made again. The credentials a session connected with (header and
environment values) are replaced by ``[redacted]`` in every message it
makes (:meth:`Session.scrub`), whatever a driver or a server put in it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from runner.core.errors import MCPAuthFailed, MCPToolError, MCPUnavailable, OutcomeUnknown

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult, Tool
    from runner.core.mcp.servers import MCPServer

log = logging.getLogger(__name__)
T = TypeVar("T")

# How many tools of a server's listing are read: past this, its pages are no
# longer asked for (one WARNING), so a hostile listing cannot fill the worker.
MAX_LISTED = 10_000
# An effect's call goes out on a session that answered a probe within this
# (Session._alive).
PROBE_SECONDS = 5.0
# What stands for a credential in a message (Session.scrub). A value shorter
# than SECRET_CHARS is not looked for (an environment's "1" or "true"), nor a
# word of a value ("Bearer <token>") shorter than SECRET_WORD_CHARS.
REDACTED = "[redacted]"
SECRET_CHARS = 6
SECRET_WORD_CHARS = 12


class Session:
    """The pooled session of one server declaration in this process."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        # The last 401 or 403 an HTTP server answered this session with: the
        # SDK turns either into a bare JSON-RPC error, so its status is kept here.
        self._refused: int | None = None
        # The last listing, and when it was read (monotonic): reused for
        # list_cache_seconds, unless the server says its list changed.
        self._tools: list[Tool] | None = None
        self._listed_at = 0.0
        # What Session.scrub looks for, longest first: the credentials of the
        # last two connections (the one before may still end with a message).
        self._secrets: list[str] = []
        self._connected_with: collections.deque[set[str]] = collections.deque(maxlen=2)
        # The mark of the errors the HTTP client makes (runner/core/mcp/httpclient.py).
        self._mark = secrets.token_hex(16)

    @property
    def open(self) -> bool:
        return self._client is not None and self._holder is not None and not self._holder.done()

    async def client(self) -> Client:
        """The open client, opening the session if it is not."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if not self.open:
                await self._open()
            assert self._client is not None
            return self._client

    async def list_tools(self) -> list[Tool]:
        """The server's tools, every page: this worker's listing while it is
        fresh (``list_cache_seconds``, and no ``tools/list_changed`` since).
        A session that broke is opened again, once, and the listing asked
        again (it changes nothing)."""
        fresh = time.monotonic() - self._listed_at < self.server.list_cache_seconds
        if self._tools is not None and fresh and self.open:
            return self._tools
        try:
            tools = await self._list(await self.client())
        except _Broken:
            await self.close()
            try:
                tools = await self._list(await self.client())
            except _Broken as broken:
                await self.close()
                raise MCPUnavailable(
                    f"MCP server {self.server.name!r} did not list its tools: {broken}"
                ) from None
        self._tools, self._listed_at = tools, time.monotonic()
        return tools

    async def _incoming(self, message: Any) -> None:
        """What the server sends unasked: a changed tool list ends the cached one."""
        from mcp.types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self._tools = None

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None = None,
        *,
        again: bool = False,
    ) -> CallToolResult:
        """Call ``name``. A session that broke is closed; with ``again`` (a
        tool without effects) the call is made once more on a new session,
        and so is any call that never left (its connection was refused);
        a plain tool's call answered twice by what is not JSON-RPC is the
        model's tool error, as a server's refusal is. Otherwise a call that
        went out and got no JSON-RPC answer (the session broke, a gateway
        answered in the server's place, or it timed out) raises
        :class:`OutcomeUnknown`: the server may have run it."""
        client = await self.client()  # before this, nothing went out
        if not again:
            client = await self._alive(client)
        first = await self._attempt(client, name, arguments, meta, again=again)
        if not isinstance(first, _Broken):
            return first
        second = await self._attempt(await self.client(), name, arguments, meta, again=again)
        if not isinstance(second, _Broken):
            return second
        if isinstance(second, _Unsent):
            raise MCPUnavailable(f"MCP server {self.server.name!r} cannot be reached ({second})")
        if isinstance(second, _Garbled):  # it is there, and answers so: the model is told
            raise MCPToolError(f"MCP server {self.server.name!r}: {second}")
        raise MCPUnavailable(
            f"MCP server {self.server.name!r}: a call of {name!r} failed twice ({second})"
        )

    async def _attempt(
        self,
        client: Client,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None,
        *,
        again: bool,
    ) -> CallToolResult | _Broken:
        """One call of ``name``: its result, or why it may be made once more
        on a new session (it never left; or, with ``again``, its session
        broke). An effect's call that went out and got no JSON-RPC answer
        raises :class:`OutcomeUnknown`."""
        try:
            return await self._call(client, name, arguments, meta)
        except MCPAuthFailed:
            raise  # refused, so not run
        except _Broken as lost:
            await self.close()
            if again or isinstance(lost, _Unsent):
                return lost
            said = str(lost)
        except MCPUnavailable as late:  # it did not answer within call_seconds
            if again:
                raise
            said = late.message
        raise OutcomeUnknown(
            f"MCP server {self.server.name!r} gave no answer to the call of {name!r} ({said})"
        )

    async def _alive(self, client: Client) -> Client:
        """``client``, or a new session's if it does not answer a probe: an
        effect's call goes out only on a session that just answered, so a
        server that died while the session sat idle never makes an unsent
        call's outcome unknown. (The probe is a listing: the protocol has no
        ping since its 2026-07-28 revision.)"""
        try:
            async with asyncio.timeout(min(self.server.connect_seconds, PROBE_SECONDS)):
                await self._guarded(client.list_tools())
            return client
        except (_Broken, MCPToolError, TimeoutError):
            await self.close()
            return await self.client()

    async def _list(self, client: Client) -> list[Tool]:
        tools: list[Tool] = []
        cursor: str | None = None
        async with self._bounded(self.server.list_seconds, "list its tools"):
            while True:
                try:
                    page = await self._guarded(client.list_tools(cursor=cursor))
                except MCPToolError as refused:  # the server will not list them
                    raise MCPUnavailable(refused.message) from None
                tools += page.tools
                cursor = page.next_cursor
                if len(tools) >= MAX_LISTED and (cursor or len(tools) > MAX_LISTED):
                    log.warning(
                        "MCP server %r lists more than %d tools: only the first %d are read",
                        self.server.name,
                        MAX_LISTED,
                        MAX_LISTED,
                    )
                    return tools[:MAX_LISTED]
                if not cursor:
                    return tools

    async def _call(
        self, client: Client, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None
    ) -> CallToolResult:
        async with self._bounded(self.server.call_seconds, f"answer a call of {name!r}"):
            return await self._guarded(client.call_tool(name, arguments, meta=meta))  # type: ignore[arg-type]

    async def _guarded(self, request: Awaitable[T]) -> T:
        """``request``'s answer. The server's own JSON-RPC refusal of a
        request (an unknown tool, bad arguments) is :class:`MCPToolError`,
        for the model; a request that provably never left is
        :class:`_Unsent`; anything else means the session broke
        (:class:`_Broken`): no JSON-RPC answer came, whatever came instead."""
        from mcp import MCPError
        from runner.core.mcp.httpclient import failure

        try:
            return await request
        except MCPError as exc:
            self._raise_refused()
            failed = failure(exc.error.data, self._mark)
            if failed is not None:
                kind = _Garbled if failed.answered else _Broken if failed.sent else _Unsent
                raise kind(self.scrub(failed.why)) from None
            if _no_answer(exc):
                raise _Broken(self.scrub(_reason(exc))) from None
            raise MCPToolError(self.scrub(f"MCP server {self.server.name!r}: {exc}")) from None
        except (MCPUnavailable, asyncio.CancelledError, TimeoutError):
            raise
        except Exception as exc:
            self._raise_refused()
            raise _Broken(self.scrub(_reason(exc))) from None

    def scrub(self, text: str) -> str:
        """``text`` with each credential this session connected with (a
        header's or an environment variable's value, and the long words of
        one, as the token of ``Bearer <token>``) replaced by ``[redacted]``."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def _keep_secrets(self, values: dict[str, str]) -> dict[str, str]:
        """``values``, the credentials a session connects with, remembered
        for :meth:`scrub` (as written, and as ``repr`` quotes them)."""
        found: set[str] = set()
        for value in values.values():
            for form in (value, repr(value)[1:-1]):
                if len(form) >= SECRET_CHARS:
                    found.add(form)
                found.update(w for w in form.split() if len(w) >= SECRET_WORD_CHARS)
        self._connected_with.append(found)
        self._secrets = sorted(set().union(*self._connected_with), key=len, reverse=True)
        return values

    async def close(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._holder is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._holder, 5)
        self._client = self._holder = self._stop = None
        self._tools = None

    @contextlib.asynccontextmanager
    async def _bounded(self, seconds: float, what: str) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(seconds):
                yield
        except TimeoutError:
            raise MCPUnavailable(
                f"MCP server {self.server.name!r} did not {what} within {seconds:g} s"
            ) from None

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        self._stop = asyncio.Event()
        self._holder = loop.create_task(
            self._hold(ready, self._stop), name=f"mcp session {self.server.name}"
        )
        try:
            async with asyncio.timeout(self.server.connect_seconds):
                self._client = await asyncio.shield(ready)
        except TimeoutError:
            self._holder.cancel()
            raise MCPUnavailable(
                f"MCP server {self.server.name!r} did not connect within "
                f"{self.server.connect_seconds:g} s"
            ) from None
        except MCPUnavailable:
            raise
        except Exception as exc:
            self._raise_refused()
            raise MCPUnavailable(
                self.scrub(f"MCP server {self.server.name!r} cannot be reached: {_reason(exc)}")
            ) from None

    def _raise_refused(self) -> None:
        if self._refused is not None:
            status, self._refused = self._refused, None
            raise MCPAuthFailed(
                f"MCP server {self.server.name!r} refused the credentials (HTTP {status}): "
                "check its headers"
            )

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            async with self._connect() as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:  # the session ends: the next call opens another
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            elif not stop.is_set():
                ended = self.scrub(_reason(exc))
                log.warning("MCP server %r: its session ended (%s)", self.server.name, ended)
            if not isinstance(exc, Exception):
                raise

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[Client]:
        from mcp import Client

        server = self.server
        if server.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            assert server.command is not None
            params = StdioServerParameters(
                command=server.command,
                args=list(server.args),
                env=self._keep_secrets(server.resolve("env")) or None,
                cwd=server.cwd,
            )
            # The server's stderr goes to this process's own: a worker's
            # sys.stderr is Celery's logging proxy, which has no file under it.
            errlog = sys.__stderr__ or sys.stderr
            transport = stdio_client(params, errlog=errlog)
            async with Client(transport, message_handler=self._incoming, cache=None) as client:
                yield client
            return
        import httpx2

        from mcp.client.streamable_http import streamable_http_client
        from runner.core.mcp.httpclient import WatchedClient

        assert server.url is not None
        timeout = httpx2.Timeout(server.connect_seconds, read=server.call_seconds)

        async def seen(response: httpx2.Response) -> None:
            if response.status_code in (401, 403):
                self._refused = response.status_code

        async with (
            WatchedClient(
                mark=self._mark,
                headers=self._keep_secrets(server.resolve("headers")),
                timeout=timeout,
                event_hooks={"response": [seen]},
            ) as http,
            Client(
                streamable_http_client(server.url, http_client=http),
                message_handler=self._incoming,
                cache=None,
            ) as client,
        ):
            yield client


class _Broken(Exception):
    """The session cannot carry requests any more; its message says why."""


class _Unsent(_Broken):
    """The request never left (its connection was refused): it may be made again."""


class _Garbled(_Broken):
    """What answered the request over HTTP did not answer in JSON-RPC (a
    gateway's 502, a page of HTML)."""


def _no_answer(exc: Exception) -> bool:
    """The SDK's own error, not the server's JSON-RPC answer: the connection
    closed (a stdio server's process exited, an event stream ended), the
    server dropped the session (an HTTP 404 on it: it restarted), the
    answer could not be parsed, or it did not come in time. A new session
    is needed, and an effect's outcome is unknown."""
    from mcp.types import CONNECTION_CLOSED, PARSE_ERROR, REQUEST_TIMEOUT

    error = getattr(exc, "error", None)
    if getattr(error, "code", None) in (CONNECTION_CLOSED, PARSE_ERROR, REQUEST_TIMEOUT):
        return True
    return "session terminated" in str(getattr(error, "message", exc)).lower()


def _reason(exc: BaseException) -> str:
    """A driver error's first line (an ExceptionGroup's first leaf); the
    message alone of one the session's HTTP client made."""
    from runner.core.mcp.httpclient import MARK

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    error: Any = getattr(exc, "error", None)
    if isinstance(getattr(error, "data", None), dict) and MARK in error.data:
        return str(error.message)
    text = " ".join(str(exc).split("\n", 1)[0].split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_sessions: dict[tuple[int, int], Session] = {}


def session(server: MCPServer) -> Session:
    """This process's session for ``server`` (one per declaration; a forked
    child opens its own)."""
    key = (os.getpid(), id(server))
    found = _sessions.get(key)
    if found is None or found.server is not server:
        found = _sessions[key] = Session(server)
    return found


def close_all(timeout: float = 10.0) -> None:
    """Close this process's sessions (a worker's shutdown; a test's end): a
    stdio server's process ends with its session. Blocks up to ``timeout``."""
    mine = [s for (pid, _), s in list(_sessions.items()) if pid == os.getpid()]
    for key in [k for k in _sessions if k[0] == os.getpid()]:
        del _sessions[key]
    if not mine:
        return
    from runner.core.runtime import runtime

    async def close() -> None:
        await asyncio.gather(*(s.close() for s in mine), return_exceptions=True)

    try:
        runtime().run(close(), timeout=timeout)
    except Exception:
        log.warning("MCP sessions did not close within %g s", timeout, exc_info=True)
