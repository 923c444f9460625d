"""What both example apps do with a request before Runwright sees it.

Flask and Django decode request bodies leniently: bytes that are not UTF-8
become U+FFFD, so a client's broken text would be stored as something it never
sent. These helpers decode strictly and turn anything else into one clear
:class:`InvalidInput`; ``status_for`` maps every Runwright error to an answer
that is never a 500. The live run page, and what it may show of a run's
events, are here too: both apps serve the same page.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape
from typing import Any
from urllib.parse import parse_qsl

from runner import Run
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


# ------------------------------------------------------------ live run pages

# Both apps serve GET /runs/<id>/events (runner.sse) and GET /runs/<id>/live.
LIVE_KEEPALIVE_SECONDS = 15.0
# A stream ends after this long, and the page's EventSource reconnects after
# the last event it saw: a waiting run does not hold a server thread for days.
LIVE_TIMEOUT_SECONDS = 600.0


def public_event(event: RunEvent) -> dict[str, Any]:
    """What the live page may show of an event (the ``shape`` of both apps).

    A run's page is open to whoever has its id, like ``GET /runs/<id>``, and
    what a run asks for is shown only to the holder of the approval's token.
    So no tool input leaves: not the tool steps' inputs, not the arguments of
    the model's tool calls, not error messages (they may quote the arguments),
    and neither the approval ids. Outputs and the model's text stay.
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
        data = {key: value for key, value in data.items() if key != "approval_id"}
    elif event.type is EventType.EXECUTION:
        data = {key: value for key, value in data.items() if key != "owner"}  # a host name
    return {**event.to_dict(), "data": data}


_STEP_FIELDS = ("kind", "index", "name", "tool_call_id", "output", "started_at", "finished_at")


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


# The page's script and style never change (the run id is not in them: the
# script finds its stream at the relative URL "events"), so the CSP names
# them by hash and allows nothing else. Model and tool output enter the page
# through textContent only.
LIVE_STYLE = (
    "body{font:15px/1.45 system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem}"
    "#answer{white-space:pre-wrap;border-left:3px solid #888;padding-left:.75rem}"
    "#steps li{margin:.2rem 0;overflow-wrap:anywhere}"
)

LIVE_SCRIPT = """
"use strict";
const statusView = document.getElementById("status");
const answerView = document.getElementById("answer");
const stepsView = document.getElementById("steps");
const source = new EventSource("events");
let journaled = 0;  // the last llm step seen: its text is the answer
let streaming = null;  // [epoch, step, attempt] of the text being streamed
let text = "";
let next = 0;
let early = new Map();  // deltas that came before their predecessors

function line(words) {
  const item = document.createElement("li");
  item.textContent = words;
  stepsView.append(item);
}

function short(value) {
  const words = typeof value === "string" ? value : JSON.stringify(value) ?? "";
  return words.length > 300 ? words.slice(0, 300) + "\\u2026" : words;
}

function compare(a, b) {
  for (let i = 0; i < 3; i += 1) {
    if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  }
  return 0;
}

function on(type, handle) {
  source.addEventListener(type, (message) => handle(JSON.parse(message.data).data));
}

on("status", (data) => {
  statusView.textContent = data.status + (data.error_code ? " (" + data.error_code + ")" : "");
  line("status: " + statusView.textContent);
});

on("execution", (data) => {
  line("execution " + data.epoch + (data.takeover ? ", taking over a lost one" : ""));
});

on("approval", (data) => {
  line(data.action === "requested"
    ? data.tool_name + " waits for a person's approval"
    : data.tool_name + ": " + data.decision + (data.reason ? " (" + data.reason + ")" : ""));
});

on("step", (data) => {
  if (data.kind === "llm") {
    const message = data.output.message;
    const calls = message.tool_calls.map((call) => call.name);
    if (data.index >= journaled) {
      journaled = data.index;
      streaming = null;
      if (message.content) answerView.textContent = message.content;
    }
    line(data.index + ". model: " + (calls.length ? "calls " + calls.join(", ") : "answers"));
  } else if (data.kind === "tool") {
    const result = data.failed ? " failed" : " \\u2192 " + short(data.output);
    line(data.index + ". " + data.name + result);
  } else {
    line(data.index + ". waits (" + data.name + ")");
  }
});

// A delta belongs to the text of (epoch, step, attempt): a newer one starts
// the text again, an older one is late and dropped, and so is any delta of a
// step whose text is journaled already.
on("token", (data) => {
  const key = [data.epoch, data.step, data.attempt];
  if (data.step <= journaled || !Number.isInteger(data.n) || typeof data.text !== "string") return;
  if (streaming === null || compare(key, streaming) > 0) {
    streaming = key;
    text = "";
    next = 0;
    early = new Map();
  } else if (compare(key, streaming) < 0) {
    return;
  }
  early.set(data.n, data.text);
  while (early.has(next)) {
    text += early.get(next);
    early.delete(next);
    next += 1;
  }
  answerView.textContent = text;
});

// After a timeout the server ends the stream and EventSource reconnects after
// the last id; once the run has settled there is nothing more to wait for.
source.addEventListener("end", (message) => {
  if (JSON.parse(message.data).reason !== "timeout") source.close();
});

source.addEventListener("error", () => {
  if (source.readyState === EventSource.CLOSED) line("the stream is closed; reload to retry");
});
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


LIVE_HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'none'; script-src {_csp_hash(LIVE_SCRIPT)}; "
        f"style-src {_csp_hash(LIVE_STYLE)}; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def live_page(run: Run) -> str:
    """The live page of a run (serve it with :data:`LIVE_HEADERS`)."""
    return (
        "<!doctype html>\n<meta charset=utf-8>\n"
        f"<title>Run {escape(run.id)}</title>\n"
        f"<style>{LIVE_STYLE}</style>\n"
        f"<h1>{escape(run.agent)}</h1>\n<p>Run {escape(run.id)}: "
        f'<b id="status">{escape(run.status.value)}</b></p>\n'
        '<h2>Answer</h2>\n<p id="answer"></p>\n'
        '<h2>Steps</h2>\n<ol id="steps"></ol>\n'
        f"<script>{LIVE_SCRIPT}</script>\n"
    )
