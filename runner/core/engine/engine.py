"""The engine: the public face of Runwright in Python."""

from __future__ import annotations

import importlib
import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pydantic

from runner.core.agent import Registry
from runner.core.agent import registry as default_registry
from runner.core.approvals import changes, decisions
from runner.core.approvals.changes import ToolChange
from runner.core.approvals.inbox import InboxItem, inbox
from runner.core.audit import UNKNOWN_ACTOR, AuditAction, ViewWindow, decision, record
from runner.core.clock import SYSTEM, Clock
from runner.core.coordination.claims import NotClaimed
from runner.core.coordination.leases import CancelListener, Leases
from runner.core.deprecation import retired
from runner.core.engine import conversations, erasure, retry_fork, versioning
from runner.core.engine.deps import Deps, Enqueue
from runner.core.engine.execution import Execution
from runner.core.engine.tick import tick
from runner.core.errors import (
    ConfigurationError,
    InvalidApprovalToken,
    InvalidInput,
    StoreUnavailable,
)
from runner.core.events.eventstream import EventStream
from runner.core.events.feed import Until, statuses
from runner.core.layout import require_own_modules
from runner.core.observe import Observer, TickReport
from runner.core.retry import RetryPolicy
from runner.core.runtime import runtime
from runner.core.schedules.book import Schedules
from runner.core.settings import Settings
from runner.core.steps.run_context import AbortReason
from store.models import (
    Approval,
    Checkpoint,
    Dataset,
    Effect,
    EffectOutcome,
    Evaluation,
    EvaluationInfo,
    NewRun,
    Run,
    RunAttempt,
    RunStatus,
    StandingApproval,
    Step,
    ThreadSummary,
    TriggerEnvelope,
)
from store.pg.approvals import CancelResult, DecisionResult
from store.pg.audit import AuditCheck, AuditEntry
from store.postgres import PostgresStore
from store.rules import CancelAction
from store.validate import check_run_id
from store.workers import WorkerInfo

log = logging.getLogger(__name__)
M = TypeVar("M", bound=pydantic.BaseModel)

_FROM_SETTINGS: Any = object()

__all__ = ["Engine", "Enqueue", "TickReport", "import_string"]


def import_string(path: str) -> Any:
    """An object named in settings (``RUNWRIGHT_ENQUEUE``, ...):
    ``"package.module:attribute"`` (or dotted) to the object it names."""
    module, sep, attribute = path.partition(":")
    if not sep:
        module, _, attribute = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise InvalidInput(f"cannot import {path!r}: {exc}") from exc


