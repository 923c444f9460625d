"""Agents that delegate: an agent as another agent's tool (``Agent.as_tool``).

A call of such a tool starts a child run of the agent, with the call's
arguments as its trigger payload, and the parent's step waits for it the way
it waits for an approval: the parent is ``waiting``, holding no worker and no
lease, and the child's end queues it again once nothing it waits for is
open (store/pg/base.py, ``RESUME_IF_DONE``; ``tick()`` resumes a parent whose
wake-up was lost). The child's result is the tool result the parent's model
sees: its structured output, or its final text; a child that failed or was
cancelled is a tool error with its code and message.

A child's identity is the parent and the call (its trigger id, unique per
agent), so a parent that asks again (taken over after a crash, a redelivered
task, a duplicate resume) finds the child it started instead of starting
another. Several child calls of one step run side by side, on any workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from runner.core.errors import InvalidInput, RunwrightError
from runner.core.steps.tools import FUNCTION_NAME, Tool
from store.models import BudgetBound, NewChild, Run, RunStatus, TriggerEnvelope

# The trigger's source for a child run; its trigger is the parent's tool.
CHILD_SOURCE = "parent"
# The trigger key that names a child's top-level run (``keys.parent_run``, its parent).
ROOT_KEY = "root_run"


class Task(pydantic.BaseModel):
    """The default arguments of an agent called as a tool."""

    task: str = pydantic.Field(description="What the agent is asked to do, in full.")


class ChildTool(Tool):
    """A tool whose call starts a child run of ``agent`` (made by ``Agent.as_tool``)."""

    def __init__(
        self,
        agent: str,
        *,
        name: str,
        description: str,
        params: type[pydantic.BaseModel],
        detached: bool,
    ) -> None:
        super().__init__(_not_called, name=name, description=description, params=params)
        self.agent = agent
        self.detached = detached

    def new_child(
        self,
        parent: Run,
        call_id: str,
        arguments: Any,
        bounds: tuple[BudgetBound, ...] = (),
        trace_context: dict[str, str] | None = None,
        attempt: int = 1,
    ) -> NewChild:
        """The child run this call starts: its trigger id is the parent's and
        the call's; ``bounds``, the budgets it shares (:func:`shared_bounds`)."""
        envelope = TriggerEnvelope(
            id=child_trigger_id(parent.id, call_id, attempt),
            source=CHILD_SOURCE,
            trigger=self.name,
            payload=arguments,
            keys={"parent_run": parent.id, ROOT_KEY: parent.root_id},
        )
        return NewChild(
            agent=self.agent,
            trigger=envelope,
            call_id=call_id,
            detached=self.detached,
            bounds=bounds,
            trace_context=trace_context,
        )


def shared_bounds(
    parent: Run, max_tokens: int | None, max_cost_usd: float | None
) -> tuple[BudgetBound, ...]:
    """The budgets a child of ``parent`` shares: the parent's own token and
    cost budget (its agent's), and those the parent shares with its own
    ancestors. A child's step budget is its own, never shared."""
    own: tuple[BudgetBound, ...] = ()
    if max_tokens is not None or max_cost_usd is not None:
        own = (BudgetBound(parent.id, max_tokens, max_cost_usd),)
    return parent.budget_bounds + own


def _not_called(**_: Any) -> Any:
    raise RunwrightError("a child tool's call starts a run; the tool itself is never invoked")


def child_trigger_id(parent_id: str, call_id: str, attempt: int = 1) -> str:
    """A child's identity: its parent's, its call's, and (after the parent
    was retried) the parent's attempt that started it again."""
    base = f"child:{parent_id}:{call_id}"
    return base if attempt == 1 else f"{base}:{attempt}"


def child_tool(
    agent: str,
    instructions: str,
    input: type[pydantic.BaseModel] | None,
    name: str | None = None,
    description: str | None = None,
    detached: bool = False,
) -> ChildTool:
    """The agent named ``agent`` as a tool of another agent (``Agent.as_tool``)."""
    tool_name = agent if name is None else name
    if not isinstance(tool_name, str) or not FUNCTION_NAME.fullmatch(tool_name):
        raise InvalidInput(
            f"agent {agent!r} as a tool: {tool_name!r} is not a function name "
            "(letters, digits, '_' and '-', at most 64 characters); pass name="
        )
    if description is None:
        first = instructions.strip().split("\n", 1)[0].strip()
        description = f"Ask the {agent} agent. " + (first or "It answers with its result.")
    if not isinstance(detached, bool):
        raise InvalidInput(f"agent {agent!r} as a tool: detached must be True or False")
    return ChildTool(
        agent,
        name=tool_name,
        description=description,
        params=input if input is not None else Task,
        detached=detached,
    )


def child_error(child: Run) -> str | None:
    """Why an ended child has no result for its parent's model; None if it
    completed (its output is the result: structured, or its final text)."""
    if child.status is RunStatus.COMPLETED:
        return None
    if child.status is RunStatus.CANCELLED:
        return f"the {child.agent} agent's run {child.id} was cancelled"
    error = child.error
    said = f"{error.code}: {error.message}" if error is not None else "no error recorded"
    return f"the {child.agent} agent's run {child.id} failed ({said})"


def child_event_title(data: Mapping[str, Any]) -> str:
    """A ``child`` event of a parent's feed (a child's start or end), in words."""
    if data.get("action") == "started":
        return f"child {data.get('run_id')} started for call {data.get('call_id')}"
    code = f" ({data['error_code']})" if data.get("error_code") else ""
    return f"child {data.get('run_id')} {data.get('status')}{code}"
