"""What both example apps do with a request before Runwright sees it.

Flask and Django decode request bodies leniently: bytes that are not UTF-8
become U+FFFD, so a client's broken text would be stored as something it never
sent. These helpers decode strictly and turn anything else into one clear
:class:`InvalidInput`; ``status_for`` maps every Runwright error to an answer
that is never a 500. What the apps' event streams may show of a run is here
too: both serve the same ``/runs/<id>/events``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from runner.errors import InvalidInput, RunNotFound, RunwrightError, StoreUnavailable
from store.events import EventType, RunEvent
from store.jsonsafe import loads_strict


def status_for(exc: RunwrightError, *, missing: int = 404) -> int:
    """``missing`` for an unknown run, 503 when the store is down, else 400.

    Approval pages pass ``missing=400``: to them an id that names nothing is
    one more way a link can be wrong.
    """
    if isinstance(exc, RunNotFound):
        return missing
    if isinstance(exc, StoreUnavailable):
        return 503  # not the client's fault: it may retry
    return 400


def json_body(body: bytes) -> Any:
    """The body as strict JSON: UTF-8, no NaN or Infinity, not nested past what
    the parser can take (the engine then applies its own nesting limit)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("the body is not UTF-8") from None
    return loads_strict(text, "the body")


def check_form(content_type: str | None, body: bytes) -> None:
    """Refuse a form whose fields are not UTF-8 (raw or percent-encoded)."""
    kind = (content_type or "").split(";")[0].strip().lower()
    try:
        if kind == "application/x-www-form-urlencoded":
            parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict")
        elif kind == "multipart/form-data":
            body.decode("utf-8")  # these forms upload no files: every part is text
    except UnicodeDecodeError:
        raise InvalidInput("the form is not UTF-8 text") from None


# ------------------------------------------------------------ run event streams

# Both apps serve GET /runs/<id>/events (runner.sse); the console follows runs itself.
LIVE_KEEPALIVE_SECONDS = 15.0
# A stream ends after this long, and the page's EventSource reconnects after
# the last event it saw: a waiting run does not hold a server thread for days.
LIVE_TIMEOUT_SECONDS = 600.0


def public_event(event: RunEvent) -> dict[str, Any]:
    """What the apps' event streams may show of an event (their ``shape``).

    A run's stream is open to whoever has its id, like ``GET /runs/<id>``;
    what a run asks for is shown only in the console (to those signed in, and
    to the holder of the approval's link).
    So no tool input leaves: not the tool steps' inputs, not the arguments of
    the model's tool calls, not error messages (they may quote the arguments),
    and neither the approval ids. Nor who decided an approval (a console
    user's sign-in name) or the reason they gave: the console shows both to
    those signed in. Outputs and the model's text stay.
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
    return {**event.to_dict(), "data": data}


_STEP_FIELDS = ("kind", "index", "name", "tool_call_id", "output", "started_at", "finished_at")
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
