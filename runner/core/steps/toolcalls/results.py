"""What one step's tool calls come to: each call's result, made fit to store,
and what the step asks of people and child runs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from runner.core.steps.builtin_tools import FINAL_RESULT
from runner.core.steps.history import error_content, tool_message
from runner.core.steps.tools import Tool
from store.jsonsafe import NotStorable, clean_json, clean_message, clip
from store.models import Message, NewApproval, NewChild, RunError, StepKind, StepRecord, utcnow

MAX_RESULT_CHARS = 100_000


@dataclass
class CallResult:
    call_id: str
    name: str
    input: Any
    content: str
    output: Any = None
    error: str | None = None
    started_at: Any = field(default_factory=utcnow)
    finished_at: Any = field(default_factory=utcnow)
    final_output: Any = None
    has_final: bool = False

    def message(self) -> Message:
        return tool_message(self.call_id, self.content)

    def record(self, index: int) -> StepRecord:
        return StepRecord(
            index=index,
            kind=StepKind.TOOL,
            started_at=self.started_at,
            finished_at=self.finished_at,
            name=self.name,
            tool_call_id=self.call_id,
            input=self.input,
            output=self.output,
            error=self.error,
        )


@dataclass
class StepCalls:
    results: list[CallResult] = field(default_factory=list)
    # What the step asks people (approvals, questions), with their history entries.
    approvals: list[tuple[NewApproval, Message]] = field(default_factory=list)
    # Calls a standing approval of the run approved: recorded, not asked.
    granted: list[NewApproval] = field(default_factory=list)
    # Child runs the step's calls start (runner/core/children.py), with their
    # history entries; and whether a child started before has not ended.
    children: list[tuple[NewChild, Message]] = field(default_factory=list)
    children_running: bool = False
    # Why the run ends instead of going on (an approved call whose tool is
    # gone): no call of the step runs, nor is the step committed.
    failure: RunError | None = None

    @property
    def waits(self) -> bool:
        """The step waits: for a person, or for children."""
        return bool(self.approvals or self.children or self.children_running)

    @property
    def final(self) -> CallResult | None:
        return next((r for r in self.results if r.has_final), None)


@dataclass(frozen=True)
class Stored:
    """A tool's return value made fit to store: the tool message's content and
    the value recorded in the step row and the effect journal."""

    content: str
    output: Any


def storable(value: Any) -> Stored:
    """Raises :class:`NotStorable` for a value no JSON can hold (a cycle)."""
    jsonable = clean_json(value)
    text = jsonable if isinstance(jsonable, str) else json.dumps(jsonable, ensure_ascii=False)
    content = clip(text, MAX_RESULT_CHARS)
    return Stored(content, jsonable if content is text else content)


def error(
    call_id: str, name: str, input: Any, message: str, started: Any = None, **extra: Any
) -> CallResult:
    message = clean_message(message)
    return CallResult(
        call_id,
        name,
        input,
        error_content(message, **extra),
        error=message,
        started_at=started or utcnow(),
    )


def success(call_id: str, tool: Tool, input: Any, stored: Stored, started: Any) -> CallResult:
    result = CallResult(
        call_id, tool.name, input, stored.content, output=stored.output, started_at=started
    )
    if tool.name == FINAL_RESULT:
        result.has_final = True
        result.final_output = input
    return result


def unstorable(tool: Tool, exc: NotStorable) -> str:
    return f"{tool.name} returned a value that cannot be recorded: {exc}"
