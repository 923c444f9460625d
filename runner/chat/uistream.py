"""A thread's runs as the Vercel AI SDK's UI message stream (docs/conversations.md).

The stream is Server-Sent Events, one UI message part per event
(``data: {json}``), ended by ``data: [DONE]``; the header
``x-vercel-ai-ui-message-stream: v1`` names the protocol. The AI SDK's
client (``useChat``, ``readUIMessageStream``) reads it as it reads a
``streamText`` response. Each run of the thread is one assistant message
(its id is the run's id):

- ``start``, when the run's replay begins;
- an ``llm`` step: ``start-step``, its text (``text-start``,
  ``text-delta``, ``text-end``; live from the model's token deltas when the
  agent streams), each tool call (``tool-input-available``, a dynamic tool),
  ``finish-step``;
- a ``tool`` step: its result (``tool-output-available``), or
  ``tool-output-error``;
- an approval or a question (a request of kind ``input``): a
  ``data-approval`` or ``data-question`` part keyed by the request's id,
  written again when it is decided;
- the run's end: ``finish``, with the run's status in its metadata.

Each part's SSE id is ``<run id>:<event id>:<part>`` (``<run id>:0:0`` for
``start``), unique across the thread: a client that reconnects with
``Last-Event-ID`` (or ``?after=``) gets the parts after it, none twice and
none missed. Token deltas are not stored; their parts' ids add the step and
how much of it the client has (``...:<step>:s`` after its ``start-step``,
``...:<step>:<chars>`` with that many characters of its text), so a stream
resumed in the middle of a text sends the rest of it once the step is
journaled.

What a part shows is the event feed's public shape (runner/sse.py
``public_event``, with the redactor of the run's agent), plus what a chat
cannot do without: the model's tool-call arguments and what a request asks,
redacted with the same redactor. So the stream is for those who may see a
run's payloads (the console's ``see_payloads``), and never shows what the
public shape withholds beyond that: error messages, who decided and why,
worker hosts.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.console.abilities import Ability
from runner.core.agent import registry
from runner.core.errors import InvalidInput, RunNotFound, StoreUnavailable
from runner.core.redaction import Redactor
from runner.sse import HEADERS as SSE_HEADERS
from runner.sse import KEEPALIVE_SECONDS, MAX_EVENT_ID, public_event
from store.events import EventType, RunEvent
from store.models import Decision, RequestKind, Run, RunStatus
from store.validate import MAX_ID_CHARS, check_run_id, check_text

if TYPE_CHECKING:
    from runner.core.engine.engine import Engine

log = logging.getLogger(__name__)

HEADERS = {**SSE_HEADERS, "x-vercel-ai-ui-message-stream": "v1"}
# What another protocol shows of a part: the JSON of its frame, or None.
PartShape = Callable[[dict[str, Any], str, str], dict[str, Any] | None]
DONE = b"data: [DONE]\n\n"

_CURSOR = re.compile(r"([^:]{1,200}):([0-9]{1,19}):([0-9]{1,4})(?::([0-9]{1,9}):(s|[0-9]{1,12}))?")
_BAD_CURSOR = "a last event id is one this stream sent: <run id>:<event id>:<part>"

# The run's status as the AI SDK's finish reason.
_FINISH = {
    RunStatus.COMPLETED: "stop",
    RunStatus.FAILED: "error",
    RunStatus.CANCELLED: "other",
}
TOOL_FAILED = "the tool failed"  # its error message may quote the arguments


@dataclass(frozen=True)
class Cursor:
    """Where a client stopped: after part ``part`` of event ``event`` of run
    ``run_id``; in a step the model streams (``step``), with ``chars``
    characters of its live text (None: its ``start-step`` alone)."""

    run_id: str
    event: int
    part: int
    step: int | None = None
    chars: int | None = None

    def __str__(self) -> str:
        head = f"{self.run_id}:{self.event}:{self.part}"
        if self.step is None:
            return head
        return f"{head}:{self.step}:{'s' if self.chars is None else self.chars}"


def parse_cursor(value: str | None) -> Cursor | None:
    """The place a client resumes after (None: from the start). The header is
    the client's to write: anything but an id this stream sends is one
    :class:`InvalidInput`, without echoing it."""
    if value is None or value == "":
        return None
    match = _CURSOR.fullmatch(value)
    if match is None or int(match[2]) > MAX_EVENT_ID:
        raise InvalidInput(_BAD_CURSOR)
    try:
        run_id = check_run_id(match[1])
    except RunNotFound:
        raise InvalidInput(_BAD_CURSOR) from None
    step = None if match[4] is None else int(match[4])
    chars = None if match[5] in (None, "s") else int(match[5])
    return Cursor(run_id, int(match[2]), int(match[3]), step, chars)


def thread_runs(engine: Engine, thread: str) -> list[Run]:
    """The thread's runs in the order the engine takes them (oldest first)."""
    return list(engine.thread(thread).runs)


