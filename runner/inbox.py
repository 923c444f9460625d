"""The approvals inbox: what waits for a person, with what they need to judge it."""

from __future__ import annotations

from dataclasses import dataclass

from store.base import Store
from store.models import Approval, Message, Run


@dataclass(frozen=True)
class SeenResult:
    """A tool result the run had seen: ``name`` is the tool the model called
    (tool messages do not carry it; the call that asked for them does)."""

    tool_call_id: str
    name: str
    content: object


@dataclass(frozen=True)
class InboxItem:
    approval: Approval
    run: Run
    # The model's message whose tool call asks (None if the history lacks it).
    asking: Message | None
    # The tool results the run had seen before that message.
    seen: list[SeenResult]
    # Every approval of that step (to decide them together).
    step_approvals: list[Approval]


def context(messages: list[Message], tool_call_id: str) -> tuple[Message | None, list[SeenResult]]:
    """The assistant message that made the call ``tool_call_id``, and the tool
    results before it."""
    seen: list[SeenResult] = []
    names: dict[str, str] = {}
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
            if any(c.get("id") == tool_call_id for c in calls):
                return message, seen
            names.update((str(c.get("id")), _called(c)) for c in calls)
        elif role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            seen.append(SeenResult(call_id, names.get(call_id, "tool"), message.get("content")))
    return None, seen


def _called(call: dict[str, object]) -> str:
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) and name else "tool"


def inbox(store: Store, limit: int, agent: str | None) -> list[InboxItem]:
    items: list[InboxItem] = []
    runs: dict[str, tuple[Run, list[Message], list[Approval]]] = {}
    for approval in store.pending_approvals(limit, agent):
        if approval.run_id not in runs:
            checkpoint = store.checkpoint(approval.run_id)
            runs[approval.run_id] = (
                store.get_run(approval.run_id),
                [] if checkpoint is None else checkpoint.messages,
                store.approvals(approval.run_id),
            )
        run, messages, approvals = runs[approval.run_id]
        asking, seen = context(messages, approval.tool_call_id)
        step = [a for a in approvals if a.step_index == approval.step_index]
        items.append(InboxItem(approval, run, asking, seen, step))
    return items
