"""The journal of effects (docs/concepts.md, "Effects"): an effect's start is
journaled before its function runs, its outcome after, so that it runs at most
once. An effect an earlier execution started and never finished is of unknown
outcome: its ``reconcile`` callable may say what became of it; otherwise its
run is flagged for a person."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
from concurrent.futures import Executor
from typing import Any

from runner.core.journal import Journal
from runner.core.observe import Observer, ToolCall, ToolStatus
from runner.core.steps.run_context import RunContext
from runner.core.steps.toolcalls.results import (
    CallResult,
    Stored,
    error,
    storable,
    success,
    unstorable,
)
from runner.core.steps.tools import Reconciled, Tool
from store.jsonsafe import NotStorable, clip
from store.models import Effect, EffectOutcome, EffectStatus, Run, utcnow

log = logging.getLogger(__name__)

OUTCOME_UNKNOWN = (
    "outcome unknown: this effect started in an earlier execution that stopped before "
    "recording its result, and it is not retried automatically; check before repeating it"
)
RECONCILED_NOT_DONE = (
    "not done: this effect started in an earlier execution that stopped before recording "
    "its result, and its reconcile check found it did not take place"
)
# What the model is told of an effect of unknown outcome a person resolved.
RESOLVED = {
    EffectOutcome.DONE: "done: this effect's execution stopped before recording its result, "
    "and a person confirmed that it took place",
    EffectOutcome.NOT_DONE: "not done: this effect's execution stopped before recording its "
    "result, and a person confirmed that it did not take place",
}


class EffectJournal:
    """The effects of one execution's tool calls."""

    def __init__(
        self, journal: Journal, observer: Observer, run: Run, ctx: RunContext, executor: Executor
    ) -> None:
        self.journal = journal
        self.observer = observer
        self.run_ = run
        self.ctx = ctx
        self.executor = executor  # where a sync ``reconcile`` runs

    async def begin(
        self, call_id: str, tool: Tool, input: Any, started: Any, observed: ToolCall
    ) -> CallResult | None:
        """None if the effect may run now (its start is journaled); else its
        result as the journal has it: reused, failed, or of unknown outcome."""
        key = f"{self.ctx.run_id}:{call_id}"
        version = self.run_.version
        begin = await self.journal.begin_effect(
            key, tool.name, input, rerun_started=tool.retry == "at_least_once", version=version
        )
        if begin.execute:
            return None
        effect = begin.effect
        if (
            effect.status is EffectStatus.STARTED
            and effect.version is not None
            and effect.version != version
        ):
            # Started under another version of the agent: what that version's
            # tool did is not this one's to find out or repeat (no reconcile, and
            # it never runs again, whatever today's tool declares): a person resolves it.
            return await self.unknown(
                call_id,
                None,
                input,
                key,
                started,
                tool.name,
                why=f"started in epoch {{epoch}} under version {effect.version} of the agent, "
                f"which died before recording its outcome",
                observed=observed,
            )
        if effect.status is EffectStatus.COMPLETED:
            log.info("effect %s already completed; reusing its recorded result", key)
            return success(call_id, tool, input, storable(effect.output), started)
        if effect.status is EffectStatus.FAILED:
            observed.status = ToolStatus.ERROR  # told when it failed
            return error(call_id, tool.name, input, effect.error or "the effect failed", started)
        if effect.resolved_outcome is not None:
            return error(call_id, tool.name, input, RESOLVED[effect.resolved_outcome], started)
        return await self.unknown(call_id, tool, input, key, started, observed=observed)

    async def done(
        self, call_id: str, tool: Tool, input: Any, key: str, value: Any, started: Any
    ) -> CallResult:
        """The effect ran and returned ``value``: recorded completed, so it
        never runs again; with a note in place of a result no JSON can hold."""
        try:
            stored = storable(value)
        except NotStorable as exc:
            message = unstorable(tool, exc)
            await self.journal.finish_effect(key, output={"unrecorded_result": message})
            return error(call_id, tool.name, input, message, started)
        await self.journal.finish_effect(key, output=stored.output)
        return success(call_id, tool, input, stored, started)

    async def failed(
        self, call_id: str, tool: Tool, input: Any, key: str, message: str, started: Any
    ) -> CallResult:
        await self.journal.finish_effect(key, error=message)
        return error(call_id, tool.name, input, message, started)

    async def withdraw(self, key: str) -> None:
        """Its call was refused or never sent: its start is taken back."""
        await self.journal.withdraw_effect(key)

    async def from_journal(
        self, call_id: str, name: str, effect: Effect, tools: dict[str, Tool]
    ) -> CallResult:
        """A call an earlier execution journaled as an effect, whose tool is
        gone or no longer an effect in today's tools: what the journal says,
        as the effect it was recorded as; it is never run (again)."""
        started, input = utcnow(), effect.input
        log.info(
            "run %s: the call %s of %s was journaled as an effect (%s); it is resolved from "
            "the journal, since today's tools %s",
            self.ctx.run_id,
            call_id,
            name,
            effect.status.value,
            "no longer have it" if name not in tools else "no longer make it an effect",
        )
        if effect.status is EffectStatus.COMPLETED:
            stored = storable(effect.output)
            return CallResult(
                call_id, name, input, stored.content, output=stored.output, started_at=started
            )
        if effect.status is EffectStatus.FAILED:
            return error(call_id, name, input, effect.error or "the effect failed", started)
        if effect.resolved_outcome is not None:
            return error(call_id, name, input, RESOLVED[effect.resolved_outcome], started)
        return await self.unknown(call_id, tools.get(name), input, effect.key, started, name)

    async def unknown(
        self,
        call_id: str,
        tool: Tool | None,
        input: Any,
        key: str,
        started: Any,
        name: str | None = None,
        told: str = OUTCOME_UNKNOWN,
        why: str = "started in epoch {epoch}, which died before recording its outcome",
        observed: ToolCall | None = None,
    ) -> CallResult:
        """An effect started by an execution that died (or whose call got no
        answer: ``told`` the model, ``why`` in the log): its ``reconcile``
        callable says what became of it, or it is of unknown outcome, and its
        run is flagged for a person. ``tool``: None when today's tools no
        longer have it (``name``), so that nothing can reconcile it."""
        name = name or (tool.name if tool is not None else "?")
        found = await self._reconcile(tool, key) if tool is not None else None
        if found is not None and tool is not None and found.took_place:
            try:
                stored: Stored = storable(found.result)
            except NotStorable as exc:
                message = unstorable(tool, exc)
                await self.journal.finish_effect(key, output={"unrecorded_result": message})
                return error(call_id, tool.name, input, message, started)
            await self.journal.finish_effect(key, output=stored.output)
            log.info("run %s: effect %s reconciled: it took place", self.ctx.run_id, key)
            return success(call_id, tool, input, stored, started)
        if found is not None and tool is not None:
            await self.journal.finish_effect(key, error=RECONCILED_NOT_DONE)
            log.info("run %s: effect %s reconciled: it did not take place", self.ctx.run_id, key)
            return error(call_id, tool.name, input, RECONCILED_NOT_DONE, started)
        marked = await self.journal.mark_unknown(key)
        if observed is not None:
            observed.status = ToolStatus.UNKNOWN
        if marked.unresolved:
            log.error(
                "run %s: effect %s(%s), idempotency key %s, %s: it may or may not have "
                "happened; the run needs a person to resolve it (runwright resolve, or the "
                "console)",
                self.ctx.run_id,
                name,
                clip(json.dumps(input, default=str), 300),
                key,
                why.format(epoch=marked.epoch),
            )
            self.observer.effect_unknown(self.run_, name)
        return error(call_id, name, input, told, started)

    async def _reconcile(self, tool: Tool, key: str) -> Reconciled | None:
        """What the effect's ``reconcile`` callable says; None if it has none,
        cannot tell, or fails."""
        if tool.reconcile is None:
            return None
        try:
            if inspect.iscoroutinefunction(tool.reconcile):
                answer = await tool.reconcile(key)
            else:
                loop = asyncio.get_running_loop()
                answer = await loop.run_in_executor(
                    self.executor, contextvars.copy_context().run, tool.reconcile, key
                )
        except Exception as exc:
            log.warning(
                "run %s: reconcile of effect %s failed (%s: %s); its outcome stays unknown",
                self.ctx.run_id,
                key,
                type(exc).__name__,
                clip(str(exc), 200),
            )
            return None
        if answer is not None and not isinstance(answer, Reconciled):
            log.warning(
                "run %s: reconcile of %s answered %r, not done(...), not_done() or None; its "
                "outcome stays unknown",
                self.ctx.run_id,
                key,
                clip(repr(answer), 200),
            )
            return None
        return answer
