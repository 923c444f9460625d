"""An engine for tests: runs execute in the test's own process, to completion
or to their next wait, on a Postgres database of the test's own, with no Redis
(the Postgres fence alone decides who executes) and a :class:`ManualClock`.

The pytest plugin (:mod:`runner.testing.plugin`) hands one to each test that
asks for ``runwright_engine``; :class:`TestEngine` works without pytest too.
What a test does with it (docs/testing-your-agents.md):

- start and run: :meth:`TestEngine.run`, :meth:`TestEngine.start`,
  :meth:`TestEngine.run_until_ended`;
- decide: :meth:`TestEngine.approve` (with edited arguments, or for the rest
  of the run) and :meth:`TestEngine.deny`, by tool name; answer the model's
  question: :meth:`TestEngine.answer`; see what waits:
  :meth:`TestEngine.pending`, :meth:`TestEngine.questions`;
- read: :meth:`TestEngine.steps`, :meth:`TestEngine.tool_calls`,
  :meth:`TestEngine.effects`, :meth:`TestEngine.messages`,
  :meth:`TestEngine.invocations`;
- move time: :meth:`TestEngine.advance` (expiries, retry waits, lapsed leases,
  without sleeping);
- crash: :meth:`TestEngine.crash` at a named point, :meth:`TestEngine.take_over`
  as a new worker would, and :meth:`TestEngine.assert_taken_over`: every
  effect ran at most once and the history is whole.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pydantic

from runner.core import faults
from runner.core.agent import Agent, Registry
from runner.core.deprecation import retired
from runner.core.engine.engine import Engine
from runner.core.errors import InvalidInput, ModelRequestsBlocked
from runner.core.model import blocked_call
from runner.core.observe import ModelCall, Observer, TickReport, ToolCall
from runner.core.settings import Settings
from runner.testing.clock import ManualClock
from runner.testing.scripted import NOT_OFFERED, UnknownScriptedTool
from store.db import make_engine
from store.models import Approval, Effect, Message, RequestKind, Run, RunStatus, Step, StepKind
from store.postgres import PostgresStore

# A key for the approval links of test runs: never one of a deployment's.
TEST_SECRET_KEY = "test:runwright-testing-kit-key-not-for-production"
# How many executions run_until_ended allows one run before it gives up.
MAX_EXECUTIONS = 50

__all__ = ["MAX_EXECUTIONS", "TEST_SECRET_KEY", "Crash", "TestEngine", "ToolCallRecord"]


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool call as the run recorded it: what the model asked, what it was told."""

    step: int
    name: str
    call_id: str | None
    input: Any
    output: Any
    error: Any


@dataclass(frozen=True)
class Crash:
    """Where :meth:`TestEngine.crash` left a run: as a killed worker leaves it."""

    run: Run
    point: str


