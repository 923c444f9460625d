"""The approvals inbox: what waits for a person, with what they need to judge it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.core.agent import Registry
from runner.core.approvals.changes import ToolChange, tool_changes
from runner.core.steps.history import APPROVAL_REQUEST
from store.models import Approval, Message, Run
from store.postgres import PostgresStore


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
    # What the history says of the tool beyond its name (an MCP tool's server,
    # description and annotations: runner/core/steps/history.approval_request).
    about: dict[str, Any] | None = None
    # A child run's parent chain (runner/core/children.py): its parent first, its
    # top-level run last; empty for a run that is no child.
    parents: list[Run] = field(default_factory=list)
    # How the call's tool changed since it was requested (None: it did not,
    # or cannot be told): runner/core/approvals/changes.py.
    change: ToolChange | None = None


def context_of(
    messages: list[Message], tool_call_id: str
) -> tuple[Message | None, list[SeenResult]]:
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


def about_of(messages: list[Message], approval_id: str) -> dict[str, Any] | None:
    """What the history's request of ``approval_id`` says of its tool."""
    for message in messages:
        if message.get("role") == APPROVAL_REQUEST and message.get("approval_id") == approval_id:
            about = message.get("about")
            return about if isinstance(about, dict) else None
    return None


def _called(call: dict[str, object]) -> str:
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) and name else "tool"


def inbox(
    store: PostgresStore, registry: Registry, limit: int, agent: str | None
) -> list[InboxItem]:
    pending = store.pending_approvals(limit, agent)
    # One read for the runs of every item, however many there are.
    contexts = store.runs_for_review([a.run_id for a in pending])
    changed = tool_changes(
        store,
        registry,
        [(contexts[a.run_id].run, a) for a in pending if a.run_id in contexts],
    )
    items: list[InboxItem] = []
    for approval in pending:
        context = contexts.get(approval.run_id)
        if context is None:
            continue  # pruned since: nothing left to judge it by
        asking, seen = context_of(context.messages, approval.tool_call_id)
        step = [a for a in context.approvals if a.step_index == approval.step_index]
        about = about_of(context.messages, approval.approval_id)
        parents = [] if context.run.parent_id is None else store.ancestors(context.run.id)
        change = changed.get(approval.approval_id)
        items.append(InboxItem(approval, context.run, asking, seen, step, about, parents, change))
    return items
