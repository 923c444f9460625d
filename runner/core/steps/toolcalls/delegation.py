"""Child tools' calls (``Agent.as_tool``, runner/core/children.py): each starts a
child run once, and its result is the child's when the child ends."""

from __future__ import annotations

from typing import Any

from runner.core.agent import Agent
from runner.core.children import ChildTool, child_error, shared_bounds
from runner.core.journal import Journal
from runner.core.observe import ToolCall
from runner.core.steps.history import OpenStep, child_request
from runner.core.steps.services import Services
from runner.core.steps.toolcalls.results import StepCalls, error, storable, success
from store.models import Run, RunStatus, utcnow


class Delegation:
    """The child runs of one execution's tool calls."""

    def __init__(self, journal: Journal, services: Services, agent: Agent, run: Run) -> None:
        self.journal = journal
        self.observer = services.observer
        self.agent = agent
        self.run_ = run
        # How deep below its top-level run a child of this run may be.
        self.max_child_depth = (
            services.settings.max_child_depth
            if agent.max_child_depth is None
            else agent.max_child_depth
        )

    async def delegate(
        self,
        k: int,
        step: OpenStep,
        calls: list[tuple[dict[str, Any], ChildTool, Any]],
        out: StepCalls,
    ) -> None:
        """Child tools' calls: the result of a child that ended; a child
        still running keeps the step waiting; a call with no child yet (or
        one whose start the history does not record: a crash came between)
        starts it, once (runner/core/children.py)."""
        # Each call's latest child (a retry of the parent may have started another).
        started = {child.parent_call_id: child for child in await self.journal.children()}
        earlier = await self.journal.attempts()
        retried_at = earlier[-1].retried_at if earlier else None
        for call, tool, input in calls:
            call_id = call["id"]
            child = started.get(call_id)
            if (
                child is not None
                and child.status in (RunStatus.FAILED, RunStatus.CANCELLED)
                and retried_at is not None
                and child.created_at < retried_at
            ):
                # The parent was retried after this child failed: the retry
                # starts it again (one that completed keeps its result).
                child = None
            if child is not None and child.status.ended:
                failed = child_error(child)
                if failed is not None:
                    out.results.append(error(call_id, tool.name, input, failed))
                else:
                    stored = storable(child.output)
                    out.results.append(success(call_id, tool, input, stored, utcnow()))
            elif child is not None and call_id in step.children:
                out.children_running = True
            elif child is None and self.run_.depth + 1 > self.max_child_depth:
                out.results.append(error(call_id, tool.name, input, self._too_deep(tool)))
            else:
                entry = child_request(call_id, tool.name, tool.agent)
                budget = self.agent.budget
                bounds = shared_bounds(self.run_, budget.max_tokens, budget.max_cost_usd)
                carrier = self._child_trace(k, call_id, tool, input)
                attempt = len(earlier) + 1
                child_run = tool.new_child(self.run_, call_id, input, bounds, carrier, attempt)
                out.children.append((child_run, entry))

    def _too_deep(self, tool: ChildTool) -> str:
        return (
            f"{tool.name} started no child run: this run is {self.run_.depth} level(s) below "
            f"its top-level run, and its tree may have at most {self.max_child_depth} levels "
            f"of child runs (max_child_depth); finish the task without delegating it"
        )

    def _child_trace(
        self, k: int, call_id: str, tool: ChildTool, input: Any
    ) -> dict[str, str] | None:
        """The trace context a child's executions join: the call's own
        ``execute_tool`` span (a short one: the call only starts the child)."""
        carrier: dict[str, str] = {}
        observed = ToolCall(tool.name, call_id, k, effect=False, arguments=input)
        with (
            self.observer.tool_call(self.run_, observed),
            self.observer.starting(tool.agent, carrier),
        ):
            pass
        return carrier or None
