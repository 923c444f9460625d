"""A run's events as Server-Sent Events (``text/event-stream``), for web apps.

:func:`sse_stream` is framework-free; :func:`flask_response` and
:func:`django_response` wrap it (Flask and Django are imported only when they
are called). Durable events carry their id, so a browser's ``EventSource``
sends the last one back as ``Last-Event-ID`` when it reconnects and the stream
resumes right after it: no event is lost or repeated. Token deltas go without
an id (they are live only, and must not move that resume point).

Each open stream holds one thread of the web server, blocked between events:
serve it with threads (``gunicorn -k gthread``) or green threads. A client
that went away is noticed when a write fails, at the latest at the next
keep-alive, and the stream's reader is detached then.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from runner.core.agent import registry
from runner.core.errors import InvalidInput, RunNotFound, StoreUnavailable
from runner.core.redaction import Redactor
from store.events import EventType, RunEvent

if TYPE_CHECKING:
    from flask import Response

    from runner.core.engine.engine import Engine
    from runner.core.events.eventstream import EventStream

log = logging.getLogger(__name__)

# What an app shows of an event: the JSON of its frame, or None to leave it out.
Shape = Callable[[RunEvent], dict[str, Any] | None]

KEEPALIVE_SECONDS = 15.0
# How long a browser waits before it reconnects, in milliseconds.
RETRY_MS = 3000
# A proxy must pass each frame on at once, and nothing may cache the stream.
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

MAX_EVENT_ID = 2**63 - 1  # event ids are Postgres bigints
_EVENT_ID = re.compile(r"[0-9]{1,19}")  # ASCII digits only: str.isdigit takes others
_BAD_EVENT_ID = f"a last event id must be a decimal integer from 0 to {MAX_EVENT_ID}"


def public_event(event: RunEvent, redactor: Redactor | None = None) -> dict[str, Any]:
    """What a stream shows of an event by default: its public shape.

    A run's stream is often open to whoever has its id, like an app's
    ``GET /runs/<id>``; what a run asks for is shown only in the console (to
    those signed in, and to the holder of the approval's link). So no tool
    input leaves: not the tool steps' inputs, not the arguments of
    the model's tool calls, not error messages (they may quote the arguments),
    and neither the approval ids. Nor who decided an approval (a console
    user's sign-in name) or the reason they gave: the console shows both to
    those signed in. Outputs and the model's text stay, redacted with
    ``redactor`` (the run's agent's, in :func:`sse_stream`; the project's
    RUNWRIGHT_REDACT if None).
    """
    data = event.data
    if event.type is EventType.STEP:
        data = {key: data.get(key) for key in _STEP_FIELDS}
        data["failed"] = event.data.get("error") is not None
        if data["kind"] == "llm":
            data["output"] = _public_reply(data["output"])
        elif data["kind"] == "wait":
            data["output"] = None  # the wait's own record names the approvals
    elif event.type is EventType.APPROVAL:
        # Named fields, not a field left out: what an approval event gains
        # later stays private until it is added here.
        data = {key: data.get(key) for key in _APPROVAL_FIELDS}
    elif event.type is EventType.EXECUTION:
        data = {key: value for key, value in data.items() if key != "owner"}  # a host name
    elif event.type is EventType.CHILD:
        data = {key: data.get(key) for key in _CHILD_FIELDS}
    elif event.type is EventType.VERSION:
        data = {key: data.get(key) for key in _VERSION_FIELDS}  # not who moved it
    redactor = redactor if redactor is not None else registry.redactor(None)
    return {**event.to_dict(), "data": redactor.redact(data)}


_STEP_FIELDS = ("kind", "index", "name", "tool_call_id", "output", "started_at", "finished_at")
_CHILD_FIELDS = ("action", "run_id", "agent", "call_id", "status", "error_code")
_VERSION_FIELDS = ("from", "to", "changes")
_APPROVAL_FIELDS = ("action", "step_index", "tool_call_id", "tool_name", "decision", "expires_at")


def _public_reply(output: Any) -> dict[str, Any]:
    """An llm step's output without its tool calls' arguments."""
    reply = output if isinstance(output, dict) else {}
    message = reply.get("message")
    message = message if isinstance(message, dict) else {}
    content = message.get("content")
    calls = message.get("tool_calls")
    named = []
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            named.append({"id": call.get("id"), "name": function.get("name")})
    return {
        "message": {"content": content if isinstance(content, str) else None, "tool_calls": named},
        "finish_reason": reply.get("finish_reason"),
    }


def full_event(event: RunEvent) -> dict[str, Any]:
    """Everything an event holds (tool inputs, decisions' reasons, hosts): for
    callers that check who may see it."""
    return event.to_dict()


def parse_last_event_id(value: str | None) -> int | None:
    """The id a client resumes after (None: from the start). The header is the
    client's to write, so anything but a plain decimal id is refused, once,
    without echoing it."""
    if value is None:
        return None
    if _EVENT_ID.fullmatch(value) is None or int(value) > MAX_EVENT_ID:
        raise InvalidInput(_BAD_EVENT_ID)
    return int(value)


def sse_stream(
    engine: Engine,
    run_id: str,
    last_event_id: str | None,
    *,
    timeout: float | None = None,
    keepalive: float = KEEPALIVE_SECONDS,
    shape: Shape | None = None,
    viewer: str | None = None,
    source: str | None = None,
) -> Iterator[bytes]:
    """The frames of the run's events after ``last_event_id``, then of its new
    events until it ends or ``timeout`` seconds pass; a final ``end`` frame
    says which (``{"reason": "settled"}`` or ``"timeout"``: reconnect then).

    Everything a request can get wrong is checked here, before any frame:
    a malformed ``last_event_id`` raises :class:`InvalidInput`, a bad or
    unknown run :class:`RunNotFound`, an unreachable store
    :class:`StoreUnavailable`. Nothing is attached to the feed until the
    first frame is asked for, and closing the iterator detaches it.

    ``shape(event)`` gives the JSON of each frame, or None to leave the event
    out; the frame's id and type are the event's own. The default,
    :func:`public_event`, leaves out tool inputs, error messages, approval ids,
    who decided and why, who moved the run to another version, and worker
    host names, and redacts the rest with the redactor of the run's agent;
    :func:`full_event` keeps all.

    ``viewer``: the person the stream is for, and ``source`` where from;
    given, the view of the run's payloads goes to the audit log
    (:meth:`Engine.viewed_payloads`, once per person and run per window).
    """
    after = parse_last_event_id(last_event_id)
    if not keepalive > 0:
        raise InvalidInput("keepalive must be a positive number of seconds")
    stream = engine.events(run_id, after, timeout=timeout)
    run = engine.get_run(run_id)  # an unknown run is a 404 now, not a broken stream later
    if viewer is not None:
        engine.viewed_payloads(run_id, by=viewer, source=source)
    if shape is None:
        shape = functools.partial(public_event, redactor=registry.redactor(run.agent))
    return _frames(stream, keepalive, shape)


def _frames(stream: EventStream, keepalive: float, shape: Shape) -> Iterator[bytes]:
    try:
        # The with block detaches the reader however the generator ends,
        # including a close() after a write to a gone client failed.
        with stream.reader() as reader:
            yield f"retry: {RETRY_MS}\n\n".encode()
            wrote = time.monotonic()
            while not reader.ended:
                quiet = time.monotonic() - wrote
                if quiet >= keepalive:
                    yield b": keepalive\n\n"
                    wrote = time.monotonic()
                    continue
                for event in reader.read(keepalive - quiet):
                    frame = _frame(event, shape)
                    if frame is not None:
                        yield frame
                        wrote = time.monotonic()
            reason = "settled" if stream.done else "timeout"
    except RunNotFound:
        reason = "gone"  # pruned since the request was checked
    except StoreUnavailable as exc:
        # No end frame: the client reconnects after its last id and gets a 503
        # while the store is down, or the rest once it is back.
        log.warning("the event stream of run %s stopped: %s", stream.run_id, exc)
        return
    yield _end(reason)


def _frame(event: RunEvent, shape: Shape) -> bytes | None:
    payload = shape(event)
    if payload is None:
        return None
    # json.dumps escapes every line break, and ensure_ascii every non-ASCII
    # character: model text cannot end a data line or the frame early.
    data = json.dumps(payload, separators=(",", ":"))
    head = "" if event.id is None else f"id: {event.id}\n"
    return f"{head}event: {event.type.value}\ndata: {data}\n\n".encode()


def _end(reason: str) -> bytes:
    return f'event: end\ndata: {{"reason":"{reason}"}}\n\n'.encode()


def flask_response(
    engine: Engine,
    run_id: str,
    *,
    shape: Shape | None = None,
    timeout: float | None = None,
    keepalive: float = KEEPALIVE_SECONDS,
) -> Response:
    """The stream of the current Flask request: it resumes after the
    ``Last-Event-ID`` header, or else after ``?after=``. Raises what
    :func:`sse_stream` raises, before the response starts."""
    from flask import Response, request, stream_with_context

    last = request.headers.get("Last-Event-ID")
    if last is None:
        last = request.args.get("after")
    frames = sse_stream(engine, run_id, last, timeout=timeout, keepalive=keepalive, shape=shape)
    response = Response(stream_with_context(frames), mimetype="text/event-stream")
    response.headers.update(HEADERS)
    return response


def django_response(
    request: Any,
    engine: Engine,
    run_id: str,
    *,
    shape: Shape | None = None,
    timeout: float | None = None,
    keepalive: float = KEEPALIVE_SECONDS,
) -> Any:
    """A ``StreamingHttpResponse`` of the stream for a Django ``request``
    (``Last-Event-ID``, or else ``?after=``). Raises what :func:`sse_stream`
    raises, before the response starts. Serve it from WSGI: under ASGI Django
    would consume this synchronous iterator in a thread of its own."""
    from django.http import StreamingHttpResponse  # type: ignore[import-untyped]

    last = request.headers.get("Last-Event-ID")
    if last is None:
        last = request.GET.get("after")
    frames = sse_stream(engine, run_id, last, timeout=timeout, keepalive=keepalive, shape=shape)
    response = StreamingHttpResponse(frames, content_type="text/event-stream")
    for name, value in HEADERS.items():
        response[name] = value
    return response