class _Invocations(Observer):
    """Counts the calls of each tool's function, per run and tool call, over
    every execution in this process."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self.effects: set[str] = set()
        self.offered: set[str] = set()  # the tools the runs' models were offered
        self._lock = threading.Lock()

    @contextmanager
    def model_call(self, run: Run, call: ModelCall) -> Iterator[None]:
        with self._lock:
            self.offered.update(call.tools)
        yield

    def known(self) -> set[str]:
        with self._lock:
            return self.offered | {name for (_, name, _) in self.counts}

    @contextmanager
    def tool_call(self, run: Run, call: ToolCall) -> Iterator[None]:
        try:
            yield
        finally:  # also when the call died with its execution
            with self._lock:
                self.counts[(run.id, call.name, call.call_id)] += call.invocations
                if call.effect:
                    self.effects.add(call.name)


class TestEngine:
    """A real :class:`~runner.core.engine.engine.Engine`, driven by the test.

    ``engine`` is the engine itself, for anything not wrapped here; ``clock``
    is its :class:`ManualClock`. Agents are found in ``registry`` (default:
    the one every :class:`~runner.core.agent.Agent` registers in); ``observers``
    hear what the executions do, as a worker's do.
    """

    __test__ = False  # pytest: not a test class

    def __init__(
        self,
        database_url: str,
        *,
        registry: Registry | None = None,
        settings: Settings | None = None,
        clock: ManualClock | None = None,
        observers: Sequence[Observer] = (),
    ) -> None:
        self.clock = clock or ManualClock()
        self.store = PostgresStore(make_engine(database_url, pool_size=4))
        self._queue: deque[str] = deque()
        self._invocations = _Invocations()
        self.engine = Engine(
            self.store,
            leases=None,
            enqueue=self._queue.append,
            settings=settings or Settings(secret_key=TEST_SECRET_KEY),
            registry=registry,
            clock=self.clock,
            observers=[self._invocations, *observers],
        )

    def close(self) -> None:
        faults.disarm()
        self.engine.close()
        self.store.close()

    def __enter__(self) -> TestEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ runs

    def start(self, agent: str | Agent, payload: Any = None, **kwargs: Any) -> Run:
        """Create a run (``Engine.start``'s keywords); it runs when asked to."""
        name = agent.name if isinstance(agent, Agent) else agent
        return self.engine.start(name, payload, **kwargs)

    def run(self, agent: str | Agent, payload: Any = None, **kwargs: Any) -> Run:
        """Start a run and :meth:`run_until_ended`."""
        return self.run_until_ended(self.start(agent, payload, **kwargs).id)

    def run_until_ended(self, run_id: str) -> Run:
        """Execute the run here until it ends (completed, failed,
        cancelled) or waits for a person; the run as it is then. A run that
        waits for its children (``Agent.as_tool``) has them run here first.

        A run waiting to retry a failing model step has its wait skipped (the
        clock moves to its end). A run another execution still holds (one
        that :meth:`crash` left, until its lease lapses) is refused:
        :meth:`take_over` it. A run failed
        by a blocked call to a real model raises
        :class:`~runner.core.errors.ModelRequestsBlocked`.
        """
        for _ in range(MAX_EXECUTIONS):
            run = self.engine.get_run(run_id)
            if run.status is RunStatus.WAITING and self._queue and self._has_running_child(run_id):
                self.run_queued()  # its children (Agent.as_tool), which resume it
                continue
            if run.status.ended or run.status is RunStatus.WAITING:
                return self._checked(run)
            lapsed = run.claim is not None and run.claim.expires_at < self.clock.now()
            if run.status is RunStatus.RUNNING and not lapsed:
                raise InvalidInput(
                    f"run {run_id} is held by an execution that did not end (a crash): "
                    "call take_over() to take it over as a new worker would"
                )
            if run.retry is not None and run.retry.at is not None:
                self.clock.advance_to(run.retry.at)
            self._forget(run_id)
            self.engine.execute(run_id)
        raise AssertionError(
            f"run {run_id} did not end in {MAX_EXECUTIONS} executions "
            f"(it is {self.engine.get_run(run_id).status})"
        )

    def _has_running_child(self, run_id: str) -> bool:
        return any(not child.status.ended for child in self.engine.children(run_id))

    def run_queued(self) -> list[Run]:
        """Run every run the engine has queued (after a tick, a cancel, a
        decision, the next run of a concurrency key), each until it ends."""
        done: list[Run] = []
        while self._queue:
            run_id = self._queue.popleft()
            if self.engine.get_run(run_id).status in (RunStatus.QUEUED, RunStatus.INTERRUPTED):
                done.append(self.run_until_ended(run_id))
        return done

    def get_run(self, run_id: str) -> Run:
        return self.engine.get_run(run_id)

    def cancel(self, run_id: str) -> Run:
        self.engine.cancel(run_id)
        self.run_queued()
        return self.engine.get_run(run_id)

    # -------------------------------------------------------- deciding

    def approve(
        self,
        run_id: str,
        tool: str | None = None,
        *,
        reason: str | None = None,
        by: str = "test",
        arguments: dict[str, Any] | None = None,
        for_run: bool = False,
    ) -> Run:
        """Approve the run's pending approvals of ``tool`` (or its one pending
        approval), then run it on to its next end or wait.

        ``arguments``: approve the call with these in place of the model's (they
        must fit the tool's schema; one call only, so ``tool`` must name just
        one pending call). ``for_run``: approve the tool for the rest of the
        run, so its later calls do not ask."""
        return self._decide(run_id, tool, True, reason, by, arguments, for_run)

    def deny(
        self, run_id: str, tool: str | None = None, *, reason: str | None = None, by: str = "test"
    ) -> Run:
        """Deny them, with ``reason`` for the model; then run it on."""
        return self._decide(run_id, tool, False, reason, by, None, False)

    def answer(self, run_id: str, value: Any, *, by: str = "test") -> Run:
        """Answer the run's one pending question (the model's ``ask_human``)
        with ``value``: text, or what fits the agent's answer model (a dict or
        the model itself); then run it on to its next end or wait."""
        questions = self.questions(run_id)
        if not questions:
            raise InvalidInput(
                f"run {run_id} has no pending question (pending approvals: "
                f"{_tools(self.pending(run_id))})"
            )
        if len(questions) > 1:
            asked = "; ".join(repr(q.question) for q in questions)
            raise InvalidInput(
                f"run {run_id} waits for {len(questions)} answers ({asked}): answer each "
                "with engine.answer(question.approval_id, ...), then run_until_ended()"
            )
        if isinstance(value, pydantic.BaseModel):
            value = value.model_dump(mode="json")
        self.engine.answer(questions[0].approval_id, value, trusted=True, by=by)
        return self.run_until_ended(run_id)

    def pending(self, run_id: str) -> list[Approval]:
        """The run's approvals nobody has decided yet (its questions:
        :meth:`questions`)."""
        return [a for a in self._open(run_id) if a.kind is RequestKind.APPROVAL]

    def questions(self, run_id: str) -> list[Approval]:
        """The run's questions nobody has answered yet; each one's
        ``question`` is what the model asked."""
        return [a for a in self._open(run_id) if a.kind is RequestKind.INPUT]

    def _open(self, run_id: str) -> list[Approval]:
        return [a for a in self.engine.approvals(run_id) if a.pending]

    def _decide(
        self,
        run_id: str,
        tool: str | None,
        approve: bool,
        reason: str | None,
        by: str,
        arguments: dict[str, Any] | None,
        for_run: bool,
    ) -> Run:
        pending = self.pending(run_id)
        chosen = [a for a in pending if tool is None or a.tool_name == tool]
        waiting_for = _tools(pending)
        if not chosen:
            asked = " (it waits for an answer: use answer())" if self.questions(run_id) else ""
            raise InvalidInput(
                f"run {run_id} has no pending approval"
                + (f" of {tool!r}" if tool else "")
                + f" (pending: {waiting_for}){asked}"
            )
        if tool is None and len({a.tool_name for a in chosen}) > 1:
            raise InvalidInput(
                f"run {run_id} waits for approvals of {waiting_for}: name the tool to decide"
            )
        if arguments is not None and len(chosen) > 1:
            raise InvalidInput(
                f"run {run_id} has {len(chosen)} pending calls of {chosen[0].tool_name}: "
                "edited arguments are for one call (decide each with "
                "engine.decide(approval.approval_id, True, arguments=..., trusted=True))"
            )
        for approval in chosen:
            # Approving one for the rest of the run approves the others with it.
            if not self.engine.store.get_approval(approval.approval_id).pending:
                continue
            self.engine.decide(
                approval.approval_id,
                approve,
                reason,
                trusted=True,
                by=by,
                arguments=arguments,
                for_run=for_run,
            )
        return self.run_until_ended(run_id)

    # ---------------------------------------------------------- reading

    def steps(self, run_id: str) -> list[Step]:
        return self.engine.steps(run_id)

    def tool_calls(self, run_id: str) -> list[ToolCallRecord]:
        """The run's tool calls in the order they were recorded."""
        return [
            ToolCallRecord(s.index, s.name or "", s.tool_call_id, s.input, s.output, s.error)
            for s in self.engine.steps(run_id)
            if s.kind is StepKind.TOOL
        ]

    def effects(self, run_id: str) -> list[Effect]:
        """The run's effect journal: each effect call, its status and attempts."""
        return self.engine.effects(run_id)

    def messages(self, run_id: str) -> list[Message]:
        """The run's history as of its last checkpoint."""
        checkpoint = self.engine.checkpoint(run_id)
        return [] if checkpoint is None else list(checkpoint.messages)

    def invocations(self, tool: str, run_id: str | None = None) -> int:
        """How many times ``tool``'s function ran (of ``run_id``, or of every
        run), over every execution: a retry counts, an effect answered from
        its journal does not. A tool no model of this engine's runs was
        offered, and no registered agent lists, raises :class:`InvalidInput`:
        a misspelled name would otherwise count 0 and pass."""
        known = self._invocations.known() | self._listed_tools()
        if tool not in known:
            raise InvalidInput(
                f"no tool named {tool!r} was offered to a model of this engine's runs or is "
                f"listed by a registered agent; known: {', '.join(sorted(known)) or 'none'}"
            )
        return sum(
            n
            for (run, name, _), n in self._invocations.counts.items()
            if name == tool and (run_id is None or run == run_id)
        )

    def _listed_tools(self) -> set[str]:
        """The tools the registered agents list (not those a factory makes)."""
        registry = self.engine.deps.registry
        names: set[str] = set()
        for name in registry.names():
            listed = registry.get(name).tools
            if not callable(listed):
                names.update(t.name for t in listed)
        return names

    # ------------------------------------------------------------- time

    def advance(self, by: float | timedelta) -> TickReport:
        """Move the clock ``by`` seconds (or a timedelta), run ``tick()`` as
        beat would (expiring approvals, queueing lapsed runs to be taken
        over), and run what it queued until each ends or waits. Nothing
        sleeps."""
        self.clock.advance(by)
        return self.tick()

    def tick(self) -> TickReport:
        report = self.engine.tick()
        self.run_queued()
        return report

    # ------------------------------------------------------------ crashes

    def crash(self, run_id: str, at: str, *, hit: int = 1) -> Crash:
        """Execute the run until it reaches the fault point ``at`` (the
        ``hit``-th time) and die there, as a killed worker dies: nothing after
        the point is written, and the run keeps its claim until the lease
        lapses. Points (runner/core/faults.py): ``after_journal`` (the model's reply
        is journaled, no tool has run), ``after_effect_start`` (an effect's
        journal says it started; its function has not run),
        ``after_effect_call`` (its function ran; its outcome is not written),
        ``after_effect_complete`` and ``after_commit`` (the step is committed).
        Fails if the run never reaches the point. The execution's journal
        (runner/core/journal.py) is wrapped in :class:`~runner.core.faults.Faulted`
        while the point is armed: the engine itself is not patched."""
        if at not in faults.POINTS:
            raise InvalidInput(f"unknown crash point {at!r}; known: {', '.join(faults.POINTS)}")
        faults.arm(at, "raise", at_hit=hit)
        try:
            self._forget(run_id)
            self.engine.execute(run_id)
        except faults.FaultInjected:
            return Crash(self.engine.get_run(run_id), at)
        finally:
            faults.disarm()
        run = self.engine.get_run(run_id)
        raise AssertionError(f"run {run_id} never reached {at} (it is {run.status})")

    def take_over(self, run_id: str) -> Run:
        """Take a crashed run over as a new worker would: let its lease lapse
        (the clock moves past it), let ``tick()`` find and queue it, and run
        it until it ends or waits."""
        self.clock.advance(self.engine.settings.lease_ttl_seconds + 1)
        report = self.engine.tick()
        if run_id not in report.lapsed:
            run = self.engine.get_run(run_id)
            raise AssertionError(
                f"tick() did not queue run {run_id} for a takeover (it is {run.status})"
            )
        return self.run_until_ended(run_id)

    def assert_taken_over(self, run_id: str) -> Run:
        """Assert what a crash must not break: every effect of the run ran at
        most once (its function, counted over every execution, and its
        journal), and its history is whole (each tool call the model made
        has exactly one result, no model step is recorded twice)."""
        run = self.engine.get_run(run_id)
        problems: list[str] = []
        for (rid, name, call_id), count in sorted(self._invocations.counts.items()):
            if rid == run_id and name in self._invocations.effects and count > 1:
                problems.append(f"effect {name} ran {count} times for tool call {call_id}")
        for effect in self.effects(run_id):
            if effect.attempts > 1:
                problems.append(
                    f"effect {effect.tool} ({effect.key}) ran {effect.attempts} times "
                    "(it is declared retry='at_least_once')"
                )
        problems += _history_gaps(self.messages(run_id), run)
        indexes = [s.index for s in self.steps(run_id) if s.kind is StepKind.LLM]
        if len(indexes) != len(set(indexes)):
            problems.append(f"model steps recorded twice: {sorted(indexes)}")
        if problems:
            raise AssertionError(f"run {run_id} after its takeover: " + "; ".join(problems))
        return run

    # ------------------------------------------- deprecated names (one release)

    def run_until_settled(self, run_id: str) -> Run:
        """Deprecated: :meth:`run_until_ended`."""
        retired("TestEngine.run_until_settled", "TestEngine.run_until_ended")
        return self.run_until_ended(run_id)

    def recover(self, run_id: str) -> Run:
        """Deprecated: :meth:`take_over`."""
        retired("TestEngine.recover", "TestEngine.take_over")
        return self.take_over(run_id)

    def assert_recovered(self, run_id: str) -> Run:
        """Deprecated: :meth:`assert_taken_over`."""
        retired("TestEngine.assert_recovered", "TestEngine.assert_taken_over")
        return self.assert_taken_over(run_id)

    # ------------------------------------------------------- internals

    def _forget(self, run_id: str) -> None:
        """The run is being executed here: its queued hand-offs are spent."""
        while run_id in self._queue:
            self._queue.remove(run_id)

    @staticmethod
    def _checked(run: Run) -> Run:
        error = run.error
        if run.status is RunStatus.FAILED and error is not None and blocked_call(error.message):
            raise ModelRequestsBlocked(error.message)
        if run.status is RunStatus.FAILED and error is not None and NOT_OFFERED in error.message:
            said = error.message[error.message.find("scripted model") :]
            raise UnknownScriptedTool(f"run {run.id} ({run.agent}): {said}")
        return run


def _tools(requests: list[Approval]) -> str:
    return ", ".join(sorted({a.tool_name for a in requests})) or "none"


def _history_gaps(messages: list[Message], run: Run) -> list[str]:
    """What is missing or doubled in a history: tool calls without exactly
    one result (a call still waiting for a person counts as answered once)."""
    asked: list[str] = []
    answered: Counter[str] = Counter()
    for message in messages:
        for call in message.get("tool_calls") or ():
            asked.append(str(call.get("id")))
        if message.get("role") == "tool":
            answered[str(message.get("tool_call_id"))] += 1
    problems = [f"tool call {c} has {answered[c]} results" for c in asked if answered[c] > 1]
    if run.status is RunStatus.COMPLETED:
        problems += [f"tool call {c} has no result" for c in asked if answered[c] == 0]
    return problems
