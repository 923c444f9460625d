"""The step loop of one execution: from the start point, step after step, until
the run ends or pauses (docs/concepts.md, "Step" and "Checkpoint").

A step is two writes, both through the execution's journal (runner/core/journal.py).
The journal write (``record_model_step``) records the model's reply before any
tool runs, so that a run taken over never pays for the call twice and keeps its
tool call ids; the step's commit (``commit_step``) records the tool results with
the checkpoint, the state and any approvals. Fault points sit right after each
(``after_journal``, ``after_commit``: runner/core/faults.py wraps the journal)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from runner.core import model
from runner.core.agent import Agent
from runner.core.errors import ContextExceeded, InvalidInput, ModelError, RunwrightError
from runner.core.journal import Journal, Start
from runner.core.limits.limiter import Grant
from runner.core.observe import FirstSeen, ModelCall
from runner.core.steps.builtin_tools import (
    AskHumanTool,
    StateHolder,
    initial_state,
    output_tool,
    state_tools,
)
from runner.core.steps.context_window import (
    SummaryDue,
    Window,
    summary_record,
)
from runner.core.steps.history import (
    HISTORY_SUMMARY,
    OpenStep,
    Request,
    assign_call_ids,
    call_ids,
    edited_arguments,
    open_step,
    trigger_message,
)
from runner.core.steps.run_context import AbortSignal, RunContext
from runner.core.steps.services import Services
from runner.core.steps.toolcalls import CallRunner, StepCalls
from runner.core.steps.tools import Tool
from runner.core.threads import thread_history
from store.models import (
    USAGE_ESTIMATED,
    AdmissionVerdict,
    Effect,
    Ended,
    Message,
    Outcome,
    Run,
    RunError,
    RunStatus,
    Step,
    StepCommit,
    StepKind,
    StepRecord,
    utcnow,
)

T = TypeVar("T")
log = logging.getLogger(__name__)


class Host(Protocol):
    """What the step loop uses of the execution that runs it (an
    :class:`~runner.core.engine.execution.Execution`): its journal, its abort signal
    and its end. A protocol, so that the loop does not import the execution."""

    journal: Journal
    signal: AbortSignal
    # The limits' grants it holds, which its heartbeat keeps held (a worker
    # that dies lets them go after three lease TTLs).
    held: list[Grant]

    async def end(self, outcome: Outcome) -> Ended: ...

    async def end_aborted(self, agent: Agent) -> Ended: ...


# The server tools left out for a name the agent's own tool has, each told
# once per listing (its digest) in this process.
_told_left_out = FirstSeen()


def _left_out(agent: str, tool: Tool) -> None:
    if not _told_left_out.first((agent, tool.name, str(getattr(tool, "digest", "")))):
        return
    log.warning(
        "agent %r: MCP server %r lists a tool that would be named %r, as one of the agent's own "
        "tools is: the server's is left out, the agent's own is offered",
        agent,
        tool.mcp_server,
        tool.name,
    )


def _first(override: T | None, default: T) -> T:
    return default if override is None else override


@dataclass(frozen=True)
class Ask:
    """One model call's request: the step's own, or a summary of the history."""

    messages: list[Message]
    tools: list[dict[str, Any]]
    settings: Mapping[str, Any]
    stream: bool = False


def _summary_from(output: Any) -> Message:
    """The history's record of the summary a summary step journaled."""
    try:
        content = output["message"]["content"]
        covers = output[HISTORY_SUMMARY]["covers"]
    except (KeyError, TypeError):
        raise InvalidInput("a summary step's journal holds no summary") from None
    if not isinstance(content, str) or isinstance(covers, bool) or not isinstance(covers, int):
        raise InvalidInput("a summary step's journal holds no summary")
    return summary_record(content, covers)


OUTPUT_REMINDER = "Give your final answer by calling the final_result tool."
# How long a child's model call waits at first, and at most, while the other
# calls of its tree in flight hold what is left of a budget they share.
ADMISSION_PAUSE = 0.05
ADMISSION_MAX_PAUSE = 1.0


