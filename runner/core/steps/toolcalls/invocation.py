"""The invocation of one tool call: its function (on a thread of the tool pool
if it is sync, or over its MCP server's session: runner/core/mcp/), raced against
the run's abort, tried again as its retry policy allows, observed.

On cancel or timeout a call still running a second later is abandoned (at
once on a lost lease; a drain allows most of the drain window): an async tool
is cancelled, a sync tool's thread is left to finish and its result is
discarded. An abandoned call gets no result, so its step stays open; an
abandoned effect's journal row stays ``started``, which is what "outcome
unknown" means to the next execution.

A tool declared with ``retries`` is tried again, after a backoff, when it
raises an error its policy deems transient; only the last error reaches the
model, with the number of attempts. An abort during the backoff (or just as an
attempt fails) abandons the call: a later execution runs it afresh. A retried
effect keeps its journal row ``started`` across the attempts and records one
outcome at the end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pydantic

from runner.core.agent import Agent
from runner.core.errors import MCPUnavailable, OutcomeUnknown, RunwrightError
from runner.core.observe import ToolCall, ToolStatus
from runner.core.steps.run_context import AbortReason, RunContext
from runner.core.steps.services import Services
from runner.core.steps.toolcalls.effects import EffectJournal
from runner.core.steps.toolcalls.results import CallResult, error, storable, success, unstorable
from runner.core.steps.tools import Tool
from store.jsonsafe import NotStorable, clean_message, clip
from store.models import Run, utcnow

log = logging.getLogger(__name__)

# How long a running tool call may go on after a cancel or a timeout before it
# is abandoned (a drain allows more: most of its window).
ABORT_GRACE_SECONDS = 1.0


class Abandoned(RunwrightError):
    """The run was aborted while the tool call was still running. Raised and
    caught inside :class:`Invocation`; it never leaves it."""


class Failed(RunwrightError):
    """The tool raised, and is not tried again. Raised and caught inside
    :class:`Invocation`; it never leaves it."""

    def __init__(self, tool: Tool, error: Exception, attempts: int) -> None:
        super().__init__(_raised(tool, error, attempts))
        self.error = error
        self.attempts = attempts


def _raised(tool: Tool, exc: BaseException, attempts: int = 1) -> str:
    message = f"{tool.name} raised {type(exc).__name__}: {exc}"
    return message if attempts == 1 else f"{message} (after {attempts} attempts)"


class Invocation:
    """Runs the tool calls of one execution that passed the gate."""

    def __init__(
        self, effects: EffectJournal, services: Services, agent: Agent, run: Run, ctx: RunContext
    ) -> None:
        self.effects = effects
        self.observer = services.observer
        self.executor = services.tool_executor
        self.drain_grace_seconds = max(0.0, services.settings.drain_seconds - 2)
        self.agent = agent
        self.run_ = run
        self.ctx = ctx

    async def call(
        self, k: int, call_id: str, tool: Tool, args: pydantic.BaseModel, input: Any
    ) -> CallResult | MCPUnavailable | None:
        """Step ``k``'s call ``call_id``: its result, or None if it was
        abandoned; or, when its MCP server cannot be reached or refuses the
        credentials, that error: not the call's failure, which the model could
        act on, but the step's (runner/core/engine/execution.py).

        The attempts are raced here, not in a helper, so that a tool runs a
        few frames below the step loop (tests/unit/test_journal_port.py)."""
        observed = ToolCall(
            tool.name, call_id, k, effect=tool.effect, arguments=input, mcp_server=tool.mcp_server
        )
        started = utcnow()
        key = f"{self.ctx.run_id}:{call_id}" if tool.effect else None
        signal = self.ctx.signal
        with self.observer.tool_call(self.run_, observed):
            try:
                if key is not None:
                    journaled = await self.effects.begin(call_id, tool, input, started, observed)
                    if journaled is not None:
                        return self._told(observed, journaled)
                attempt = 0
                first_failure: float | None = None
                while True:
                    attempt += 1
                    observed.invocations = attempt
                    task = asyncio.ensure_future(
                        tool.invoke(args, self.ctx, idempotency_key=key, executor=self.executor)
                    )
                    try:
                        await asyncio.wait(
                            {task, signal.fired()}, return_when=asyncio.FIRST_COMPLETED
                        )
                        if not task.done():
                            # A call about to finish is worth recording rather than
                            # turning into an unknown outcome: give it a short grace.
                            await asyncio.wait({task}, timeout=self._grace_left())
                    except BaseException:
                        task.cancel()
                        raise
                    if not task.done():
                        task.cancel()  # an async tool; a sync tool's thread runs on, ignored
                        raise Abandoned
                    try:
                        value = task.result()
                        break
                    except MCPUnavailable:
                        raise
                    except Exception as exc:
                        now = time.monotonic()
                        first_failure = now if first_failure is None else first_failure
                        delay = self._retry_delay(tool, exc, attempt, now - first_failure)
                        if delay is None:
                            raise Failed(tool, exc, attempt) from exc
                        if signal.aborted:
                            raise Abandoned from exc  # no retry now, but a later execution's
                        self._retrying(tool, exc, attempt, delay)
                        # An abort ends the wait and abandons the call: nothing
                        # is recorded, so a later execution runs it afresh.
                        await asyncio.wait({signal.fired()}, timeout=delay)
                        if signal.aborted:
                            raise Abandoned from exc
                if key is not None:
                    done = await self.effects.done(call_id, tool, input, key, value, started)
                    return self._told(observed, done)
                try:
                    stored = storable(value)
                except NotStorable as exc:
                    message = unstorable(tool, exc)
                    return self._told(observed, error(call_id, tool.name, input, message, started))
                return self._told(observed, success(call_id, tool, input, stored, started))
            except MCPUnavailable as exc:
                # Refused or never sent (an effect's call that went out unanswered
                # is OutcomeUnknown): its start is taken back, and the step fails.
                self._not_ok(observed)
                if key is not None:
                    await self.effects.withdraw(key)
                return exc
            except Abandoned:
                # An effect's journal keeps `started`: the outcome is unknown.
                what = f"effect {key}" if key is not None else f"tool {tool.name}"
                log.warning("run %s: %s abandoned by an abort", self.ctx.run_id, what)
                timed_out = signal.reason is AbortReason.TIMEOUT
                observed.status = ToolStatus.TIMEOUT if timed_out else ToolStatus.CANCELLED
                return None
            except Failed as failed:
                try:
                    told = await self._failed(call_id, tool, input, key, failed, started, observed)
                except BaseException:
                    self._not_ok(observed)
                    raise
                return self._told(observed, told)
            except BaseException:
                self._not_ok(observed)  # the execution's own end: not an ok call
                raise

    @staticmethod
    def _not_ok(observed: ToolCall) -> None:
        if observed.status is ToolStatus.OK:
            observed.status = ToolStatus.ERROR

    @staticmethod
    def _told(observed: ToolCall, result: CallResult) -> CallResult:
        observed.error = result.error
        observed.result = result.content
        if result.error is not None and observed.status is ToolStatus.OK:
            observed.status = ToolStatus.ERROR  # its value could not be recorded
        return result

    async def _failed(
        self,
        call_id: str,
        tool: Tool,
        input: Any,
        key: str | None,
        failed: Failed,
        started: Any,
        observed: ToolCall,
    ) -> CallResult:
        if key is not None and isinstance(failed.error, OutcomeUnknown):
            lost = clean_message(failed.error.message)
            return await self.effects.unknown(
                call_id,
                tool,
                input,
                key,
                started,
                told=f"outcome unknown: {lost}; it is not retried automatically; "
                "check before repeating it",
                why=f"got no answer ({lost})",
                observed=observed,
            )
        # One WARNING says so (the model is told by the call's result), its
        # traceback at DEBUG.
        observed.status = ToolStatus.ERROR
        cause = failed.error
        log.warning(
            "run %s: agent %s: tool %s failed: %s: %s%s",
            self.ctx.run_id,
            self.agent.name,
            tool.name,
            type(cause).__name__,
            clip(clean_message(str(cause)), 500),
            "" if failed.attempts == 1 else f" (after {failed.attempts} attempts)",
        )
        log.debug(
            "run %s: tool %s failed", self.ctx.run_id, tool.name, exc_info=failed.__cause__ or cause
        )
        if key is None:
            return error(call_id, tool.name, input, failed.message, started)
        message = clean_message(failed.message)
        return await self.effects.failed(call_id, tool, input, key, message, started)

    @staticmethod
    def _retry_delay(tool: Tool, exc: Exception, attempt: int, since_first: float) -> float | None:
        """Seconds to wait before trying again; None: not again."""
        policy = tool.retries
        if policy is None or not tool.retryable(exc):
            return None
        return policy.next_delay(attempt, since_first)

    def _retrying(self, tool: Tool, exc: Exception, attempt: int, delay: float) -> None:
        log.warning(
            "run %s: tool %s failed on attempt %d (%s: %s); retrying in %.2f s",
            self.ctx.run_id,
            tool.name,
            attempt,
            type(exc).__name__,
            clip(str(exc), 200),
            delay,
        )

    def _grace_left(self) -> float:
        signal = self.ctx.signal
        if signal.reason is AbortReason.LEASE_LOST:
            return 0.0  # nothing of it could be written anyway
        grace = ABORT_GRACE_SECONDS
        if signal.reason is AbortReason.DRAIN:
            grace = max(grace, self.drain_grace_seconds)
        aborted_at = signal.aborted_at if signal.aborted_at is not None else time.monotonic()
        return max(0.0, aborted_at + grace - time.monotonic())
