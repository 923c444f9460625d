"""The approvals inbox: what waits for a person, with what they need to judge it."""

from __future__ import annotations

from dataclasses import dataclass

from store.base import Store
from store.models import Approval, Message, Run


@dataclass(frozen=True)
class InboxItem:
    approval: Approval
    run: Run
    # The model's message whose tool call asks (None if the history lacks it).
    asking: Message | None
    # The tool results the run had seen before that message.
    seen: list[Message]
    # Every approval of that step (to decide them together).
    step_approvals: list[Approval]


def context(messages: list[Message], tool_call_id: str) -> tuple[Message | None, list[Message]]:
    """The assistant message that made the call ``tool_call_id``, and the tool
    results before it."""
    seen: list[Message] = []
    for message in messages:
        calls = message.get("tool_calls") or []
        if message.get("role") == "assistant" and any(
            isinstance(c, dict) and c.get("id") == tool_call_id for c in calls
        ):
            return message, seen
        if message.get("role") == "tool":
            seen.append(message)
    return None, seen


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
