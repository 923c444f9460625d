"""The run's message history: what is stored, and what the model is sent.

It starts with the trigger, as the model first sees it (:func:`render_trigger`).
The history holds the engine's own records beside the conversation:
``approval_request`` and ``approval_response`` entries, and ``child_request``
entries (a call that started a child run: runner/core/children.py). They are the
journal of a wait and never go to the model. ``history_summary`` entries (an
agent's ``History`` that summarizes: runner/core/steps/context_window.py) stand
for the conversation's oldest messages; they are kept when a thread goes on,
and go to the model only as the summary in place of those messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from store.models import Approval, Decision, Message, TriggerEnvelope

APPROVAL_REQUEST = "approval_request"
APPROVAL_RESPONSE = "approval_response"
CHILD_REQUEST = "child_request"
ENGINE_ROLES = frozenset({APPROVAL_REQUEST, APPROVAL_RESPONSE, CHILD_REQUEST})
HISTORY_SUMMARY = "history_summary"
# What a request never holds as it is stored.
NOT_SENT = ENGINE_ROLES | {HISTORY_SUMMARY}


# A message sent to a thread (runner/core/threads.py): its run's trigger.
MESSAGE_SOURCE, MESSAGE_TRIGGER = "thread", "message"


def render_trigger(envelope: TriggerEnvelope) -> str:
    """The first user message: ``source``, ``trigger`` and ``payload`` only, as a
    fenced JSON block with two-space indentation. ``id``, ``keys``, ``thread`` and
    ``received_at`` stay out of it; tools read them from ``ctx.trigger``. A
    message sent to a thread is its text."""
    payload = envelope.payload
    if (
        envelope.source == MESSAGE_SOURCE
        and envelope.trigger == MESSAGE_TRIGGER
        and isinstance(payload, dict)
        and isinstance(payload.get("text"), str)
    ):
        return str(payload["text"])
    body = {"source": envelope.source, "trigger": envelope.trigger, "payload": envelope.payload}
    return "```json\n" + json.dumps(body, indent=2, ensure_ascii=False) + "\n```"


def trigger_message(envelope: TriggerEnvelope) -> Message:
    return {"role": "user", "content": render_trigger(envelope)}


def for_model(
    instructions: str, history: list[Message], edits: Mapping[str, Any] | None = None
) -> list[Message]:
    """The request's messages: the agent's current instructions as the system
    message (never stored), then the conversation without engine records.

    A call whose arguments a person edited before approving it is sent as it
    ran, with the edited arguments; the history keeps the model's own, and the
    call's result says a person changed them (:func:`edited_content`).
    ``edits``: :func:`edited_arguments` of ``history``, if the caller has them."""
    return Request(instructions, edited_arguments(history) if edits is None else edits).of(history)


class Request:
    """:func:`for_model` of a history that only grows, as an execution's
    does: each request converts only the messages added since the last one
    (a long run's history is not walked again at every step)."""

    def __init__(self, instructions: str, edits: Mapping[str, Any]) -> None:
        self.edits = edits
        self.head: list[Message] = (
            [{"role": "system", "content": instructions}] if instructions else []
        )
        self.built: list[Message] = list(self.head)
        self.upto = 0  # how many messages of the history ``built`` holds

    def of(self, history: list[Message]) -> list[Message]:
        """The messages to send for ``history`` (a list of its own)."""
        if len(history) < self.upto:  # not the history this was built from
            self.built, self.upto = list(self.head), 0
        edits = self.edits
        for message in history[self.upto :]:
            if message.get("role") in NOT_SENT:
                continue
            if edits and message.get("role") == "assistant":
                message = as_ran(message, edits)
            self.built.append(message)
        self.upto = len(history)
        return list(self.built)


def edited_arguments(history: Iterable[Message]) -> dict[str, Any]:
    """The arguments people approved in place of the model's, by call id."""
    return {
        m["tool_call_id"]: m["arguments"]
        for m in history
        if m.get("role") == APPROVAL_RESPONSE and m.get("arguments") is not None
    }


def as_ran(message: Message, edits: Mapping[str, Any]) -> Message:
    """``message`` with the calls people edited as they ran (a copy)."""
    if not message.get("tool_calls"):
        return dict(message)
    calls = []
    for call in message.get("tool_calls") or ():
        edited = edits.get(str(call.get("id"))) if isinstance(call, dict) else None
        if edited is not None and isinstance(call.get("function"), dict):
            arguments = json.dumps(edited, ensure_ascii=False)
            call = {**call, "function": {**call["function"], "arguments": arguments}}
        calls.append(call)
    return {**message, "tool_calls": calls}


def edited_content(content: str, original: Any) -> str:
    """A call's result, telling the model that a person changed the arguments
    it asked for before approving the call (which ran with the new ones)."""
    try:
        result = json.loads(content)
    except ValueError:
        result = content
    return json.dumps(
        {
            "note": (
                "A person edited the arguments of this call before approving it; it ran "
                "with the arguments shown in the call, not with the ones you asked for."
            ),
            "asked_for": original,
            "result": result,
        },
        ensure_ascii=False,
    )


# What a provider's tool call id may look like for the engine to keep it.
_CALL_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


def call_ids(history: Iterable[Message]) -> set[str]:
    """Every tool call id the history's assistant messages use."""
    return {
        call["id"]
        for message in history
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or ()
    }


def assign_call_ids(message: Message, used: set[str], step_index: int) -> Message:
    """``message`` with tool call ids unique within the run.

    Effect keys, approvals and tool results are keyed by the call id, so an id
    the run already used (some providers number every step's calls from
    ``call_0``), an empty one, or one repeated within the step would make one
    call stand for another. Such an id is replaced by one derived from the step
    and the call's position; any other id is kept as the model sent it. The
    ids chosen are added to ``used``.
    """
    calls = message.get("tool_calls")
    if not calls:
        return message
    assigned = []
    for position, call in enumerate(calls):
        call_id = call.get("id")
        if not isinstance(call_id, str) or not _CALL_ID.fullmatch(call_id) or call_id in used:
            call_id = f"call_{step_index}_{position}"
            suffix = 0
            while call_id in used:
                suffix += 1
                call_id = f"call_{step_index}_{position}_{suffix}"
        used.add(call_id)
        assigned.append(call if call.get("id") == call_id else {**call, "id": call_id})
    return {**message, "tool_calls": assigned}


def tool_message(call_id: str, content: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def error_content(message: str, **extra: Any) -> str:
    return json.dumps({"error": message, **extra}, ensure_ascii=False)


def approval_request(
    approval_id: str,
    call_id: str,
    tool_name: str,
    input: Any,
    about: Mapping[str, Any] | None = None,
) -> Message:
    """The history's record that a call waits for a person. ``about``: what a
    reviewer should see of the tool beyond its name (an MCP tool's server,
    description and annotations: runner/core/mcp/tools.py)."""
    entry: Message = {
        "role": APPROVAL_REQUEST,
        "approval_id": approval_id,
        "tool_call_id": call_id,
        "tool_name": tool_name,
        "input": input,
    }
    if about:
        entry["about"] = dict(about)
    return entry


def approval_response(approval: Approval) -> Message:
    """The history's record of a decided request (an approval or a question):
    approved or not, why, the arguments a person edited, a question's answer,
    and the standing approval that decided it. The next execution reads it
    (:func:`open_step`): it runs an approved call, with the edited arguments
    if any, answers a question with its answer, and tells the model of a
    denial."""
    entry: Message = {
        "role": APPROVAL_RESPONSE,
        "approval_id": approval.approval_id,
        "tool_call_id": approval.tool_call_id,
        "approved": approval.decision in (Decision.APPROVED, Decision.ANSWERED),
        "reason": approval.reason,
    }
    if approval.arguments is not None:
        entry["arguments"] = approval.arguments
    if approval.decision is Decision.ANSWERED:
        entry["answer"] = approval.answer
    if approval.standing_from is not None:
        entry["standing_from"] = approval.standing_from
    return entry


def child_request(call_id: str, tool_name: str, agent: str) -> Message:
    """The history's record that a call started a child run of ``agent``: the
    step waits for it (the child is found by the parent and the call)."""
    return {"role": CHILD_REQUEST, "tool_call_id": call_id, "tool_name": tool_name, "agent": agent}


@dataclass
class OpenStep:
    """The last assistant message and which of its tool calls have results."""

    index: int  # position of the assistant message in the history
    message: Message
    results: set[str] = field(default_factory=set)
    requests: dict[str, Message] = field(default_factory=dict)
    responses: dict[str, Message] = field(default_factory=dict)
    children: dict[str, Message] = field(default_factory=dict)

    @property
    def calls(self) -> list[dict[str, Any]]:
        return list(self.message.get("tool_calls") or [])

    @property
    def pending(self) -> list[dict[str, Any]]:
        """Tool calls without a result yet."""
        return [c for c in self.calls if c["id"] not in self.results]

    @property
    def unanswered(self) -> list[str]:
        """Approval requests nobody has answered."""
        return [call_id for call_id in self.requests if call_id not in self.responses]


def open_step(history: list[Message]) -> OpenStep | None:
    """The last assistant message if some of its tool calls have no result."""
    for position in range(len(history) - 1, -1, -1):
        if history[position].get("role") == "assistant":
            break
    else:
        return None
    step = OpenStep(position, history[position])
    for message in history[position + 1 :]:
        role = message.get("role")
        if role == "tool":
            step.results.add(message.get("tool_call_id", ""))
        elif role == APPROVAL_REQUEST:
            step.requests[message["tool_call_id"]] = message
        elif role == APPROVAL_RESPONSE:
            step.responses[message["tool_call_id"]] = message
        elif role == CHILD_REQUEST:
            step.children[message["tool_call_id"]] = message
    return step if step.pending else None


def continue_thread(history: list[Message]) -> list[Message]:
    """A previous run's history, fit to start a new run on the same thread:
    engine records dropped, and calls that never got a result closed off so the
    conversation stays valid for any provider."""
    # The calls people edited read as they ran: the records that say so go.
    edits = edited_arguments(history)
    kept = [
        as_ran(m, edits) if edits and m.get("role") == "assistant" else dict(m)
        for m in history
        if m.get("role") not in ENGINE_ROLES
    ]
    step = open_step(kept)
    if step is not None:
        position = step.index + 1 + len(step.results)
        closing = [
            tool_message(c["id"], error_content("not run: the previous run ended first"))
            for c in step.pending
        ]
        kept[position:position] = closing
    return kept
