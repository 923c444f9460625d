"""The HTTP client of an MCP session over streamable HTTP, which tells the
session what the SDK's client does not: whether the answer to a request is
the server's JSON-RPC answer, and whether a request that got none ever left.

The SDK's client makes a JSON-RPC error of its own of every answer that is
not JSON-RPC (a gateway's 502, a 429, a 200 with a page of HTML or a body
that is not JSON-RPC), and that error reads like the server's refusal of the
call. For an effect the server may have run, the two differ as "failed"
(the model may make it again, under a new key) differs from "unknown" (a
person must look). So this client answers such a request itself, before the
SDK reads it, with a JSON-RPC error whose ``data`` holds this session's own
mark (``mark``, never sent to the server, so no server can forge it) and
says whether the request left (:func:`failure` reads it back for
runner/core/mcp/sessions.py). A request that left is one whose connection was
made: only a refused connection, a failed DNS lookup or TLS handshake, or a
pool or connect timeout proves that it did not.

Left as they are: the server's JSON-RPC answers (results and errors, at any
status), an event stream (the SDK reads it, and says when it ends without an
answer), a 401 or 403 (refused credentials, runner/core/mcp/sessions.py), a 404
(the server dropped the session), and a redirect the SDK follows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx2

# The key of a JSON-RPC error's ``data`` that marks it as this client's.
MARK = "io.runwright/transport"
_NO_ID = object()
# Statuses the SDK and the session read themselves.
_READ_ELSEWHERE = (401, 403, 404)
# What proves the request never left: no connection was made.
_UNSENT = (
    httpx2.ConnectError,
    httpx2.ConnectTimeout,
    httpx2.PoolTimeout,
    httpx2.UnsupportedProtocol,
)


@dataclass(frozen=True)
class Failure:
    """A request that got no JSON-RPC answer: whether it left, whether an
    HTTP answer came (one that is not JSON-RPC), and why."""

    sent: bool
    answered: bool
    why: str


def failure(error: Any, mark: str) -> Failure | None:
    """The failure this client answered for, from a JSON-RPC error's ``data``
    (an SDK ``MCPError``'s ``error.data``); None if it is not one."""
    if not isinstance(error, dict) or error.get(MARK) != mark:
        return None
    sent, answered = bool(error.get("sent", True)), bool(error.get("answered", False))
    return Failure(sent=sent, answered=answered, why=str(error.get("why", "")))


class WatchedClient(httpx2.AsyncClient):
    """An ``httpx2.AsyncClient`` whose answers to JSON-RPC requests are the
    server's JSON-RPC answers or this client's marked error."""

    def __init__(self, *, mark: str, **options: Any) -> None:
        super().__init__(**options)
        self._mark = mark

    async def send(self, request: httpx2.Request, **options: Any) -> httpx2.Response:
        asked = _request_id(request)
        if asked is _NO_ID:
            return await super().send(request, **options)
        try:
            response = await super().send(request, **options)
        except _UNSENT as exc:
            return self._failed(request, asked, Failure(False, False, _driver(exc)))
        except httpx2.TransportError as exc:
            broke = f"the connection broke before an answer came ({_driver(exc)})"
            return self._failed(request, asked, Failure(True, False, broke))
        why = await _not_an_answer(response, asked)
        if why is None:
            return response
        await response.aclose()
        return self._failed(request, asked, Failure(True, True, why))

    def _failed(self, request: httpx2.Request, asked: Any, failed: Failure) -> httpx2.Response:
        """The JSON-RPC error that stands for ``failed`` as the answer to ``asked``."""
        data = {
            MARK: self._mark,
            "sent": failed.sent,
            "answered": failed.answered,
            "why": failed.why,
        }
        error = {"code": -32603, "message": failed.why, "data": data}
        body = json.dumps({"jsonrpc": "2.0", "id": asked, "error": error}).encode()
        headers = {"content-type": "application/json"}
        return httpx2.Response(200, headers=headers, content=body, request=request)


def _request_id(request: httpx2.Request) -> Any:
    """The id of the JSON-RPC request ``request`` posts; ``_NO_ID`` if it
    posts none (a notification, a response, the GET stream, a DELETE)."""
    if request.method != "POST":
        return _NO_ID
    try:
        message = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return _NO_ID
    if isinstance(message, dict) and isinstance(message.get("method"), str) and "id" in message:
        return message["id"]
    return _NO_ID


async def _not_an_answer(response: httpx2.Response, asked: Any) -> str | None:
    """Why ``response`` is not the JSON-RPC answer to request ``asked``; None
    if it is one, or one the SDK or the session reads themselves."""
    status = response.status_code
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    said = f"HTTP {status} {response.reason_phrase}".rstrip() + (f" with {kind}" if kind else "")
    if status in _READ_ELSEWHERE or (status in (307, 308) and _same_origin(response)):
        return None
    if 300 <= status < 400:
        return f"{said}: a redirect, not followed"
    if status >= 400:
        if kind == "application/json" and await _json_rpc(response, None):
            return None  # the server's JSON-RPC error, at a status that says the same
        return f"{said}: not a JSON-RPC answer"
    if status == 202 or kind not in ("application/json", "text/event-stream"):
        return f"{said}: not a JSON-RPC answer"
    if kind == "application/json" and not await _json_rpc(response, asked):
        return f"{said}: not the JSON-RPC answer to the request"
    return None


async def _json_rpc(response: httpx2.Response, asked: Any) -> bool:
    """Whether the body is a JSON-RPC answer to request ``asked`` (with
    ``asked`` None: a JSON-RPC error, whichever id it names), as the SDK reads
    one. The body is read whole, as the SDK would read it."""
    from pydantic import ValidationError

    from mcp.types import JSONRPCError, JSONRPCResponse, jsonrpc_message_adapter

    try:
        message = jsonrpc_message_adapter.validate_json(await response.aread(), by_name=False)
    except (ValidationError, httpx2.StreamError, httpx2.TransportError):
        return False
    if asked is None:
        return isinstance(message, JSONRPCError)
    return isinstance(message, JSONRPCResponse | JSONRPCError) and _same_id(message.id, asked)


def _same_id(given: Any, asked: Any) -> bool:
    return type(given) is type(asked) and bool(given == asked)


def _same_origin(response: httpx2.Response) -> bool:
    """Whether a redirect stays where the request went (the SDK follows no other)."""
    location = response.headers.get("location")
    if not location:
        return False
    target = response.request.url.join(location)
    here = response.request.url
    return (target.scheme, target.host, target.port) == (here.scheme, here.host, here.port)


def _driver(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
