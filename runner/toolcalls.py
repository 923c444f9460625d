"""Running one step's tool calls: classification, approvals, the effect journal.

Model output is untrusted: an unknown tool, arguments that are not JSON or do
not fit the schema, and a tool that raises all become tool error results the
model sees. None of them crashes the run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pydantic

from runner import faults
from runner.agent import Agent
from runner.context import RunContext
from runner.history import OpenStep, approval_request, error_content, tool_message
from runner.tools import Tool, ToolInputError, result_text, to_jsonable
from store.base import EffectBegin
from store.models import (
    Effect,
    EffectStatus,
    Fence,
    Message,
    NewApproval,
    StepKind,
    StepRecord,
    utcnow,
)

log = logging.getLogger(__name__)

MAX_RESULT_CHARS = 100_000
FINAL_RESULT = "final_result"
OUTCOME_UNKNOWN = (
    "outcome unknown: this effect started in an earlier execution that stopped before "
    "recording its result, and it is not retried automatically; check before repeating it"
)


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
    approvals: list[tuple[NewApproval, Message]] = field(default_factory=list)

    @property
    def final(self) -> CallResult | None:
        return next((r for r in self.results if r.has_final), None)


def _clip(content: str) -> str:
    if len(content) <= MAX_RESULT_CHARS:
        return content
    return (
        content[:MAX_RESULT_CHARS] + f"... [truncated {len(content) - MAX_RESULT_CHARS} characters]"
    )


def _error(
    call_id: str, name: str, input: Any, message: str, started: Any = None, **extra: Any
) -> CallResult:
    return CallResult(
        call_id,
        name,
        input,
        error_content(message, **extra),
        error=message,
        started_at=started or utcnow(),
    )


# Writes go through the execution, which checks the lease and retries on outages.
Write = Callable[..., Awaitable[Any]]


class CallRunner:
    """Runs the pending tool calls of one step."""

    def __init__(
        self,
        *,
        agent: Agent,
        tools: dict[str, Tool],
        ctx: RunContext,
        fence: Fence,
        write: Write,
        store_begin: Callable[..., EffectBegin],
        store_finish: Callable[..., Effect],
        token_id: str,
        notify_delay: timedelta | None,
        executor: Any,
    ) -> None:
        self.agent = agent
        self.tools = tools
        self.ctx = ctx
        self.fence = fence
        self.write = write
        self.store_begin = store_begin
        self.store_finish = store_finish
        self.token_id = token_id
        self.notify_delay = notify_delay
        self.executor = executor

    async def run(self, step: OpenStep) -> StepCalls:
        out = StepCalls()
        runnable: list[tuple[dict[str, Any], Tool, pydantic.BaseModel]] = []
        for call in step.pending:
            call_id, name = call["id"], call["function"]["name"]
            raw_args = call["function"].get("arguments")
            tool = self.tools.get(name)
            if tool is None:
                known = ", ".join(sorted(self.tools)) or "none"
                out.results.append(
                    _error(call_id, name, raw_args, f"unknown tool {name!r}; available: {known}")
                )
                continue
            try:
                args = tool.parse(raw_args)
            except ToolInputError as exc:
                out.results.append(_error(call_id, name, raw_args, str(exc)))
                continue
            input = args.model_dump(mode="json")
            response = step.responses.get(call_id)
            if response is not None:
                if not response.get("approved"):
                    reason = response.get("reason") or "no reason given"
                    out.results.append(
                        _error(call_id, name, input, "denied by a human reviewer", reason=reason)
                    )
                    continue
            elif call_id not in step.requests:
                policy = self.agent.approval_policy(name, input)
                if policy is not None:
                    now = utcnow()
                    approval = NewApproval(
                        tool_call_id=call_id,
                        tool_name=name,
                        input=input,
                        expires_at=now + timedelta(seconds=policy.expires_seconds),
                        on_expire=policy.on_expire,
                        token_id=self.token_id,
                        next_notify_at=now + self.notify_delay if self.notify_delay else None,
                    )
                    entry = approval_request(approval.approval_id, call_id, name, input)
                    out.approvals.append((approval, entry))
                    continue
            runnable.append((call, tool, args))
        if runnable:
            out.results.extend(
                await asyncio.gather(*(self._run_one(c, t, a) for c, t, a in runnable))
            )
        order = {c["id"]: i for i, c in enumerate(step.calls)}
        out.results.sort(key=lambda r: order.get(r.call_id, 0))
        return out

    async def _run_one(
        self, call: dict[str, Any], tool: Tool, args: pydantic.BaseModel
    ) -> CallResult:
        call_id = call["id"]
        input = args.model_dump(mode="json")
        started = utcnow()
        if tool.effect:
            return await self._run_effect(call_id, tool, args, input, started)
        try:
            value = await tool.invoke(args, self.ctx, executor=self.executor)
        except Exception as exc:
            return _error(
                call_id,
                tool.name,
                input,
                f"{tool.name} raised {type(exc).__name__}: {exc}",
                started,
            )
        return self._success(call_id, tool, args, input, value, started)

    def _success(
        self,
        call_id: str,
        tool: Tool,
        args: pydantic.BaseModel,
        input: Any,
        value: Any,
        started: Any,
    ) -> CallResult:
        content = _clip(result_text(value))
        output = to_jsonable(value) if len(content) < MAX_RESULT_CHARS else content
        result = CallResult(call_id, tool.name, input, content, output=output, started_at=started)
        if tool.name == FINAL_RESULT:
            result.has_final = True
            result.final_output = input
        return result

    async def _run_effect(
        self, call_id: str, tool: Tool, args: pydantic.BaseModel, input: Any, started: Any
    ) -> CallResult:
        key = f"{self.ctx.run_id}:{call_id}"
        begin: EffectBegin = await self.write(
            self.store_begin, key, tool.name, input, rerun_started=tool.retry == "at_least_once"
        )
        faults.hit(faults.AFTER_EFFECT_START)
        if not begin.execute:
            effect = begin.effect
            if effect.status is EffectStatus.COMPLETED:
                log.info("effect %s already completed; reusing its recorded result", key)
                content = _clip(result_text(effect.output))
                return CallResult(
                    call_id, tool.name, input, content, output=effect.output, started_at=started
                )
            if effect.status is EffectStatus.FAILED:
                return _error(
                    call_id, tool.name, input, effect.error or "the effect failed", started
                )
            return _error(call_id, tool.name, input, OUTCOME_UNKNOWN, started)
        try:
            value = await tool.invoke(args, self.ctx, idempotency_key=key, executor=self.executor)
        except Exception as exc:
            message = f"{tool.name} raised {type(exc).__name__}: {exc}"
            await self.write(self.store_finish, key, error=message)
            faults.hit(faults.AFTER_EFFECT_COMPLETE)
            return _error(call_id, tool.name, input, message, started)
        await self.write(self.store_finish, key, output=to_jsonable(value))
        faults.hit(faults.AFTER_EFFECT_COMPLETE)
        return self._success(call_id, tool, args, input, value, started)