class StepLoop:
    def __init__(
        self, execution: Host, services: Services, agent: Agent, ctx: RunContext, start: Start
    ) -> None:
        self.x = execution
        self.journal = execution.journal
        self.deps = services
        self.agent = agent
        self.run_ = run = start.run
        self.ctx = ctx
        self.messages: list[Message] = []
        self.saved = 0  # how many of self.messages the stored checkpoint holds
        self.index = 0  # the stored checkpoint's step index
        self.finish_reason: str | None = None
        self.usage = run.usage
        self.cost_usd = run.cost_usd
        self.state = StateHolder(None)
        self.tools: dict[str, Tool] = {}
        # What the next model step records of the MCP tools it offers (None: nothing new).
        self._mcp_record: dict[str, Any] | None = None
        self.call_ids: set[str] = set()  # every tool call id of the history
        self.edits: dict[str, Any] = {}  # arguments people edited, by call id
        self._start = start
        self._journaled: Step | None = None
        self._built: Request | None = None  # the model calls' messages, built as the history grows
        # The same under the agent's History (runner/core/steps/context_window.py).
        self._window: Window | None = None
        # The run's failed attempts at its current model step; progress clears them.
        self.retry = run.retry

    async def run(self) -> Ended:
        await self._load()
        # An MCP server that cannot be reached raises MCPUnavailable: the
        # execution retries the run under its policy (runner/core/engine/execution.py).
        self.tools = self._assemble(await self._server_tools())
        if self.agent.history is not None:
            self._window = await asyncio.to_thread(self._make_window)
        self.calls = CallRunner(
            self.journal, self.deps, self.agent, self.run_, self.ctx, self.tools
        )
        while True:
            step = open_step(self.messages)
            if step is not None:
                # A step whose tool calls were not all answered: after an
                # approval pause, or a crash between its journal write and its commit.
                k = self.index if step.index < self.saved else self.index + 1
                if step.unanswered:
                    return await self.x.end(Outcome(RunStatus.WAITING))  # re-pause
            else:
                if self.x.signal.aborted:
                    return await self.x.end_aborted(self.agent)
                k = self.index + 1
                over = self._over_budget(k) or await self._over_shared_budget()
                if over is not None:
                    return await self.x.end(
                        Outcome(RunStatus.FAILED, error=RunError("budget_exceeded", over))
                    )
                if self.x.signal.aborted:  # while the shared budgets held its call
                    return await self.x.end_aborted(self.agent)
            with self.deps.observer.step(self.run_, k):
                ended = await self._step(k, step)
            if ended is not None:
                return ended
            if self.x.signal.aborted:
                return await self.x.end_aborted(self.agent)

    async def _step(self, k: int, step: OpenStep | None) -> Ended | None:
        """Step k: its model call (unless it is open already), its tool calls, its commit."""
        # A step an earlier execution left open (or whose reply it journaled)
        # may have effects journaled: its calls are resolved by the journal.
        resumed = step is not None or self._journaled is not None
        if step is None and self._window is not None:
            try:
                summarized = await self._summarize(k, self._window)
            except ContextExceeded as exc:
                error = RunError(ContextExceeded.code, exc.message)
                return await self.x.end(Outcome(RunStatus.FAILED, error=error))
            if summarized is None:
                return await self.x.end_aborted(self.agent)
            if summarized:
                return await self._commit(k, False, StepCalls())
        if step is None:
            assistant = await self._assistant(k)
            if assistant is None:
                return await self.x.end_aborted(self.agent)
            self.messages.append(assistant)
            step = open_step(self.messages)
        calls = StepCalls()
        if step is not None:
            journal = await self._journal(step) if resumed else None
            calls = await self.calls.run(k, step, journal)
            if calls.failure is not None:
                return await self.x.end(Outcome(RunStatus.FAILED, error=calls.failure))
        return await self._commit(k, step is None, calls)

    # ---------------------------------------------------------- start point

    async def _load(self) -> None:
        run = self.run_
        checkpoint = self._start.checkpoint
        self._journaled = self._start.journaled
        state = run.state
        if checkpoint is not None:
            self.messages = checkpoint.messages
            self.saved = len(checkpoint.messages)
            self.index = checkpoint.step_index
            self.finish_reason = checkpoint.finish_reason
        else:
            history: list[Message] = []
            if run.thread:
                previous = await self.journal.thread_start(run.thread)
                if previous is not None:
                    history = thread_history(previous, run.trigger)
                    state = previous.state if state is None else state
            self.messages = [*history, trigger_message(run.trigger)]
        if self.agent.state is not None:
            self.state = StateHolder(initial_state(self.agent.state) if state is None else state)
        self.call_ids = call_ids(self.messages)
        # People's edits come with decisions, between executions: read once.
        self.edits = edited_arguments(self.messages)

    async def _server_tools(self) -> list[Tool]:
        """The tools of the agent's MCP servers, listed over this process's
        sessions (runner/core/mcp/: imported only for an agent that has servers),
        and what this execution's first model step records of them: nothing
        if the run's model was last offered the same (runner/core/mcp/listing.py)."""
        if not self.agent.mcp:
            return []
        from runner.core.mcp.listing import announce, listing, record
        from runner.core.mcp.tools import server_tools

        found: list[Tool] = []
        for server in self.agent.mcp:
            found += await server_tools(server)
        last = await self.journal.mcp_listing()
        self._mcp_record = record(listing(found), last)
        announce(self.run_.id, self._mcp_record)
        return found

    def _assemble(self, server_tools: list[Tool]) -> dict[str, Tool]:
        tools: list[Tool] = []
        if self.agent.state is not None:
            tools += state_tools(self.agent.state, self.state)
        if self.agent.output is not None:
            tools.append(output_tool(self.agent.output))
        if self.agent.asks_human is not None:
            tools.append(AskHumanTool(self.agent.asks_human))
        tools += self.agent.build_tools(self.ctx)
        by_name: dict[str, Tool] = {}
        for item in tools:
            if item.name in by_name:
                raise InvalidInput(f"agent {self.agent.name!r} has two tools named {item.name!r}")
            by_name[item.name] = item
        for item in server_tools:
            if item.name in by_name:
                # The agent's own tool wins: a server's listing cannot take a
                # name the agent's code gave (docs/mcp.md, "Names").
                _left_out(self.agent.name, item)
                continue
            by_name[item.name] = item
        return by_name

    def _over_budget(self, k: int) -> str | None:
        budget = self.agent.budget
        max_steps = budget.max_steps + self.run_.extra_steps
        if k > max_steps:
            return f"the run used all {max_steps} steps of its budget"
        if budget.max_tokens is not None and self.usage.total >= budget.max_tokens:
            return f"the run used {self.usage.total} tokens; its budget is {budget.max_tokens}"
        if budget.max_cost_usd is not None and self.cost_usd >= budget.max_cost_usd:
            return f"the run cost ${self.cost_usd:.6f}; its budget is ${budget.max_cost_usd:.6f}"
        return None

    async def _over_shared_budget(self) -> str | None:
        """Why a child run stops: an ancestor's token or cost budget, shared
        with its descendants, is spent (its totals count theirs); None if
        none is, or the run is no child (runner/core/children.py).

        The step's model call reserves the tokens it is expected to take from
        those budgets before it goes out (``store.rules.admit``); its journal
        write gives them back and adds what it took. While the other calls of
        the tree in flight hold what is left, the call waits for them, so
        that children side by side overshoot a budget they share by at most
        one call (docs/children.md). An abort ends the wait: the loop then
        ends the run as aborted."""
        if not self.run_.budget_bounds:
            return None
        tokens = 0 if self._journaled is not None else await self._expected_tokens()
        pause = ADMISSION_PAUSE
        while True:
            now = self.deps.clock.for_store()
            admission = await self.journal.admit(self.run_, tokens, now=now)
            if admission.verdict is AdmissionVerdict.ADMITTED:
                return None
            bound, use = admission.bound, admission.use
            assert bound is not None and use is not None
            if admission.verdict is AdmissionVerdict.SPENT:
                whose = f"the {use.agent} run {bound.run_id} it works for"
                if bound.max_tokens is not None and use.tokens >= bound.max_tokens:
                    return (
                        f"{whose} used {use.tokens} tokens with its children; "
                        f"the budget they share is {bound.max_tokens}"
                    )
                return (
                    f"{whose} cost ${use.cost_usd:.6f} with its children; "
                    f"the budget they share is ${bound.max_cost_usd or 0:.6f}"
                )
            if await self._aborted_within(pause):
                return None
            pause = min(pause * 2, ADMISSION_MAX_PAUSE)

    async def _expected_tokens(self, ask: Ask | None = None) -> int:
        """What the step's model call (or ``ask``) is expected to take (runner/core/model.py)."""
        if ask is None:
            try:
                ask = self._ask()
            except ContextExceeded:  # the step fails on it before any call
                return model.output_cap(self.agent.model_settings)
        return await model.expected_tokens(
            self.run_.model or self.agent.model, ask.messages, ask.tools, ask.settings
        )

    def _ask(self) -> Ask:
        """The step's model call: the history's request, the tools, the agent's settings."""
        return Ask(
            self._request(),
            [t.schema() for t in self.tools.values()],
            self.agent.model_settings,
            stream=self.agent.stream,
        )

    def _request(self) -> list[Message]:
        """The next model call's messages (history.for_model), built on from the last call's;
        within the budget of the agent's History if it has one."""
        if self._window is not None:
            return self._window.request(self.messages)
        if self._built is None:
            self._built = Request(self.agent.instructions, self.edits)
        return self._built.of(self.messages)

    async def _aborted_within(self, seconds: float) -> bool:
        """Waits ``seconds`` on the engine's clock; True at once if the run is aborted."""
        pause = asyncio.ensure_future(self.deps.clock.sleep(seconds))
        racers: set[asyncio.Future[Any]] = {pause, self.x.signal.fired()}
        await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
        if not pause.done():
            pause.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pause
        return self.x.signal.aborted

    # ------------------------------------------- model call and the journal write

    async def _assistant(self, k: int) -> Message | None:
        """Step k's assistant message: the journaled one if the step's journal
        write already ran, else a model call, journaled now. None if an abort
        won the race."""
        if self._journaled is not None:
            # Only the first new step of an execution can find its reply already
            # journaled (by a process that died before the step's commit);
            # later ones cannot.
            recorded, self._journaled = self._journaled, None
            assert recorded.index == k
            return self._from_journal(recorded.output)
        started = utcnow()
        model_name = self.run_.model or self.agent.model
        observed = ModelCall(model_name, k, messages=self.messages, tools=tuple(self.tools))
        with self.deps.observer.model_call(self.run_, observed):
            reply = await self._admitted_call(model_name, k)
            if reply is None:
                return None
            observed.usage = reply.usage
            observed.finish_reason = reply.finish_reason
            observed.cost_usd = reply.cost_usd
            observed.output = reply.message
        message = assign_call_ids(reply.message, self.call_ids, k)
        output: dict[str, Any] = {"message": message, "finish_reason": reply.finish_reason}
        if await self._journal_write(k, model_name, started, reply, self._mcp_record, output):
            self._mcp_record = None  # recorded: the next steps offer the same
        return self._from_journal(output)

    async def _journal_write(
        self,
        k: int,
        model_name: str,
        started: datetime,
        reply: model.ModelReply,
        input: dict[str, Any] | None,
        output: dict[str, Any],
    ) -> bool:
        """Step k's journal write: the model's reply (``output``, which
        becomes the one journaled if another execution recorded step k
        meanwhile, so that tool call ids stay stable). True if this one did."""
        if reply.usage.estimated:
            # In the step's journal, where `runwright show`, the event feed
            # and the console read it (store/rows.py reads it back).
            output[USAGE_ESTIMATED] = True
        record = StepRecord(
            index=k,
            kind=StepKind.LLM,
            started_at=started,
            finished_at=utcnow(),
            name=model_name,
            input=input,
            output=output,
            usage=reply.usage,
            cost_usd=reply.cost_usd,
        )
        self.retry = None  # the journal write clears the run's failed attempts
        rolls_up = self.run_.parent_id is not None  # a child's use counts for its ancestors
        # In flight while the step's plain tools run: a journal operation
        # (an effect's start, a child's, the commit) waits for it first.
        if await self.journal.record_model_step(record, rolls_up=rolls_up, soon=True):
            self.usage = self.usage + reply.usage
            self.cost_usd += reply.cost_usd or 0.0
            return True
        existing = await self.journal.model_step(k)
        assert existing is not None
        output.clear()
        output.update(existing.output)
        return False

    # ------------------------------------------------------ the history's window

    def _make_window(self) -> Window:
        """The requests' window under the agent's History: its budget for the
        run's model (else the agent's, whose window the agent's definition
        checked litellm knows), counted by litellm's counter for it."""
        history = self.agent.history
        assert history is not None
        run_model = self.run_.model or self.agent.model
        window = None
        if history.budget_tokens is None:
            window = model.context_window(run_model) or model.context_window(self.agent.model)
        schemas = [t.schema() for t in self.tools.values()]
        return Window(
            history,
            history.budget(window, run_model),
            self.agent.instructions,
            self.edits,
            lambda messages: model.count_tokens(run_model, messages),
            tools_tokens=model.count_tokens(run_model, [], schemas) if schemas else 0,
        )

    def _summary_due(self, window: Window) -> SummaryDue | None:
        history = self.agent.history
        assert history is not None
        if history.summarizes:
            return window.summary_due(self.messages)
        window.request(self.messages)  # raises ContextExceeded if the latest turn is over
        return None

    async def _summarize(self, k: int, window: Window) -> bool | None:
        """Step k as a summary of the history's oldest turns, if one is due
        (or an earlier execution journaled it): its record is appended to the
        history, for the step's commit. True if so; None if an abort won the
        race. Raises :class:`ContextExceeded` when the latest turn alone is
        over the budget."""
        journaled = self._journaled
        if journaled is not None:
            if not (isinstance(journaled.input, dict) and HISTORY_SUMMARY in journaled.input):
                return False  # the step's model reply: no summary was due
            self._journaled = None  # the summary's journal write ran: no call again
            self.messages.append(_summary_from(journaled.output))
            return True
        # The first step of an execution counts the whole history: off the loop.
        due = await asyncio.to_thread(self._summary_due, window)
        if due is None:
            return False
        history = self.agent.history
        assert history is not None
        model_name = history.summary_model or self.run_.model or self.agent.model
        settings = history.summary_settings
        if settings is None:
            settings = self.agent.model_settings if history.summary_model is None else {}
        ask = Ask(due.messages, [], {**settings, "max_tokens": history.summary_tokens})
        started = utcnow()
        observed = ModelCall(model_name, k, messages=due.messages, tools=())
        with self.deps.observer.model_call(self.run_, observed):
            reply = await self._admitted_call(model_name, k, ask)
            if reply is None:
                return None
            observed.usage = reply.usage
            observed.finish_reason = reply.finish_reason
            observed.cost_usd = reply.cost_usd
            observed.output = reply.message
        content = reply.message.get("content")
        if not isinstance(content, str) or not content.strip():
            raise ModelError(f"{model_name}: the history's summary came back without text")
        span = {"start": due.start, "covers": due.covers}
        output: dict[str, Any] = {
            "message": {"role": "assistant", "content": content},
            "finish_reason": reply.finish_reason,
            HISTORY_SUMMARY: span,
        }
        await self._journal_write(k, model_name, started, reply, {HISTORY_SUMMARY: span}, output)
        self.messages.append(_summary_from(output))
        return True

    def _deltas(self, k: int) -> model.OnDelta:
        """Publishes step k's text as the model streams it: live only, never
        stored (the journal write records the whole message). Keyed by this execution's
        epoch, so that readers drop what an execution that was taken over
        still sends; after a failed publish the rest of the call sends none."""
        feed, run_id, epoch = self.deps.feed, self.run_.id, self.journal.fence.epoch
        sent = itertools.count()
        broken = False

        def publish(text: str, attempt: int) -> None:
            nonlocal broken
            if not broken:
                delta = {
                    "epoch": epoch,
                    "step": k,
                    "attempt": attempt,
                    "n": next(sent),
                    "text": text,
                }
                broken = not feed.token(run_id, delta)

        return publish

    async def _admitted_call(
        self, model_name: str, k: int, ask: Ask | None = None
    ) -> model.ModelReply | None:
        """The model's reply, under its model's limit when it has one
        (docs/flow-control.md): the call takes a request, its expected
        tokens and a slot first, waiting its turn a short while in place; a
        longer wait raises :class:`~runner.core.limits.admission.Park` and
        the execution parks the run, none of the step journaled yet. After
        the call its grant is finished with the tokens it used, what the
        provider said of its limits is learnt by every process, and the
        parked runs whose turn it now is are sent. ``ask``: another call
        than the step's own (a summary of the history)."""
        admission = self.deps.admission
        if admission is None or admission.limit_for(model_name) is None:
            try:
                return await self._call_model(model_name, k, ask)
            except ModelError as exc:
                if exc.rate_limited:
                    self.deps.observer.throttled(model_name)
                if exc.rate_limited and admission is not None:  # for runwright doctor
                    with contextlib.suppress(RunwrightError):
                        await admission.note_throttled(model_name)
                raise
        tokens = await self._expected_tokens(ask)
        began = time.monotonic()
        hold = 3 * self.deps.settings.lease_ttl_seconds
        admitted = await admission.enter(
            model_name, tokens, self.run_, self._aborted_within, hold_seconds=hold
        )
        if admitted is None:
            return None
        self.x.held.append(admitted.grant)
        self.deps.observer.limit_admitted(model_name, tokens, time.monotonic() - began)
        used = 0
        try:
            reply = await self._call_model(model_name, k, ask, retry_rate_limits=False)
            if reply is not None:
                used = reply.usage.total
                await admission.learn(model_name, headers=reply.rate_limits)
            return reply
        except ModelError as exc:
            if exc.rate_limited:  # for every process: the durable retry waits on the limit
                self.deps.observer.throttled(model_name)
                await admission.learn(model_name, retry_after=exc.retry_after or 0.0)
                await admission.note_throttled(model_name)
            raise
        finally:
            self.x.held.remove(admitted.grant)
            turns = await asyncio.shield(admission.leave(admitted, used))
            self.deps.observer.limit_used(model_name, used)
            self.deps.wake([run_id for run_id in turns if run_id != self.run_.id])

    async def _call_model(
        self, model_name: str, k: int, ask: Ask | None = None, *, retry_rate_limits: bool = True
    ) -> model.ModelReply | None:
        """The model's reply, or None if an abort won the race."""
        ask = ask or self._ask()
        policy = self.agent.retry or self.deps.retry_policy
        # The call is awaited in this task, and an abort cancels the task
        # while the call is in flight: the race a task of its own and
        # ``asyncio.wait`` would make, without the task and the three turns
        # of the loop they cost a step.
        task = asyncio.current_task()
        assert task is not None
        racing = True
        aborted = False

        def abort(_: asyncio.Future[Any]) -> None:
            nonlocal aborted
            if racing:  # else the call has returned: the loop checks the signal next
                aborted = True
                task.cancel()

        fired = self.x.signal.fired()
        if fired.done():
            return None
        fired.add_done_callback(abort)
        try:
            reply = await model.complete(
                model_name,
                ask.messages,
                ask.tools,
                ask.settings,
                retries=_first(
                    _first(policy.in_call_retries, self.agent.model_retries),
                    self.deps.model_retries,
                ),
                backoff_seconds=_first(
                    _first(policy.in_call_backoff, self.agent.model_backoff_seconds),
                    self.deps.model_backoff_seconds,
                ),
                transient=policy.transient,
                on_delta=self._deltas(k) if ask.stream else None,
                sleep=self.deps.clock.sleep,
                retry_rate_limits=retry_rate_limits,
            )
        except asyncio.CancelledError:
            # Ours unless someone else cancelled the execution too.
            if aborted and task.uncancel() == 0:
                return None
            raise
        except Exception:
            if aborted and task.uncancel() == 0:
                return None  # the call failed as it was cancelled: the abort won
            raise
        finally:
            racing = False
            fired.remove_done_callback(abort)
        if aborted:  # the call let the cancellation pass and returned: the abort won
            task.uncancel()
            return None
        return reply

    async def _journal(self, step: OpenStep) -> dict[str, Effect]:
        """The effects journaled for the step's pending calls, by call id."""
        call_ids = [call["id"] for call in step.pending]
        if not call_ids:
            return {}
        return await self.journal.effects(call_ids)

    def _from_journal(self, output: Any) -> Message:
        self.finish_reason = output.get("finish_reason")
        message: Message = output["message"]
        self.call_ids.update(call["id"] for call in message.get("tool_calls") or ())
        return message

    # ---------------------------------------------------- tools and the commit

    async def _commit(self, k: int, final_text: bool, calls: StepCalls) -> Ended | None:
        if calls.children_running and not (
            calls.results or calls.approvals or calls.children or calls.granted
        ):
            # Resumed while a child it started still runs (a duplicate
            # resume): wait again; the child's end resumes the run.
            return await self.x.end(Outcome(RunStatus.WAITING))
        started: list[Run] = []
        if calls.children:
            # Before the step's commit: a crash between them leaves children
            # the next execution finds again (their ids are the calls').
            started = await self.journal.start_children([child for child, _ in calls.children])
        self.messages += [r.message() for r in calls.results]
        self.messages += [entry for _, entry in calls.approvals]
        self.messages += [entry for _, entry in calls.children]
        outcome = None
        if calls.waits:
            pass  # the store moves the run to waiting
        elif calls.final is not None:
            outcome = Outcome(RunStatus.COMPLETED, output=calls.final.final_output)
        elif final_text:
            if self.agent.output is not None:
                self.messages.append({"role": "user", "content": OUTPUT_REMINDER})
            else:
                outcome = Outcome(RunStatus.COMPLETED, output=self.messages[-1].get("content"))
        commit = StepCommit(
            step_index=k,
            base_count=self.saved,
            new_messages=self.messages[self.saved :],
            finish_reason=self.finish_reason,
            tool_steps=[r.record(k) for r in calls.results],
            state=self.state.value,
            state_changed=self.state.changed,
            approvals=[approval for approval, _ in calls.approvals] + calls.granted,
            child_calls=[child.call_id for child, _ in calls.children],
            waits=calls.waits,
            outcome=outcome,
        )
        if not (commit.outcome or commit.waits or commit.approvals or started):
            # The run goes on: the next model call overlaps this commit, and
            # the journal's next operation waits for it (Journal.commit_step).
            await self.journal.commit_step(commit, soon=True)
            self.saved = len(self.messages)
            self.index = k
            self.state.changed = False
            return None
        ended = await self.journal.commit_step(commit)
        queued = [child.id for child in started if child.status is RunStatus.QUEUED]
        if queued:
            self.deps.send(queued)
        self.saved = len(self.messages)
        self.index = k
        self.state.changed = False
        for granted in calls.granted:
            # Decided by a standing approval in this commit: told as any decision is.
            decided = await self.journal.approval(granted.approval_id)
            self.deps.observer.approval_decided(ended.run if ended else self.run_, decided)
        if calls.approvals and ended is not None:
            asked = [approval for approval, _ in calls.approvals]
            self.deps.observer.approvals_requested(ended.run, asked)
            await self.deps.notify_approvals(self.agent, ended.run, asked)
        return ended
