"""One step's tool calls, each to its concern: the journal of effects for a
call an earlier execution journaled, the gate for what a person decides, the
child runs, then the invocation of the calls that may run, side by side."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pydantic

from runner.core.agent import Agent
from runner.core.children import ChildTool
from runner.core.errors import MCPUnavailable, ToolInputError
from runner.core.journal import Journal
from runner.core.steps.builtin_tools import ASK_HUMAN
from runner.core.steps.history import OpenStep
from runner.core.steps.run_context import RunContext
from runner.core.steps.services import Services
from runner.core.steps.toolcalls.delegation import Delegation
from runner.core.steps.toolcalls.effects import EffectJournal
from runner.core.steps.toolcalls.gate import Gate
from runner.core.steps.toolcalls.invocation import Invocation
from runner.core.steps.toolcalls.results import CallResult, StepCalls, error
from runner.core.steps.tools import Tool
from store.jsonsafe import clean_json
from store.models import Effect, Run


class CallRunner:
    """Runs the pending tool calls of one execution's steps."""

    def __init__(
        self,
        journal: Journal,
        services: Services,
        agent: Agent,
        run: Run,
        ctx: RunContext,
        tools: dict[str, Tool],
    ) -> None:
        self.tools = tools
        self.gate = Gate(journal, services, agent, run)
        self.effects = EffectJournal(journal, services.observer, run, ctx, services.tool_executor)
        self.children = Delegation(journal, services, agent, run)
        self.invocation = Invocation(self.effects, services, agent, run, ctx)

    async def run(
        self, k: int, step: OpenStep, journal: Mapping[str, Effect] | None = None
    ) -> StepCalls:
        """Step ``k``'s pending calls. ``journal``: the effects an earlier
        execution journaled for them, by call id (read for a step it left
        open): such a call is resolved from the journal whenever the tool
        it names is gone or no longer an effect, never from today's tools."""
        out = StepCalls()
        self.gate.begin(k)
        runnable: list[tuple[str, Tool, pydantic.BaseModel, Any]] = []
        delegated: list[tuple[dict[str, Any], ChildTool, Any]] = []
        for call in step.pending:
            call_id, name = call["id"], call["function"]["name"]
            raw_args = call["function"].get("arguments")
            tool = self.tools.get(name)
            journaled = (journal or {}).get(call_id)
            if journaled is not None and (tool is None or not tool.effect):
                out.results.append(
                    await self.effects.from_journal(call_id, name, journaled, self.tools)
                )
                continue
            response = step.responses.get(call_id)
            if response is not None and name != ASK_HUMAN:
                # A person decided the call: whatever its tool is now, the
                # decision is applied, before the tool and the model's
                # arguments are checked (their tool may have changed since).
                decided = await self.gate.decided(call_id, name, tool, raw_args, response, out)
                if out.failure is not None:
                    return out
                if decided is None:
                    continue
                tool, args, input = decided
            else:
                if tool is None:
                    known = ", ".join(sorted(self.tools)) or "none"
                    message = f"unknown tool {name!r}; available: {known}"
                    out.results.append(error(call_id, name, raw_args, message))
                    continue
                try:
                    args = tool.parse(raw_args)
                except ToolInputError as exc:
                    out.results.append(error(call_id, name, raw_args, str(exc)))
                    continue
                input = clean_json(args.model_dump(mode="json"))
                passed = await self.gate.check(step, call_id, tool, args, input, out)
                if passed is None:
                    continue
                args, input = passed
            if isinstance(tool, ChildTool):
                delegated.append((call, tool, input))
                continue
            runnable.append((call_id, tool, args, input))
        if delegated:
            await self.children.delegate(k, step, delegated, out)
        if runnable:
            if len(runnable) == 1:
                # Most steps make one call: awaited in this task, without the
                # task and the loop's turns that gathering it would add.
                done = [await self.invocation.call(k, *runnable[0])]
            else:
                done = await asyncio.gather(*(self.invocation.call(k, *item) for item in runnable))
            halted = [result for result in done if isinstance(result, MCPUnavailable)]
            if halted:
                # The other calls have finished (an effect's outcome is
                # journaled); the step fails, under the run's retry policy.
                raise halted[0]
            out.results.extend(result for result in done if isinstance(result, CallResult))
        self.gate.edit(out.results)
        order = {c["id"]: i for i, c in enumerate(step.calls)}
        out.results.sort(key=lambda r: order.get(r.call_id, 0))
        return out