class Message:
    """One run as one UI message: its parts, event by event."""

    def __init__(self, run_id: str, redactor: Redactor, cursor: Cursor | None) -> None:
        self.run_id = run_id
        self.redactor = redactor
        # The live text each step's part holds so far (None: the client's,
        # from before it resumed: only its length is known).
        self.texts: dict[int, str | None] = {}
        self.chars: dict[int, int] = {}
        self.opened: set[int] = set()  # steps whose start-step the client has
        self.heard: dict[int, int] = {}  # the next delta each step's live text wants
        self.skipped: set[int] = set()  # steps whose live text this stream does not send
        self.ended: set[int] = set()
        self.position = Cursor(run_id, 0, 0) if cursor is None else cursor
        if cursor is not None and cursor.step is not None:
            self.opened.add(cursor.step)
            if cursor.chars is not None:
                self.texts[cursor.step] = None
                self.chars[cursor.step] = cursor.chars

    def start(self) -> list[tuple[str, dict[str, Any]]]:
        """The message's first part, with its id."""
        self.position = Cursor(self.run_id, 0, 0)
        return [(str(self.position), {"type": "start", "messageId": self.run_id})]

    def parts(self, event: RunEvent) -> list[tuple[str | None, dict[str, Any]]]:
        """The parts of ``event`` the client has not had, each with its SSE id."""
        if event.type is EventType.TOKEN:
            return self._token(event.data)
        made = self._parts(event)
        out: list[tuple[str | None, dict[str, Any]]] = []
        assert event.id is not None
        for index, part in enumerate(made):
            place = Cursor(self.run_id, event.id, index)
            if event.id == self.position.event and index <= self.position.part:
                continue  # sent before the client reconnected
            self.position = place
            out.append((str(place), part))
        return out

    def _parts(self, event: RunEvent) -> list[dict[str, Any]]:
        public = public_event(event, self.redactor)["data"]
        if event.type is EventType.STEP:
            if public["kind"] == "llm":
                return self._reply(public, event.data)
            if public["kind"] == "tool" and public.get("tool_call_id"):
                return [self._result(public, failed=event.data.get("error") is not None)]
            return []
        if event.type is EventType.APPROVAL:
            return [self._request(public, event.data)]
        if event.type is EventType.STATUS:
            status = event.status
            if status in _FINISH:
                metadata = {"run_id": self.run_id, "status": public["status"]}
                if public.get("error_code"):
                    metadata["error_code"] = public["error_code"]
                return [
                    {"type": "finish", "finishReason": _FINISH[status], "messageMetadata": metadata}
                ]
        return []

    def _reply(self, public: dict[str, Any], data: dict[str, Any]) -> list[dict[str, Any]]:
        step = int(public["index"])
        message = public["output"]["message"]
        parts: list[dict[str, Any]] = [] if step in self.opened else [{"type": "start-step"}]
        parts += self._text(step, message["content"] or "")
        arguments = _arguments(data.get("output"))
        for call in message["tool_calls"]:
            call_id, name = call.get("id"), call.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                continue
            parts.append(
                {
                    "type": "tool-input-available",
                    "toolCallId": call_id,
                    "toolName": name,
                    "input": self.redactor.redact(arguments.get(call_id)),
                    "dynamic": True,
                }
            )
        parts.append({"type": "finish-step"})
        return parts

    def _text(self, step: int, content: str) -> list[dict[str, Any]]:
        part = _text_id(step)
        if step not in self.texts:
            if not content:
                return []
            return [
                {"type": "text-start", "id": part},
                {"type": "text-delta", "id": part, "delta": content},
                {"type": "text-end", "id": part},
            ]
        sent, chars = self.texts[step], self.chars[step]
        parts: list[dict[str, Any]] = []
        if sent is None or content.startswith(sent):
            if content[chars:]:
                parts.append({"type": "text-delta", "id": part, "delta": content[chars:]})
            parts.append({"type": "text-end", "id": part})
        else:
            # The deltas were of an attempt the model did not finish: the
            # journaled text follows, whole, in a part of its own.
            again = f"{part}-journaled"
            parts += [
                {"type": "text-end", "id": part},
                {"type": "text-start", "id": again},
                {"type": "text-delta", "id": again, "delta": content},
                {"type": "text-end", "id": again},
            ]
        self.ended.add(step)
        return parts

    def _token(self, delta: dict[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
        step, n, text = delta.get("step"), delta.get("n"), delta.get("text")
        if not isinstance(step, int) or not isinstance(n, int) or not isinstance(text, str):
            return []
        if step in self.ended or step in self.skipped or self.texts.get(step, "") is None:
            return []  # journaled already, or the step's event sends the rest
        if n != self.heard.get(step, 0):
            # A delta missed (this stream began, or resumed, in the middle of
            # the step, or a publish was lost): the step's event sends the text.
            if step in self.texts:
                self.texts[step] = None
            else:
                self.skipped.add(step)
            return []
        self.heard[step] = n + 1
        if not text:
            return []
        text = self.redactor.redact(text)
        out: list[tuple[str | None, dict[str, Any]]] = []
        if step not in self.opened:
            self.opened.add(step)
            out.append((self._place(step), {"type": "start-step"}))
        if step not in self.texts:
            self.texts[step] = ""
            self.chars[step] = 0
            out.append((self._place(step), {"type": "text-start", "id": _text_id(step)}))
        self.texts[step] = (self.texts[step] or "") + text
        self.chars[step] += len(text)
        out.append((self._place(step), {"type": "text-delta", "id": _text_id(step), "delta": text}))
        return out

    def _place(self, step: int) -> str:
        """The id of a live part: where the client is in the run's events,
        and how much of the step it has (a resumed stream sends the rest)."""
        here = self.position
        return str(Cursor(self.run_id, here.event, here.part, step, self.chars.get(step)))

    def _result(self, public: dict[str, Any], *, failed: bool) -> dict[str, Any]:
        if failed:
            return {
                "type": "tool-output-error",
                "toolCallId": public["tool_call_id"],
                "errorText": TOOL_FAILED,
                "dynamic": True,
            }
        return {
            "type": "tool-output-available",
            "toolCallId": public["tool_call_id"],
            "output": public.get("output"),
            "dynamic": True,
        }

    def _request(self, public: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        question = data.get("kind") == RequestKind.INPUT.value
        decision = public.get("decision")
        asked = self.redactor.redact(data.get("input"))
        body: dict[str, Any] = {
            "id": data.get("approval_id"),
            "run_id": self.run_id,
            "tool_call_id": public.get("tool_call_id"),
            "tool_name": public.get("tool_name"),
            "status": "pending" if decision is None else decision,
            "expires_at": public.get("expires_at"),
        }
        if question:
            body["question"] = asked.get("question") if isinstance(asked, dict) else asked
            body["respond_with"] = "answer"  # Engine.answer(id, value)
        else:
            body["input"] = asked
            body["respond_with"] = "decide"  # Engine.decide(id, approve)
        if decision == Decision.ANSWERED.value:
            body["status"] = "answered"
        kind = "data-question" if question else "data-approval"
        return {"type": kind, "id": data.get("approval_id"), "data": body}


def _text_id(step: int) -> str:
    return f"text-{step}"


def _arguments(output: Any) -> dict[str, Any]:
    """The arguments of an llm step's tool calls, by call id (JSON, as the
    model wrote them; a string that is not JSON stays a string)."""
    message = output.get("message") if isinstance(output, dict) else None
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    found: dict[str, Any] = {}
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(call.get("id"), str):
            continue
        raw = function.get("arguments")
        try:
            found[call["id"]] = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            found[call["id"]] = raw
    return found


def ui_stream(
    engine: Engine,
    thread: str,
    last_event_id: str | None,
    *,
    timeout: float | None = None,
    keepalive: float = KEEPALIVE_SECONDS,
    viewer: str | None = None,
    source: str | None = None,
) -> Iterator[bytes] | None:
    """The UI message stream of ``thread``'s runs after ``last_event_id``:
    :func:`thread_stream` of the parts as they are, ended by ``[DONE]``."""
    return thread_stream(
        engine,
        thread,
        last_event_id,
        timeout=timeout,
        keepalive=keepalive,
        viewer=viewer,
        source=source,
    )


def thread_stream(
    engine: Engine,
    thread: str,
    last_event_id: str | None,
    *,
    shape: PartShape | None = None,
    end: bytes | None = DONE,
    timeout: float | None = None,
    keepalive: float = KEEPALIVE_SECONDS,
    viewer: str | None = None,
    source: str | None = None,
) -> Iterator[bytes] | None:
    """The UI message stream of ``thread``'s runs after ``last_event_id``,
    following the latest until it ends or ``timeout`` seconds pass (then the
    stream stops without ``[DONE]``: reconnect with the last id). None: the
    thread has no run (an HTTP app answers 204, which ``useChat`` reads as
    nothing to resume).

    Checked before any frame: a malformed ``last_event_id``, or one of a run
    not in the thread, raises :class:`InvalidInput`; an unreachable store
    :class:`StoreUnavailable`. ``viewer``: the person the stream is for
    (and ``source``, where from): each run's payloads shown to them go to
    the audit log (:meth:`Engine.viewed_payloads`).

    ``shape(part, run_id, thread)`` gives the JSON of each part's frame, or
    None to leave it out (runner/chat/agui.py: another protocol's events
    from the same parts, with the same ids); ``end``, the stream's last
    frame once the thread's runs ended."""
    cursor = parse_cursor(last_event_id)
    if not keepalive > 0:
        raise InvalidInput("keepalive must be a positive number of seconds")
    runs = thread_runs(engine, check_text(thread, "the thread", max_chars=MAX_ID_CHARS))
    if not runs:
        return None
    seen = {run.id for run in runs}
    if cursor is not None:
        ids = [run.id for run in runs]
        if cursor.run_id not in ids:
            raise InvalidInput("the last event id is of a run not in this thread")
        runs = runs[ids.index(cursor.run_id) :]
    deadline = None if timeout is None else time.monotonic() + timeout
    frames = _Frames(engine, thread, shape, keepalive, viewer, source)
    return frames.iterate(runs, seen, cursor, deadline, end)


class _Frames:
    """The frames of one stream (one request)."""

    def __init__(
        self,
        engine: Engine,
        thread: str,
        shape: PartShape | None,
        keepalive: float,
        viewer: str | None,
        source: str | None,
    ) -> None:
        self.engine = engine
        self.thread = thread
        self.shape = shape
        self.keepalive = keepalive
        self.viewer = viewer
        self.source = source

    def frame(self, run_id: str, ident: str | None, part: dict[str, Any]) -> bytes | None:
        shaped = part if self.shape is None else self.shape(part, run_id, self.thread)
        return None if shaped is None else _frame(ident, shaped)

    def iterate(
        self,
        runs: list[Run],
        seen: set[str],
        cursor: Cursor | None,
        deadline: float | None,
        end: bytes | None,
    ) -> Iterator[bytes]:
        engine = self.engine
        wrote = time.monotonic()
        try:
            while runs:
                run = runs.pop(0)
                if self.viewer is not None:
                    engine.viewed_payloads(run.id, by=self.viewer, source=self.source)
                here = cursor if cursor is not None and cursor.run_id == run.id else None
                message = Message(run.id, registry.redactor(run.agent), here)
                made: list[tuple[str | None, dict[str, Any]]] = []
                if here is None:
                    made += message.start()
                after = None if here is None or here.event == 0 else here.event - 1
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                stream = engine.events(run.id, after, timeout=left)
                with stream.reader() as reader:
                    while True:
                        for ident, part in made:
                            frame = self.frame(run.id, ident, part)
                            if frame is not None:
                                yield frame
                                wrote = time.monotonic()
                        made = []
                        if reader.ended:
                            break
                        quiet = time.monotonic() - wrote
                        if quiet >= self.keepalive:
                            yield b": keepalive\n\n"
                            wrote = time.monotonic()
                            continue
                        for event in reader.read(self.keepalive - quiet):
                            made += message.parts(event)
                if not stream.done:
                    return  # the timeout: the client reconnects after its last id
                if not runs:  # a run started on the thread meanwhile is streamed too
                    runs = [r for r in thread_runs(engine, self.thread) if r.id not in seen]
                    seen.update(r.id for r in runs)
        except RunNotFound:
            pass  # pruned while streamed: the rest of the thread is gone too
        except StoreUnavailable as exc:
            log.warning("the chat stream of thread %s stopped: %s", self.thread, exc)
            return
        if end is not None:
            yield end


def _frame(ident: str | None, part: dict[str, Any]) -> bytes:
    # json.dumps escapes every line break: model text cannot end a frame early.
    data = json.dumps(part, separators=(",", ":"))
    head = "" if ident is None else f"id: {ident}\n"
    return f"{head}data: {data}\n\n".encode()


def refusal(user: str | None, abilities: frozenset[Ability]) -> str | None:
    """Why the console's access rules refuse ``user`` a thread's stream, or
    None: it wants someone signed in who may see runs and their payloads
    (runner/console/abilities.py); a chat stream is payloads, so it is not
    masked but refused."""
    if user is None:
        return "Sign in to read this thread."
    if Ability.SEE_RUNS not in abilities or Ability.SEE_PAYLOADS not in abilities:
        return "A thread's chat stream shows what its runs carry: that takes see_payloads."
    return None
