"""Running one step's tool calls: classification, approvals, the effect journal.

Model output is untrusted: an unknown tool, arguments that are not JSON or do
not fit the schema, and a tool that raises all become tool error results the
model sees. Tool output is untrusted too: it is made storable (see
``store.jsonsafe``) or, if it cannot be, becomes a tool error. None of them
crashes the run.

Every tool call races the run's abort signal. On cancel or timeout a call
still running a second later is abandoned (at once on a lost lease; a drain
allows most of the drain window): an async tool is cancelled, a sync tool's
thread is left to finish and its result is discarded. An abandoned call gets no result,
so its step stays open; an abandoned effect's journal row stays ``started``,
which is what "outcome unknown" means to the next execution.

A tool declared with ``retries`` is tried again, after a backoff, when it
raises an error its policy deems transient; only the last error reaches the
model, with the number of attempts. An abort during the backoff (or just as an
attempt fails) abandons the call: a later execution runs it afresh. A retried
effect keeps its journal row ``started`` across the attempts and records one
outcome at the end.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import pydantic

from runner.agent import Agent
from runner.approvals.expiry import expired, expiry_message
from runner.children import ChildTool, child_error, shared_bounds
from runner.clock import SYSTEM, Clock
from runner.errors import (
    ApprovalNotFound,
    MCPUnavailable,
    OutcomeUnknown,
    RunwrightError,
    ToolInputError,
)
from runner.journal import Journal
from runner.observe import ToolCall, ToolStatus
from runner.steps.builtin_tools import ASK_HUMAN, FINAL_RESULT, AskHumanTool
from runner.steps.history import (
    OpenStep,
    approval_request,
    child_request,
    edited_content,
    error_content,
    tool_message,
)
from runner.steps.run_context import AbortReason, AbortSignal, RunContext
from runner.steps.tools import Reconciled, Tool
from store.jsonsafe import NotStorable, clean_json, clean_message, clip
from store.models import (
    Effect,
    EffectOutcome,
    EffectStatus,
    Message,
    NewApproval,
    NewChild,
    OnDeny,
    RequestKind,
    Run,
    RunStatus,
    StandingApproval,
    StepKind,
    StepRecord,
    utcnow,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_RESULT_CHARS = 100_000
# How long a running tool call may go on after a cancel or a timeout before it
# is abandoned (a drain allows more: most of its window).
ABORT_GRACE_SECONDS = 1.0
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
    # Child runs the step's calls start (runner/children.py), with their
    # history entries; and whether a child started before has not settled.
    children: list[tuple[NewChild, Message]] = field(default_factory=list)
    children_running: bool = False

    @property
    def waits(self) -> bool:
        """The step waits: for a person, or for children."""
        return bool(self.approvals or self.children or self.children_running)

    @property
    def final(self) -> CallResult | None:
        return next((r for r in self.results if r.has_final), None)


class Abandoned(RunwrightError):
    """The run was aborted while the tool call was still running. Raised and
    caught inside :class:`CallRunner`; it never leaves it."""


class Failed(RunwrightError):
    """The tool raised, and is not tried again. Raised and caught inside
    :class:`CallRunner`; it never leaves it."""

    def __init__(self, tool: Tool, error: Exception, attempts: int) -> None:
        super().__init__(_raised(tool, error, attempts))
        self.error = error
        self.attempts = attempts


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


def _error(
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


def _status(observed: ToolCall | None, status: ToolStatus) -> None:
    if observed is not None:
        observed.status = status


def _raised(tool: Tool, exc: BaseException, attempts: int = 1) -> str:
    message = f"{tool.name} raised {type(exc).__name__}: {exc}"
    return message if attempts == 1 else f"{message} (after {attempts} attempts)"


class CallRunner:
    """Runs the pending tool calls of one step."""

    def __init__(
        self,
        *,
        agent: Agent,
        tools: dict[str, Tool],
        ctx: RunContext,
        journal: Journal,
        token_id: str,
        notify_delay: timedelta | None,
        executor: Any,
        drain_grace_seconds: float = 0.0,
        approval_expires_seconds: float = 86400.0,
        observe: Callable[[ToolCall], AbstractContextManager[None]] | None = None,
        step: int = 0,
        clock: Clock = SYSTEM,
        on_unknown: Callable[[str], None] = lambda tool: None,
        run: Run | None = None,
        starting: Callable[[str, dict[str, str]], AbstractContextManager[None]] | None = None,
        max_child_depth: int = 16,
    ) -> None:
        self.clock = clock
        # How deep below its top-level run a child of this run may be.
        self.max_child_depth = max_child_depth
        self._grants: dict[str, StandingApproval] | None = None
        # The run the calls are of, and a read of its children (for child
        # tools); ``starting`` puts a child's trace under its call's span.
        self.run_ = run
        self.starting = starting
        # Told the tool's name when an effect is found of unknown outcome.
        self.on_unknown = on_unknown
        self.agent = agent
        self.tools = tools
        self.ctx = ctx
        self.journal = journal
        self.token_id = token_id
        self.notify_delay = notify_delay
        self.executor = executor
        self.drain_grace_seconds = drain_grace_seconds
        self.approval_expires_seconds = approval_expires_seconds
        self.observe = observe
        self.step = step

    async def run(self, step: OpenStep, journal: Mapping[str, Effect] | None = None) -> StepCalls:
        """The step's pending calls. ``journal``: the effects an earlier
        execution journaled for them, by call id (read for a step it left
        open): such a call is resolved from the journal whenever the tool
        it names is gone or no longer an effect, never from today's tools."""
        out = StepCalls()
        runnable: list[tuple[dict[str, Any], Tool, pydantic.BaseModel, Any]] = []
        delegated: list[tuple[dict[str, Any], ChildTool, Any]] = []
        # The model's arguments of the calls a person edited, by call id.
        edited: dict[str, Any] = {}
        for call in step.pending:
            call_id, name = call["id"], call["function"]["name"]
            raw_args = call["function"].get("arguments")
            tool = self.tools.get(name)
            journaled = (journal or {}).get(call_id)
            if journaled is not None and (tool is None or not tool.effect):
                out.results.append(await self._from_journal(call_id, name, journaled))
                continue
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
            input = clean_json(args.model_dump(mode="json"))
            response = step.responses.get(call_id)
            if isinstance(tool, AskHumanTool):
                # A question: the person's answer is its result.
                if response is not None:
                    out.results.append(await self._answered(call_id, name, input, response))
                elif call_id not in step.requests:
                    out.approvals.append(self._question(call_id, tool, input))
                continue
            if response is not None:
                if not response.get("approved"):
                    out.results.append(await self._refused(call_id, name, input, response))
                    self._denied(call_id, tool, input)
                    continue
                if response.get("arguments") is not None:
                    # Approved with the arguments a person edited (checked
                    # against the tool's schema when they decided; again here).
                    try:
                        args = tool.parse(response["arguments"])
                    except ToolInputError as exc:
                        message = f"the arguments a person approved do not fit {name}: {exc}"
                        out.results.append(_error(call_id, name, input, message))
                        continue
                    edited[call_id] = input
                    input = clean_json(args.model_dump(mode="json"))
            elif call_id not in step.requests:
                policy = self.agent.approval_policy(name, input)
                if policy is not None:
                    grant = (await self._standing()).get(name)
                    approval = self._request(
                        call_id,
                        tool,
                        input,
                        policy.expires_seconds(self.approval_expires_seconds),
                        policy.on_expire,
                        on_deny=OnDeny(self.agent.denial(policy)),
                        granted=grant,
                    )
                    if grant is None:
                        entry = approval_request(
                            approval.approval_id, call_id, name, input, tool.about()
                        )
                        out.approvals.append((approval, entry))
                        continue
                    out.granted.append(approval)  # approved for the rest of the run
            if isinstance(tool, ChildTool):
                delegated.append((call, tool, input))
                continue
            runnable.append((call, tool, args, input))
        if delegated:
            await self._delegate(step, delegated, out)
        if runnable:
            done = await asyncio.gather(*(self._unless_halted(*item) for item in runnable))
            halted = [result for result in done if isinstance(result, MCPUnavailable)]
            if halted:
                # The other calls have finished (an effect's outcome is
                # journaled); the step fails, under the run's retry policy.
                raise halted[0]
            out.results.extend(result for result in done if isinstance(result, CallResult))
        for result in out.results:
            if result.call_id in edited:
                result.content = edited_content(result.content, edited[result.call_id])
        order = {c["id"]: i for i, c in enumerate(step.calls)}
        out.results.sort(key=lambda r: order.get(r.call_id, 0))
        return out

    def _request(
        self,
        call_id: str,
        tool: Tool,
        input: Any,
        expires_seconds: float,
        on_expire: str,
        *,
        kind: RequestKind = RequestKind.APPROVAL,
        schema: Any = None,
        on_deny: OnDeny = OnDeny.CONTINUE,
        granted: StandingApproval | None = None,
    ) -> NewApproval:
        """A request for a person about ``call_id``: an approval (``schema``,
        what edited arguments must fit: the tool's own), or a question."""
        now = self.clock.now()
        notify = self.notify_delay is not None and granted is None
        return NewApproval(
            tool_call_id=call_id,
            tool_name=tool.name,
            input=input,
            expires_at=now + timedelta(seconds=expires_seconds),
            on_expire=on_expire,
            token_id=self.token_id,
            next_notify_at=now + self.notify_delay if notify and self.notify_delay else None,
            kind=kind,
            schema=schema if schema is not None else tool.schema()["function"]["parameters"],
            on_deny=on_deny,
            granted=granted,
        )

    def _question(
        self, call_id: str, tool: AskHumanTool, input: Any
    ) -> tuple[NewApproval, Message]:
        """The model's question to a person: a request of kind ``input``."""
        spec = tool.spec
        question = self._request(
            call_id,
            tool,
            input,
            spec.expires_seconds(self.approval_expires_seconds),
            spec.on_expire,
            kind=RequestKind.INPUT,
            schema=spec.answer_schema(),
        )
        return question, approval_request(question.approval_id, call_id, tool.name, input)

    async def _answered(self, call_id: str, name: str, input: Any, response: Message) -> CallResult:
        """A question's result: the person's answer (text as it is, anything
        else as JSON), or why there is none (it expired)."""
        if not response.get("approved"):
            return await self._refused(call_id, name, input, response)
        answer = response.get("answer")
        content = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        return CallResult(call_id, name, input, content, output={"answer": answer})

    async def _standing(self) -> dict[str, StandingApproval]:
        """The run's standing approvals by tool, read once per step."""
        if self._grants is None:
            found = await self.journal.standing_approvals()
            self._grants = {grant.tool_name: grant for grant in found}
        return self._grants

    async def _delegate(
        self, step: OpenStep, calls: list[tuple[dict[str, Any], ChildTool, Any]], out: StepCalls
    ) -> None:
        """Child tools' calls: the result of a child that settled; a child
        still running keeps the step waiting; a call with no child yet (or
        one whose start the history does not record: a crash came between)
        starts it, once (runner/children.py)."""
        assert self.run_ is not None
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
            if child is not None and child.status.settled:
                error = child_error(child)
                if error is not None:
                    out.results.append(_error(call_id, tool.name, input, error))
                else:
                    stored = storable(child.output)
                    out.results.append(self._success(call_id, tool, input, stored, utcnow()))
            elif child is not None and call_id in step.children:
                out.children_running = True
            elif child is None and self.run_.depth + 1 > self.max_child_depth:
                out.results.append(_error(call_id, tool.name, input, self._too_deep(tool)))
            else:
                entry = child_request(call_id, tool.name, tool.agent)
                budget = self.agent.budget
                bounds = shared_bounds(self.run_, budget.max_tokens, budget.max_cost_usd)
                carrier = self._child_trace(call_id, tool, input)
                attempt = len(earlier) + 1
                child_run = tool.new_child(self.run_, call_id, input, bounds, carrier, attempt)
                out.children.append((child_run, entry))

    def _too_deep(self, tool: ChildTool) -> str:
        assert self.run_ is not None
        return (
            f"{tool.name} started no child run: this run is {self.run_.depth} level(s) below "
            f"its top-level run, and its tree may have at most {self.max_child_depth} levels "
            f"of child runs (max_child_depth); finish the task without delegating it"
        )

    def _child_trace(self, call_id: str, tool: ChildTool, input: Any) -> dict[str, str] | None:
        """The trace context a child's executions join: the call's own
        ``execute_tool`` span (a short one: the call only starts the child)."""
        if self.observe is None or self.starting is None:
            return None
        carrier: dict[str, str] = {}
        observed = ToolCall(tool.name, call_id, self.step, effect=False, arguments=input)
        with self.observe(observed), self.starting(tool.agent, carrier):
            pass
        return carrier or None

    async def _refused(self, call_id: str, name: str, input: Any, response: Message) -> CallResult:
        """A call not approved: denied by a person with their reason, or left
        to expire, told apart by the approval's record (runner/approvals/expiry.py)."""
        approval_id = response.get("approval_id")
        if isinstance(approval_id, str):
            try:
                approval = await self.journal.approval(approval_id)
            except ApprovalNotFound:
                pass  # purged with its run (a fork keeps the response): read as given
            else:
                if expired(approval):
                    return _error(call_id, name, input, expiry_message(approval))
        reason = response.get("reason") or "no reason given"
        if name == ASK_HUMAN:
            return _error(call_id, name, input, "not answered", reason=reason)
        # A person's refusal, marked as one, with their reason: the model adjusts.
        return _error(call_id, name, input, "denied by a human reviewer", reason=reason)

    async def _race(self, work: Coroutine[Any, Any, T]) -> T:
        """``work``'s result, unless the run is aborted and the call outlives
        the abort's grace (:class:`Abandoned`)."""
        signal = self.ctx.signal
        task = asyncio.ensure_future(work)
        racers: set[asyncio.Future[Any]] = {task, signal.fired()}
        try:
            await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                # A call about to finish is worth recording rather than
                # turning into an unknown outcome: give it a short grace.
                await asyncio.wait({task}, timeout=self._grace_left(signal))
        except BaseException:
            task.cancel()
            raise
        if task.done():
            return task.result()
        task.cancel()  # cancels an async tool; a sync tool's thread runs on, ignored
        raise Abandoned

    async def _from_journal(self, call_id: str, name: str, effect: Effect) -> CallResult:
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
            "no longer have it" if name not in self.tools else "no longer make it an effect",
        )
        if effect.status is EffectStatus.COMPLETED:
            stored = storable(effect.output)
            return CallResult(
                call_id, name, input, stored.content, output=stored.output, started_at=started
            )
        if effect.status is EffectStatus.FAILED:
            return _error(call_id, name, input, effect.error or "the effect failed", started)
        if effect.resolved_outcome is not None:
            return _error(call_id, name, input, RESOLVED[effect.resolved_outcome], started)
        return await self._unknown(call_id, self.tools.get(name), input, effect.key, started, name)

    async def _unknown(
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
                stored = storable(found.result)
            except NotStorable as exc:
                message = self._unstorable(tool, exc)
                await self.journal.finish_effect(key, output={"unrecorded_result": message})
                return _error(call_id, tool.name, input, message, started)
            await self.journal.finish_effect(key, output=stored.output)
            log.info("run %s: effect %s reconciled: it took place", self.ctx.run_id, key)
            return self._success(call_id, tool, input, stored, started)
        if found is not None and tool is not None:
            await self.journal.finish_effect(key, error=RECONCILED_NOT_DONE)
            log.info("run %s: effect %s reconciled: it did not take place", self.ctx.run_id, key)
            return _error(call_id, tool.name, input, RECONCILED_NOT_DONE, started)
        marked = await self.journal.mark_unknown(key)
        _status(observed, ToolStatus.UNKNOWN)
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
            self.on_unknown(name)
        return _error(call_id, name, input, told, started)

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

    def _failed(self, tool: Tool, failed: Failed, observed: ToolCall | None) -> None:
        """A tool raised, and is not tried again: one WARNING says so (the
        model is told by the call's result), its traceback at DEBUG."""
        _status(observed, ToolStatus.ERROR)
        error = failed.error
        log.warning(
            "run %s: agent %s: tool %s failed: %s: %s%s",
            self.ctx.run_id,
            self.agent.name,
            tool.name,
            type(error).__name__,
            clip(clean_message(str(error)), 500),
            "" if failed.attempts == 1 else f" (after {failed.attempts} attempts)",
        )
        log.debug(
            "run %s: tool %s failed", self.ctx.run_id, tool.name, exc_info=failed.__cause__ or error
        )

    def _abandoned(self, observed: ToolCall | None) -> None:
        timed_out = self.ctx.signal.reason is AbortReason.TIMEOUT
        _status(observed, ToolStatus.TIMEOUT if timed_out else ToolStatus.CANCELLED)

    def _denied(self, call_id: str, tool: Tool, input: Any) -> None:
        """Told as a call of its own: a person refused it, so it never ran."""
        if self.observe is None:
            return
        refused = ToolCall(
            tool.name,
            call_id,
            self.step,
            effect=tool.effect,
            arguments=input,
            mcp_server=tool.mcp_server,
            status=ToolStatus.DENIED,
        )
        with self.observe(refused):
            pass

    async def _invoke(
        self,
        tool: Tool,
        args: pydantic.BaseModel,
        key: str | None = None,
        observed: ToolCall | None = None,
    ) -> Any:
        """The tool's return value, trying again as its retry policy allows.
        Raises :class:`Abandoned`, or :class:`Failed` with the last error."""
        attempt = 0
        first_failure: float | None = None
        while True:
            attempt += 1
            if observed is not None:
                observed.invocations = attempt
            try:
                return await self._race(
                    tool.invoke(args, self.ctx, idempotency_key=key, executor=self.executor)
                )
            except (Abandoned, MCPUnavailable):
                raise
            except Exception as exc:
                now = time.monotonic()
                first_failure = now if first_failure is None else first_failure
                policy = tool.retries
                delay = None
                if policy is not None and tool.retryable(exc):
                    delay = policy.next_delay(attempt, now - first_failure)
                if delay is None:
                    raise Failed(tool, exc, attempt) from exc
                if self.ctx.signal.aborted:
                    raise Abandoned from exc  # no retry now, but a later execution's
                log.warning(
                    "run %s: tool %s failed on attempt %d (%s: %s); retrying in %.2f s",
                    self.ctx.run_id,
                    tool.name,
                    attempt,
                    type(exc).__name__,
                    clip(str(exc), 200),
                    delay,
                )
                await self._backoff(delay)

    async def _backoff(self, seconds: float) -> None:
        """Wait before a retry. An abort ends the wait and abandons the call:
        nothing is recorded, so a later execution runs it afresh."""
        signal = self.ctx.signal
        if not signal.aborted:
            await asyncio.wait({signal.fired()}, timeout=seconds)
        if signal.aborted:
            raise Abandoned

    def _grace_left(self, signal: AbortSignal) -> float:
        if signal.reason is AbortReason.LEASE_LOST:
            return 0.0  # nothing of it could be written anyway
        grace = ABORT_GRACE_SECONDS
        if signal.reason is AbortReason.DRAIN:
            grace = max(grace, self.drain_grace_seconds)
        aborted_at = signal.aborted_at if signal.aborted_at is not None else time.monotonic()
        return max(0.0, aborted_at + grace - time.monotonic())

    async def _unless_halted(
        self, call: dict[str, Any], tool: Tool, args: pydantic.BaseModel, input: Any
    ) -> CallResult | MCPUnavailable | None:
        """The call's result; or, when its server cannot be reached or refuses
        the credentials, that error: not the call's failure, which the model
        could act on, but the step's (runner/engine/execution.py)."""
        try:
            return await self._observed(call, tool, args, input)
        except MCPUnavailable as exc:
            return exc

    async def _observed(
        self, call: dict[str, Any], tool: Tool, args: pydantic.BaseModel, input: Any
    ) -> CallResult | None:
        if self.observe is None:
            return await self._run_one(call, tool, args, input, None)
        observed = ToolCall(
            tool.name,
            call["id"],
            self.step,
            effect=tool.effect,
            arguments=input,
            mcp_server=tool.mcp_server,
        )
        with self.observe(observed):
            try:
                result = await self._run_one(call, tool, args, input, observed)
            except BaseException:
                # An MCP server gone (the step fails, under the run's retry
                # policy), or the execution's own end: not an ok call.
                observed.status = (
                    ToolStatus.ERROR if observed.status is ToolStatus.OK else observed.status
                )
                raise
            if result is not None:
                observed.error = result.error
                observed.result = result.content
                if result.error is not None and observed.status is ToolStatus.OK:
                    observed.status = ToolStatus.ERROR  # its value could not be recorded
            return result

    async def _run_one(
        self,
        call: dict[str, Any],
        tool: Tool,
        args: pydantic.BaseModel,
        input: Any,
        observed: ToolCall | None,
    ) -> CallResult | None:
        """The call's result, or None if it was abandoned."""
        call_id = call["id"]
        started = utcnow()
        if tool.effect:
            return await self._run_effect(call_id, tool, args, input, started, observed)
        try:
            value = await self._invoke(tool, args, None, observed)
        except Abandoned:
            log.warning("run %s: tool %s abandoned by an abort", self.ctx.run_id, tool.name)
            self._abandoned(observed)
            return None
        except Failed as failed:
            self._failed(tool, failed, observed)
            return _error(call_id, tool.name, input, failed.message, started)
        try:
            stored = storable(value)
        except NotStorable as exc:
            return _error(call_id, tool.name, input, self._unstorable(tool, exc), started)
        return self._success(call_id, tool, input, stored, started)

    @staticmethod
    def _unstorable(tool: Tool, exc: NotStorable) -> str:
        return f"{tool.name} returned a value that cannot be recorded: {exc}"

    def _success(
        self, call_id: str, tool: Tool, input: Any, stored: Stored, started: Any
    ) -> CallResult:
        result = CallResult(
            call_id, tool.name, input, stored.content, output=stored.output, started_at=started
        )
        if tool.name == FINAL_RESULT:
            result.has_final = True
            result.final_output = input
        return result

    async def _run_effect(
        self,
        call_id: str,
        tool: Tool,
        args: pydantic.BaseModel,
        input: Any,
        started: Any,
        observed: ToolCall | None,
    ) -> CallResult | None:
        key = f"{self.ctx.run_id}:{call_id}"
        begin = await self.journal.begin_effect(
            key, tool.name, input, rerun_started=tool.retry == "at_least_once"
        )
        if not begin.execute:
            effect = begin.effect
            if effect.status is EffectStatus.COMPLETED:
                log.info("effect %s already completed; reusing its recorded result", key)
                return self._success(call_id, tool, input, storable(effect.output), started)
            if effect.status is EffectStatus.FAILED:
                _status(observed, ToolStatus.ERROR)  # told when it failed
                return _error(
                    call_id, tool.name, input, effect.error or "the effect failed", started
                )
            if effect.resolved_outcome is not None:
                said = RESOLVED[effect.resolved_outcome]
                return _error(call_id, tool.name, input, said, started)
            return await self._unknown(call_id, tool, input, key, started, observed=observed)
        try:
            value = await self._invoke(tool, args, key, observed)
        except MCPUnavailable:
            # Refused or never sent (an effect's call that went out unanswered
            # is OutcomeUnknown): its start is taken back, and the step fails.
            await self.journal.withdraw_effect(key)
            raise
        except Abandoned:
            # The journal keeps `started`: the outcome is unknown.
            log.warning("run %s: effect %s abandoned by an abort", self.ctx.run_id, key)
            self._abandoned(observed)
            return None
        except Failed as failed:
            if isinstance(failed.error, OutcomeUnknown):
                lost = clean_message(failed.error.message)
                return await self._unknown(
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
            self._failed(tool, failed, observed)
            message = clean_message(failed.message)
            await self.journal.finish_effect(key, error=message)
            return _error(call_id, tool.name, input, message, started)
        try:
            stored = storable(value)
        except NotStorable as exc:
            # The effect ran: the journal records it completed, so it never
            # runs again, with a note in place of the result it cannot hold.
            message = self._unstorable(tool, exc)
            await self.journal.finish_effect(key, output={"unrecorded_result": message})
            return _error(call_id, tool.name, input, message, started)
        await self.journal.finish_effect(key, output=stored.output)
        return self._success(call_id, tool, input, stored, started)
