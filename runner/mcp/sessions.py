"""One MCP session per server declaration and worker process, kept open.

The SDK's client is an anyio context manager whose task group belongs to the
task that entered it, so each session is held open by a task of its own on the
process's runtime loop (runner/engine/runtime.py); calls from the runs'
tasks go through it. A session whose task ended (the server's process exited,
its HTTP session was dropped, the connection broke) is opened again by the
next call that needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from runner.errors import MCPAuthFailed, MCPUnavailable

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult, Tool

    from runner.mcp.servers import MCPServer

log = logging.getLogger("runner.mcp")

# A server listing more than this many tools is refused: no model can use them.
MAX_TOOLS = 512


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
        client = await self.client()
        tools: list[Tool] = []
        cursor: str | None = None
        async with self._bounded(self.server.list_seconds, "list its tools"):
            while True:
                try:
                    page = await client.list_tools(cursor=cursor)
                except Exception as exc:  # the session broke, or the server refused
                    self._raise_refused()
                    raise MCPUnavailable(
                        f"MCP server {self.server.name!r} did not list its tools: {_reason(exc)}"
                    ) from None
                tools += page.tools
                if len(tools) > MAX_TOOLS:
                    raise MCPUnavailable(
                        f"MCP server {self.server.name!r} lists more than {MAX_TOOLS} tools"
                    )
                cursor = page.next_cursor
                if not cursor:
                    return tools

    async def call_tool(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> CallToolResult:
        client = await self.client()
        async with self._bounded(self.server.call_seconds, f"answer a call of {name!r}"):
            return await client.call_tool(name, arguments, meta=meta)  # type: ignore[arg-type]

    async def close(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._holder is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._holder, 5)
        self._client = self._holder = self._stop = None

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
                f"MCP server {self.server.name!r} cannot be reached: {_reason(exc)}"
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
                log.warning("MCP server %r: its session ended (%s)", self.server.name, _reason(exc))
            if not isinstance(exc, Exception):
                raise

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[Client]:
        from mcp import Client

        server = self.server
        if server.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters

            assert server.command is not None
            params = StdioServerParameters(
                command=server.command,
                args=list(server.args),
                env=server.resolve(server.env) or None,
                cwd=server.cwd,
            )
            async with Client(params) as client:
                yield client
            return
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert server.url is not None
        timeout = httpx2.Timeout(server.connect_seconds, read=server.call_seconds)

        async def seen(response: httpx2.Response) -> None:
            if response.status_code in (401, 403):
                self._refused = response.status_code

        async with (
            httpx2.AsyncClient(
                headers=server.resolve(server.headers),
                timeout=timeout,
                event_hooks={"response": [seen]},
            ) as http,
            Client(streamable_http_client(server.url, http_client=http)) as client,
        ):
            yield client


def _reason(exc: BaseException) -> str:
    """A driver error's first line (an ExceptionGroup's first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
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
    from runner.engine.runtime import runtime

    async def close() -> None:
        await asyncio.gather(*(s.close() for s in mine), return_exceptions=True)

    try:
        runtime().run(close(), timeout=timeout)
    except Exception:
        log.warning("MCP sessions did not close within %g s", timeout, exc_info=True)