class Engine:
    """Starts, executes, inspects, cancels and resumes runs.

    ``enqueue(run_id)`` hands a run to a worker; ``Engine.from_env()`` uses
    Celery's. With ``enqueue=None`` the engine only creates runs, and the caller
    runs them with :meth:`execute`.

    A façade: what it is built with is one :class:`~runner.core.engine.deps.Deps`, which the
    executions and ``tick()`` receive in its place (they never see the engine).
    """

    def __init__(
        self,
        store: PostgresStore,
        *,
        leases: Leases | None = None,
        enqueue: Enqueue | None = None,
        settings: Settings | None = None,
        registry: Registry | None = None,
        model_retries: int | None = None,
        model_backoff_seconds: float | None = None,
        retry_policy: RetryPolicy | None = None,
        store_wait_seconds: float | None = None,
        observers: Sequence[Observer] = (),
        clock: Clock | None = None,
    ) -> None:
        self.deps = Deps.build(
            store,
            leases=leases,
            enqueue=enqueue,
            settings=settings or Settings(),
            registry=registry or default_registry,
            model_retries=model_retries,
            model_backoff_seconds=model_backoff_seconds,
            retry_policy=retry_policy,
            store_wait_seconds=store_wait_seconds,
            observers=observers,
            clock=clock or SYSTEM,
        )
        # Every write through the store, the engine's or a caller's, wakes the
        # readers of the runs it touched (runner/core/events/feed.py).
        self._stop_waking = store.on_commit(self.deps.feed.wake)
        self._listener: CancelListener | None = None
        self._listener_lock = threading.Lock()
        self._views = ViewWindow()

    @classmethod
    def from_env(cls, *, enqueue: Enqueue | None = _FROM_SETTINGS) -> Engine:
        """An engine configured from the environment (the local stack if no URLs)."""
        from runner.core.settings import open_store, resolve
        from store.summary import require_schema

        settings = resolve(Settings.from_env())
        if not settings.database_url or not settings.redis_url:
            raise ConfigurationError(
                "set both RUNWRIGHT_DATABASE_URL and RUNWRIGHT_REDIS_URL, or neither for the "
                "local stack"
            )
        require_schema(settings.database_url)
        default_registry.load(settings.agents)
        store = open_store(settings)
        if enqueue is _FROM_SETTINGS:
            if settings.enqueue.startswith("tasks:"):
                require_own_modules("tasks")
            enqueue = import_string(settings.enqueue)
        from runner.core.observe.setup import observers

        return cls(
            store,
            leases=Leases.from_url(settings.redis_url),
            enqueue=enqueue,
            settings=settings,
            observers=observers(settings),
        )

    # What the engine was built with, read-only: the executions share them.

    @property
    def store(self) -> PostgresStore:
        return self.deps.store

    @property
    def leases(self) -> Leases | None:
        return self.deps.leases

    @property
    def enqueue(self) -> Enqueue | None:
        return self.deps.enqueue

    @property
    def settings(self) -> Settings:
        return self.deps.settings

    @property
    def schedules(self) -> Schedules:
        """The deployment's schedules: make, change, pause and look at them;
        ``tick()`` fires them (docs/triggers.md)."""
        return Schedules(self.deps)

    def close(self) -> None:
        self._stop_waking()
        self.deps.feed.close()
        if self._listener is not None:
            self._listener.stop()
            self._listener = None

    # ------------------------------------------------------------ runs

    def start(
        self,
        agent: str,
        payload: Any = None,
        *,
        source: str = "manual",
        trigger: str = "manual",
        keys: Mapping[str, str] | None = None,
        thread: str | None = None,
        id: str | None = None,
        priority: int = 0,
    ) -> Run:
        """Create a run of ``agent`` and enqueue it. Idempotent on ``id``.
        ``priority`` (0 to 9, higher first) orders its admission to a
        contended limit among its tenant's runs, and its message among the
        broker's (docs/flow-control.md)."""
        spec = self.deps.registry.get(agent)
        fields: dict[str, Any] = {
            "source": source,
            "trigger": trigger,
            "payload": {} if payload is None else payload,
            "keys": dict(keys or {}),
            "thread": thread,
        }
        if id is not None:
            fields["id"] = id
        try:
            envelope = TriggerEnvelope(**fields)
        except pydantic.ValidationError as exc:
            raise InvalidInput(f"invalid trigger: {exc}") from None
        carrier: dict[str, str] = {}
        with self.deps.observer.starting(spec.name, carrier):
            run, created = self.deps.store.create_run(
                NewRun(
                    agent=spec.name,
                    trigger=envelope,
                    concurrency_key=spec.key_for(envelope),
                    trace_context=carrier or None,
                    tenant=spec.tenant_for(envelope),
                    priority=priority,
                )
            )
            self.deps.observer.started(run)
        if created:
            self.deps.send([run.id], priority=run.priority)
        return run

    def send(
        self,
        thread: str,
        message: str,
        *,
        agent: str,
        by: str | None = None,
        id: str | None = None,
        priority: int = 0,
        source: str | None = None,
    ) -> Run:
        """Add a user's ``message`` to ``thread``: it starts the thread's next
        run of ``agent``, which continues the thread's history. While a run
        of the thread is in progress, the agent's ``on_new_message`` decides:
        ``enqueue`` (after it), ``reject`` (:class:`ThreadBusy`, nothing
        written), ``interrupt`` or ``rollback`` (it is cancelled at its next
        safe point, and this run continues; docs/conversations.md). A
        message while the run asks the thread's user a question
        (``AskHuman(to="requester")``) answers it. ``id`` makes a send
        idempotent; ``by`` is who sent it."""

        return conversations.send(
            self, thread, message, agent=agent, by=by, id=id, priority=priority, source=source
        )

    def decide_in_thread(
        self,
        thread: str,
        request_id: str,
        *,
        approve: bool | None = None,
        answer: Any = None,
        reason: str | None = None,
        by: str | None = None,
        source: str | None = None,
    ) -> Run:
        """The thread's own user decides a request addressed to them
        (``ApprovalPolicy(to="requester")``: ``approve``; ``AskHuman(to=
        "requester")``: ``answer``, as a message sent to the thread does).
        The app checks that the user is the thread's; Runwright checks that
        the request is an open one of the thread's run, addressed to its
        user (else :class:`InvalidTransition`)."""
        return conversations.decide_in_thread(
            self,
            thread,
            request_id,
            approve=approve,
            answer=answer,
            reason=reason,
            by=by,
            source=source,
        )

    def threads(self, *, days: float = 30, limit: int = 100) -> list[ThreadSummary]:
        """The threads with a run in the last ``days``, the latest first."""
        if not 0 < days <= 3660 or not 1 <= limit <= 1000:
            raise InvalidInput("days is from 0 to 3660 and limit from 1 to 1000")
        since = datetime.now(UTC) - timedelta(days=days)
        return self.deps.store.threads(since, limit)

    def thread(self, thread: str) -> conversations.Thread:
        """The thread as a conversation: its runs, the one in progress, its messages."""
        return conversations.read(self.deps, thread)

    # ------------------------------------------------------- evaluations

    def evaluations(self, dataset: str | None = None, *, limit: int = 50) -> list[EvaluationInfo]:
        """The latest evaluations (of ``dataset`` if given), newest first,
        without their cases (runner/evals/evaluation.py writes them)."""
        return self.deps.store.evaluations(dataset=dataset, limit=limit)

    def evaluation(self, evaluation_id: str) -> Evaluation:
        """An evaluation with its cases and their reports; EvaluationNotFound if none."""
        return self.deps.store.evaluation(evaluation_id)

    def dataset(self, name: str, version: str | None = None) -> Dataset:
        """Dataset ``name`` at ``version`` (else its newest) with its cases;
        DatasetNotFound if there is none."""
        return self.deps.store.dataset(name, version)

    def execute(self, run_id: str) -> Run | None:
        """Execute the run here, blocking until its execution ends (the run
        ended, waits or is queued again) or is handed off. Returns the run as
        the execution left it, or None if this process could not claim it
        (someone else has it, or it is not claimable)."""
        done = self.try_execute(run_id)
        return None if isinstance(done, NotClaimed) else done

    def try_execute(self, run_id: str) -> Run | NotClaimed | None:
        """:meth:`execute`, saying why when the run could not be claimed: a
        :class:`~runner.core.coordination.claims.NotClaimed` names the owner holding the run, or
        says it has ended or is not claimable now. None: the execution let
        the run go to another (it lost its claim or its store, or this worker
        is draining)."""
        return runtime().run(self._execute(run_id))

    async def execute_async(self, run_id: str) -> Run | None:
        """:meth:`execute` for ``async`` code."""
        done = await self._execute(run_id)
        return None if isinstance(done, NotClaimed) else done

    async def aexecute(self, run_id: str) -> Run | None:
        """Deprecated: :meth:`execute_async`."""
        retired("Engine.aexecute", "Engine.execute_async")
        return await self.execute_async(run_id)

    async def _execute(self, run_id: str) -> Run | NotClaimed | None:
        self._ensure_listener()
        execution = Execution(self.deps, run_id)
        ended = await execution.run()
        return ended.run if ended is not None else execution.not_claimed

    def get_run(self, run_id: str) -> Run:
        return self.deps.store.get_run(run_id)

    def run_by_trigger(self, agent: str, trigger_id: str) -> Run | None:
        """The run of ``agent`` that the trigger id ``trigger_id`` started
        (``start(..., id=...)``); None if there is none."""
        return self.deps.store.run_by_trigger(agent, trigger_id)

    def list_runs(
        self,
        *,
        status: RunStatus | str | None = None,
        agent: str | None = None,
        thread: str | None = None,
        limit: int = 50,
        before: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        needs_attention: bool = False,
        payloads: bool = True,
    ) -> list[Run]:
        """Newest first; ``before`` (a run id) pages to older runs; ``since``
        and ``until`` bound when they were created; ``needs_attention``: only
        runs with an effect of unknown outcome nobody resolved. Without
        ``payloads``, each run's trigger payload, output and state are None:
        a list that shows none neither reads nor decrypts them."""
        if isinstance(status, str):
            try:
                status = RunStatus(status)
            except ValueError:
                known = ", ".join(s.value for s in RunStatus)
                raise InvalidInput(f"unknown status {status!r}; use one of {known}") from None
        return self.deps.store.list_runs(
            status=status,
            agent=agent,
            thread=thread,
            limit=limit,
            before=before,
            since=since,
            until=until,
            needs_attention=needs_attention,
            payloads=payloads,
        )

    def run_counts(self, agent: str | None = None) -> dict[RunStatus, int]:
        return self.deps.store.run_counts(agent)

    def inbox(self, limit: int = 50, agent: str | None = None) -> list[InboxItem]:
        """Approvals waiting for a person, oldest first, each with what an
        approver needs to judge it (runner/core/approvals/inbox.py)."""
        return inbox(self.deps.store, self.deps.registry, limit, agent)

    def tool_change(self, approval: Approval) -> ToolChange | None:
        """How the tool of a pending approval changed since its call was
        requested, as a decision would be applied; None if it did not, or
        cannot be told (runner/core/approvals/changes.py)."""
        return changes.tool_change(self.deps.store, self.deps.registry, approval)

    def result(self, run_id: str, model: type[M]) -> M:
        """The completed run's output validated as ``model`` (see :meth:`Run.output_as`)."""
        return self.deps.store.get_run(run_id).output_as(model)

    def events(
        self,
        run_id: str,
        after: int | None = None,
        *,
        timeout: float | None = None,
        until: Until = "ended",
        tokens: bool = True,
    ) -> EventStream:
        """The run's events after the id ``after`` (all, if None), then live
        ones until the run ends (or reaches ``until``) or ``timeout``
        seconds pass; iterate with ``for`` or ``async for`` (runner/core/events/feed.py)."""
        return self.deps.feed.events(
            run_id, after, timeout=timeout, until=statuses(until), tokens=tokens
        )

    def wait(self, run_id: str, timeout: float | None = None, until: Until = "ended") -> Run:
        """The run once it ends (``until="waiting"``: or waits for an
        approval), driven by the live feed; after ``timeout`` seconds, the run
        as it is then."""
        return self.deps.feed.wait(check_run_id(run_id), timeout, statuses(until))

    async def wait_async(
        self, run_id: str, timeout: float | None = None, until: Until = "ended"
    ) -> Run:
        """:meth:`wait` for ``async`` code."""
        return await self.deps.feed.wait_async(check_run_id(run_id), timeout, statuses(until))

    def steps(self, run_id: str) -> list[Step]:
        return self.deps.store.steps(run_id)

    def effects(self, run_id: str) -> list[Effect]:
        """The run's effect journal: each ``@effect`` call, its status and attempts."""
        return self.deps.store.effects(run_id)

    def checkpoint(self, run_id: str) -> Checkpoint | None:
        return self.deps.store.checkpoint(run_id)

    def approvals(self, run_id: str) -> list[Approval]:
        return self.deps.store.approvals(run_id)

    # --------------------------------------------------------- control

    def cancel(
        self, run_id: str, *, by: str | None = None, source: str | None = None
    ) -> CancelResult:
        """Cancel from any process, recording ``by`` whom (the app's user, a
        console login) and from where (``source``, for the audit log). A
        running run's owner aborts within about a second (pub/sub; heartbeat
        polling covers a missed message)."""
        result = self.deps.cancel(run_id, by=by)
        if result.action is not CancelAction.ENDED:  # an ended run: nothing was done
            detail = {"action": result.action.value}
            self.audit(AuditAction.CANCELLED, by=by, run_id=run_id, source=source, detail=detail)
        return result

    def decide(
        self,
        approval_id: str,
        approve: bool,
        reason: str | None = None,
        *,
        token: str | None = None,
        trusted: bool = False,
        by: str | None = None,
        arguments: dict[str, Any] | None = None,
        for_run: bool = False,
        fail_run: bool = False,
        source: str | None = None,
    ) -> Run:
        """Decide an approval, recording ``by`` whom (the app's user, "link")
        and from where (``source``, for the audit log: ``decided``, or
        ``edited`` with the names of the fields edited). With the last
        decision the run is queued again.

        ``reason``: on a denial, what the model is told (unless the agent ends
        the run on a denial: ``on_deny="fail"``). ``arguments``: approve the
        call with these arguments in place of the model's; they must fit the
        tool's schema (else :class:`InvalidApprovalInput`, and nothing is
        decided), and are recorded beside the model's. ``for_run``: approve
        the tool for the rest of the run: its later calls (and the run's other
        pending ones) are approved without asking, as decided by ``by``.
        ``fail_run`` (with ``approve=False``): deny the call and end the run
        failed, with ``reason``.

        A call whose tool changed since it was requested (:meth:`tool_change`)
        is approved only with arguments that fit the tool now, and one whose
        tool no longer exists only denied or its run failed (docs/approvals.md)."""
        result = decisions.decide(
            self.deps.store,
            self.deps.tokens,
            self.deps.registry,
            approval_id,
            approve,
            reason,
            token=token,
            trusted=trusted,
            by=by,
            arguments=arguments,
            for_run=for_run,
            fail_run=fail_run,
        )
        run = self._decided(result)
        action, detail = decision(result, fail_run=fail_run)
        self.audit(action, by=by, run_id=run.id, source=source, detail=detail)
        return run

    def answer(
        self,
        request_id: str,
        value: Any,
        *,
        token: str | None = None,
        trusted: bool = False,
        by: str | None = None,
        source: str | None = None,
    ) -> Run:
        """Answer the model's question (a request of kind ``input``: the agent's
        ``ask_human`` tool), recording ``by`` whom. ``value`` must fit the
        question's schema: text, or the agent's answer model (else
        :class:`InvalidApprovalInput`, and nothing is recorded). The answer is
        the call's result; with the run's last open request the run is queued
        again. ``token``/``trusted`` as for :meth:`decide`."""
        result = decisions.answer(
            self.deps.store,
            self.deps.tokens,
            request_id,
            value,
            token=token,
            trusted=trusted,
            by=by,
        )
        run = self._decided(result)
        detail = {"approval_id": result.approval.approval_id}  # not the answer itself
        self.audit(AuditAction.ANSWERED, by=by, run_id=run.id, source=source, detail=detail)
        return run

    def respond(self, approval_id: str, approve: bool, *args: Any, **kwargs: Any) -> Run:
        """Deprecated: :meth:`decide`."""
        retired("Engine.respond", "Engine.decide")
        return self.decide(approval_id, approve, *args, **kwargs)

    def _decided(self, result: DecisionResult) -> Run:
        observer = self.deps.observer
        for decided in (result.approval, *result.also):
            observer.approval_decided(result.run, decided)
        if result.ended is not None:  # a denial that ends the run
            observer.ended(result.run, 0.0)
            self.deps.after_end(result.ended)
        if result.resumed:
            self.deps.send([result.run.id])
        return result.run

    def standing_approvals(self, run_id: str) -> list[StandingApproval]:
        """The tools a person approved for the rest of the run
        (``decide(..., for_run=True)``), oldest first."""
        return self.deps.store.standing_approvals(run_id)

    def retry(
        self,
        run_id: str,
        *,
        extra_steps: int = 0,
        keep_standing: bool = False,
        by: str | None = None,
        source: str | None = None,
    ) -> Run:
        """Queue a failed or cancelled run again from its checkpoint, with
        ``extra_steps`` more in its step budget, and enqueue it; its outcome is
        kept as an attempt (:meth:`attempts`). A live run is returned as it is;
        a completed run raises :class:`InvalidTransition`. The tools people
        approved for the rest of the run (``decide(..., for_run=True)``) ask
        again, unless ``keep_standing``. ``by`` whom and from where
        (``source``) go to the audit log."""
        result = retry_fork.retry(
            self.deps, run_id, extra_steps=extra_steps, keep_standing=keep_standing
        )
        if result.retried:
            detail = {"extra_steps": extra_steps, "keep_standing": keep_standing}
            self.audit(AuditAction.RETRIED, by=by, run_id=run_id, source=source, detail=detail)
        return result.run

    def fork(
        self,
        run_id: str,
        at_step: int,
        *,
        agent: str | None = None,
        model: str | None = None,
        id: str | None = None,
        rerun_effects: bool = False,
        keep_standing: bool = False,
        by: str | None = None,
        source: str | None = None,
    ) -> Run:
        """Start a new run from ``run_id``'s history as it stood after step
        ``at_step``, of ``agent`` (default: the original's) on ``model``
        (default: the agent's), and enqueue it; its step budget starts afresh.
        The original is not written. Idempotent on ``id``, the fork's trigger id.
        The fork runs again what its model asks for after the step, effects
        included, under new idempotency keys that downstream deduplication does
        not know: if an effect ran after ``at_step``, it is refused
        (:class:`ForkRepeatsEffects` names them; nothing is written) unless
        ``rerun_effects=True``. The tools approved for the rest of the
        original run are not approved in the fork, unless ``keep_standing``.
        The audit log records the fork on the original run, ``by`` whom and
        from where (``source``)."""
        run = retry_fork.fork(
            self.deps,
            run_id,
            at_step,
            agent=agent,
            model=model,
            id=id,
            rerun_effects=rerun_effects,
            keep_standing=keep_standing,
        )
        detail = {
            "fork": run.id,
            "at_step": at_step,
            "agent": run.agent,
            "model": model,
            "rerun_effects": rerun_effects,
            "keep_standing": keep_standing,
        }
        self.audit(AuditAction.FORKED, by=by, run_id=run_id, source=source, detail=detail)
        return run

    # ------------------------------------------------------------ erasure

    def erase(
        self,
        run_ids: Sequence[str] | None = None,
        *,
        key: str | None = None,
        agent: str | None = None,
        by: str,
        source: str | None = None,
    ) -> erasure.ErasureReport:
        """Erase runs' payloads and keep their skeleton (ids, statuses, times,
        usage; store/pg/erasure.py says what goes): the runs ``run_ids``, or
        those whose trigger has ``key`` (``"customer=42"``, of ``agent`` if
        given), with their ended descendants. A run not ended is refused,
        with the reason. Each run erased gets an audit entry by ``by``, from
        ``source``. Bad input raises one error and changes nothing."""
        return erasure.erase(self.deps, run_ids=run_ids, key=key, agent=agent, by=by, source=source)

    # ------------------------------------------------------------ versions

    def versions_loaded(self) -> int:
        """This process loaded its agents (a worker starting): record their
        versions, and send the pinned runs waiting for a worker of one of
        them to that version's queue (docs/deploying.md). How many it sent."""
        return versioning.loaded(self.deps)

    def versions(self, agent: str | None = None) -> list[versioning.VersionLine]:
        """Each agent's versions (``agent``'s only, if given): the runs of each
        not ended (running, queued, parked, waiting) and the live workers
        that run it, so that an operator knows when an old one can stop."""
        return versioning.lines(self.deps, self.workers(), agent)

    def upgrade_runs(
        self,
        agent: str,
        old: str,
        new: str | None = None,
        *,
        by: str | None = None,
        source: str | None = None,
    ) -> versioning.UpgradeReport:
        """Move the runs of ``agent`` on version ``old`` that are not running
        to version ``new`` (its id, a prefix, or its label; default: the
        current one), one version event each; refuses, with the reason, a
        run waiting on a call whose tool ``new`` does not have. Each run
        moved is one entry in the audit log, ``by`` whom from ``source``."""
        report = versioning.upgrade(self.deps, self.workers(), agent, old, new, by=by)
        detail = {"agent": report.agent, "from": report.old, "to": report.new}
        for run_id in report.moved:
            self.audit(
                AuditAction.UPGRADED_RUNS, by=by, run_id=run_id, source=source, detail=detail
            )
        return report

    def workers(self) -> dict[str, WorkerInfo] | None:
        """The live workers by name, with what each serves (store/workers.py);
        None when this engine has no Redis, or Redis cannot be reached."""
        if self.leases is None:
            return None
        try:
            return self.leases.workers()
        except StoreUnavailable:
            return None

    def explain(self, run: Run) -> str | None:
        """Why ``run`` is queued, interrupted or waiting, in one sentence
        (runner/core/engine/explain.py); None for the other statuses."""
        from runner.core.engine.explain import explain

        children = self.children(run.id) if run.status is RunStatus.WAITING else []
        return explain(
            run,
            self.workers(),
            grace_seconds=self.settings.agent_grace_seconds,
            children=children,
        )

    def children(self, run_id: str) -> list[Run]:
        """The runs ``run_id``'s tool calls started (``Agent.as_tool``), oldest first."""
        return self.deps.store.children(run_id)

    def unknown_effects(self, run_id: str) -> list[Effect]:
        """The run's effects of unknown outcome (an execution died between
        starting one and recording its result), resolved or not."""
        return self.deps.store.unknown_effects(run_id)

    def resolve_effect(
        self,
        run_id: str,
        call_id: str,
        outcome: EffectOutcome | str,
        *,
        note: str | None = None,
        by: str | None = None,
        source: str | None = None,
    ) -> Effect:
        """Record what a person found an effect of unknown outcome did
        (``"done"`` or ``"not_done"``), with ``note`` and ``by`` whom (and
        from where, ``source``, for the audit log); the run's
        ``needs_attention`` clears with its last unresolved one."""
        effect = self.deps.store.resolve_effect(run_id, call_id, outcome, note=note, by=by)
        log.info(
            "run %s: effect %s resolved %s by %s",
            run_id,
            effect.key,
            effect.resolved_outcome,
            by or "someone unnamed",
        )
        outcome_name = None if effect.resolved_outcome is None else effect.resolved_outcome.value
        detail = {"call_id": call_id, "outcome": outcome_name}  # not the note
        self.audit(AuditAction.RESOLVED_EFFECT, by=by, run_id=run_id, source=source, detail=detail)
        return effect

    # ------------------------------------------------------------ audit

    def audit(
        self,
        action: AuditAction,
        *,
        by: str | None,
        run_id: str | None = None,
        source: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> int | None:
        """Append ``action`` of ``by`` (None: "unknown") from ``source`` to
        the audit log, after the action committed; the entry's id. An entry
        that cannot be appended is logged as an ERROR and the action stands
        (None then): it is done, and the log's gap is named in the logs."""
        return record(self.deps.store, action, by, run_id=run_id, source=source, detail=detail)

    def viewed_payloads(
        self,
        run_id: str | None,
        *,
        by: str | None,
        source: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> bool:
        """A person was shown ``run_id``'s payloads (its messages, tool
        arguments and results), or with no run, those ``detail`` names (an
        evaluation's cases): one ``viewed_payloads`` entry per person and
        run (or detail) per :data:`~runner.core.audit.VIEW_WINDOW_SECONDS`,
        counted in this process, so that a polling page does not flood the
        log. True if this view was recorded."""
        who = by or UNKNOWN_ACTOR
        seen = run_id if run_id is not None else json.dumps(detail or {}, sort_keys=True)
        if not self._views.claim(who, seen):
            return False
        entry = self.audit(
            AuditAction.VIEWED_PAYLOADS, by=who, run_id=run_id, source=source, detail=detail
        )
        if entry is None:
            self._views.release(who, seen)
            return False
        return True

    def audit_log(
        self, run_id: str | None = None, *, after: int = 0, limit: int = 1000
    ) -> list[AuditEntry]:
        """The audit log in order, after the entry ``after``, of ``run_id`` if given."""
        if run_id is not None:
            check_run_id(run_id)
        if after < 0 or limit < 1:
            raise InvalidInput("after must be 0 or more, and limit 1 or more")
        return self.deps.store.audit_entries(run_id=run_id, after=after, limit=limit)

    def verify_audit(self) -> AuditCheck:
        """Walk the audit log's hash chain: its first row that does not
        follow the one before (a row deleted, or altered, with SQL)."""
        return self.deps.store.verify_audit()

    def attempts(self, run_id: str) -> list[RunAttempt]:
        """A retried run's earlier attempts, oldest first."""
        return self.deps.store.attempts(run_id)

    def token(self, approval_id: str) -> str:
        """The token for an approval (what a notifier would put in a link)."""
        approval = self.deps.store.get_approval(approval_id)
        return self.deps.tokens.sign(approval.approval_id, approval.token_id)

    def check_token(self, approval_id: str, token: str) -> Approval:
        """The approval, if ``token`` is its token; else ApprovalError. For pages
        that show an approval's input only to the holder of its link."""
        approval = self.deps.store.get_approval(approval_id)
        if not self.deps.tokens.verify(approval.approval_id, approval.token_id, token):
            raise InvalidApprovalToken(f"the token is not valid for approval {approval_id}")
        return approval

    def tick(self, now: datetime | None = None) -> TickReport:
        """One round of housekeeping (what Celery beat runs): re-send due
        notifications, expire approvals, queue runs whose claims lapsed for a
        takeover, re-enqueue."""
        began = time.monotonic()
        report = tick(self.deps, now=now)
        self.deps.observer.tick(report, time.monotonic() - began)
        return report

    def drain(self, timeout: float | None = None) -> int:
        """Abort every execution in this process; they end ``interrupted`` and
        are enqueued again. Waits up to ``timeout`` (default: the drain setting)."""
        rt = runtime()
        count = rt.drain()
        deadline = time.monotonic() + (self.settings.drain_seconds if timeout is None else timeout)
        while rt.active() and time.monotonic() < deadline:
            time.sleep(0.02)
        return count

    # ------------------------------------------------------- internals

    def _ensure_listener(self) -> None:
        if self.leases is None or self._listener is not None:
            return
        with self._listener_lock:
            if self._listener is None:
                self._listener = CancelListener(
                    self.leases.redis, lambda run_id: runtime().abort(run_id, AbortReason.CANCEL)
                ).start()
