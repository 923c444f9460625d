"""What an execution and ``tick()`` need of the engine, handed to them explicitly.

:class:`Execution`, :class:`StepLoop` and ``tick()`` take a :class:`Deps`, never
the :class:`~runner.core.engine.engine.Engine`: the engine is the public façade built on one,
and the imports run one way (engine -> execution -> loop, engine -> tick, each
of them -> deps), so no module of the core needs the engine to work.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runner.core import versions
from runner.core.agent import Agent, Registry
from runner.core.approvals import decisions
from runner.core.approvals.approval_tokens import Tokens
from runner.core.clock import SYSTEM, Clock
from runner.core.coordination.claims import Claims
from runner.core.coordination.leases import Leases
from runner.core.deprecation import retired
from runner.core.errors import NotifierGone, RunwrightError
from runner.core.events.feed import Feed
from runner.core.limits.admission import Admission
from runner.core.limits.limiter import Limiter
from runner.core.limits.model_limits import ModelLimits, limits, tenant_weights
from runner.core.observe import Observer, Observers
from runner.core.observe.logs import LogObserver
from runner.core.retry import RetryPolicy
from runner.core.runtime import in_io, runtime
from runner.core.settings import Settings
from runner.core.steps.run_context import AbortReason
from runner.core.versions import AgentVersion, version_row
from store.errors import StoreUnavailable
from store.models import Ended, NewApproval, Run, RunStatus
from store.pg.approvals import CancelResult
from store.postgres import PostgresStore
from store.rules import CancelAction

log = logging.getLogger(__name__)

# Hands a run to a worker (Celery's ``apply_async``, a test's list.append, ...);
# what it returns is ignored. One that takes an ``eta`` keyword (a datetime)
# delivers a run at that time (see ``tasks.enqueue``); without it, a run that
# waits to retry is found by tick() once due.
Enqueue = Callable[[str], object]


# The versions this process recorded in each database (Deps.note_version).
_noted: set[tuple[str, str, str]] = set()

# How long a waiter under a limit keeps its place past its time (see _admission).
LIMIT_GRACE_SECONDS = 30.0


def _admission(leases: Leases | None, settings: Settings, clock: Clock) -> Admission | None:
    """Model limits for the executions: in the leases' Redis. Without Redis
    (an engine built by hand without leases) there is none: limits declared
    then are not enforced, which the log says once."""
    env = ModelLimits.from_json(settings.model_limits) if settings.model_limits else ModelLimits()
    if leases is None:
        if len(env) or len(limits):
            log.warning("model limits are declared but this engine has no Redis: not enforced")
        return None
    # A parked run's message can wait behind busy threads: its place in line
    # is kept well past the time it was told to come back.
    limiter = Limiter(leases.redis, grace_seconds=LIMIT_GRACE_SECONDS)
    return Admission(
        limiter,
        env,
        wait_seconds=settings.limit_wait_seconds,
        clock=clock,
        weights=tenant_weights(settings.tenant_weights),
    )


def takes(enqueue: Callable[..., object], keyword: str) -> bool:
    """Whether ``enqueue`` takes ``keyword`` (or any keyword)."""
    try:
        parameters = inspect.signature(enqueue).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in parameters)


def takes_eta(enqueue: Callable[..., object]) -> bool:
    return takes(enqueue, "eta")


@dataclass(frozen=True, slots=True)
class Deps:
    store: PostgresStore
    claims: Claims
    tokens: Tokens
    leases: Leases | None
    registry: Registry
    settings: Settings
    enqueue: Enqueue | None
    # The engine's defaults for model calls; an agent's own settings win.
    model_retries: int
    model_backoff_seconds: float
    # Durable retries of a failing model step; an agent's own policy wins.
    retry_policy: RetryPolicy
    # How long an execution waits out a store outage (its claim, a fenced write).
    store_wait_seconds: float
    # When a new approval's notification is first retried, if its notifier fails.
    notify_delay: timedelta
    # Who hears what the executions do (logs, traces, metrics: runner/observe).
    observer: Observer
    # The run-event feed: live wake-ups and token deltas (runner/core/events/feed.py).
    feed: Feed
    # Where the executions and tick() read the time (runner/core/clock.py).
    clock: Clock = SYSTEM
    # Fenced writes from the loop (RUNWRIGHT_STORE_ON_LOOP, PgJournal.write).
    store_on_loop: bool = False
    # Model calls admitted under their models' limits, in Redis
    # (runner/core/limits/admission.py); None without Redis.
    admission: Admission | None = None

    @classmethod
    def build(
        cls,
        store: PostgresStore,
        *,
        leases: Leases | None,
        enqueue: Enqueue | None,
        settings: Settings,
        registry: Registry,
        model_retries: int | None,
        model_backoff_seconds: float | None,
        retry_policy: RetryPolicy | None,
        store_wait_seconds: float | None,
        observers: Sequence[Observer],
        clock: Clock = SYSTEM,
    ) -> Deps:
        """What an engine is built with (see :class:`~runner.core.engine.engine.Engine`)."""
        feed = Feed(store, None if leases is None else leases.redis)
        return cls(
            store=store,
            claims=Claims(
                store,
                leases,
                settings.lease_ttl_seconds,
                max_takeovers=settings.max_takeovers,
                now=clock.for_store,
            ),
            tokens=Tokens.parse(settings.secret_key),
            leases=leases,
            registry=registry,
            settings=settings,
            enqueue=enqueue,
            # None: the settings' (RUNWRIGHT_MODEL_RETRIES, ..._BACKOFF_SECONDS).
            model_retries=settings.model_retries if model_retries is None else model_retries,
            model_backoff_seconds=(
                settings.model_backoff_seconds
                if model_backoff_seconds is None
                else model_backoff_seconds
            ),
            retry_policy=retry_policy or RetryPolicy.from_settings(settings),
            # None: the settings' (RUNWRIGHT_STORE_WAIT_SECONDS).
            store_wait_seconds=(
                settings.store_wait_seconds if store_wait_seconds is None else store_wait_seconds
            ),
            notify_delay=timedelta(seconds=settings.notify_backoff_seconds),
            observer=Observers([LogObserver(), *observers]),
            feed=feed,
            clock=clock,
            store_on_loop=settings.store_on_loop,
            admission=_admission(leases, settings, clock),
        )

    def wake(self, run_ids: Sequence[str]) -> None:
        """Send the parked runs among ``run_ids`` now: their turn has come
        under a limit, before the time they were parked until."""
        if not run_ids:
            return
        try:
            woken = self.store.wake_parked(list(run_ids))
        except StoreUnavailable as exc:  # they go at their time, or tick() sends them
            log.warning("could not wake parked runs %s (%s)", list(run_ids), exc)
            return
        self.send(woken)

    @property
    def tool_executor(self) -> Executor:
        """This process's tool pool (a new one after a fork)."""
        return runtime().tools

    def send(
        self, run_ids: Iterable[str], *, priority: int | None = None, queue: str | None = None
    ) -> None:
        """Hand runs to workers. A failed send is logged, not raised: the run is
        stored, marked unsent, and the next tick() sends it (once the broker is
        back, not RUNWRIGHT_REENQUEUE_SECONDS later). ``priority``: the runs',
        for an enqueue callable that takes it (the broker's order); ``queue``:
        another queue than Runwright's (a pinned version's), for one that
        takes it (else the run goes to Runwright's, whose worker passes it on)."""
        if self.enqueue is None:
            return
        extra: dict[str, Any] = (
            {}
            if priority is None or not takes(self.enqueue, "priority")
            else {"priority": priority}
        )
        if queue is not None and takes(self.enqueue, "queue"):
            extra["queue"] = queue
        unsent = []
        for run_id in run_ids:
            try:
                self.enqueue(run_id, **extra)
            except Exception as exc:
                log.warning("could not enqueue run %s (%s); tick() will retry", run_id, exc)
                unsent.append(run_id)
        if unsent:
            try:
                self.store.mark_unsent(unsent)
            except StoreUnavailable as exc:  # then tick() re-enqueues it later
                log.warning("could not mark runs %s unsent (%s)", unsent, exc)

    def send_at(self, run_id: str, at: datetime) -> None:
        """Hand a run to a worker at ``at`` (a run waiting to retry). If the
        enqueue callable cannot delay, or the message is lost, tick() enqueues
        the run RUNWRIGHT_REENQUEUE_SECONDS after ``at``."""
        if self.enqueue is None or not takes_eta(self.enqueue):
            return
        try:
            self.enqueue(run_id, eta=at)  # type: ignore[call-arg]
        except Exception as exc:
            log.warning("could not enqueue run %s for %s (%s); tick() will", run_id, at, exc)

    def cancel(self, run_id: str, *, by: str | None = None) -> CancelResult:
        """Cancel the run (``Engine.cancel``; a schedule's ``cancel_other``):
        ended now, or its execution, and its children's, told to stop."""
        parked = self._parked_on(run_id)
        result = self.store.request_cancel(run_id, by=by)
        if result.action is CancelAction.CANCELLED:
            self.observer.ended(result.run, 0.0)
            if parked is not None:
                self._withdraw(parked, run_id)
        # Its own execution, and its children's (runner/core/children.py), stop.
        stopping = [run_id] if result.action is CancelAction.REQUESTED else []
        for stop in [*stopping, *result.stopping]:
            runtime().abort(stop, AbortReason.CANCEL)
            if self.leases is not None:
                try:
                    self.leases.publish_cancel(stop)
                except StoreUnavailable as exc:
                    log.warning("cancel of %s not published (%s); heartbeat will see it", stop, exc)
        if result.action is CancelAction.CANCELLED:
            again = [result.next_in_key] if result.next_in_key else []
            self.send(again + list(result.resumed))  # a parent it let out of its wait
        return result

    def _parked_on(self, run_id: str) -> str | None:
        """The limit a run is parked on, if it is (and limits are in force)."""
        if self.admission is None:
            return None
        with contextlib.suppress(RunwrightError):
            return self.store.get_run(run_id).parked_key
        return None

    def _withdraw(self, key: str, run_id: str) -> None:
        """A parked run that was cancelled gives up its turn under ``key`` at
        once, so the waiter after it goes now, not after its grace."""
        assert self.admission is not None
        try:
            self.admission.limiter.withdraw(key, run_id)
            woken = self.admission.limiter.next_waiters(key)
        except StoreUnavailable as exc:  # its turn lapses after the limiter's grace
            log.warning("could not withdraw run %s from %s (%s)", run_id, key, exc)
            return
        self.wake([turn.waiter for turn in woken])

    def enqueue_ids(self, run_ids: list[str]) -> None:
        """Mark runs enqueued now and send them."""
        if not run_ids:
            return
        self.store.mark_enqueued(run_ids)
        self.send(run_ids)

    def after_end(self, ended: Ended) -> None:
        """Queue what the end of an execution (or of a run) freed: an
        interrupted run again, the next run of its concurrency key, and a
        parent it let out of its wait (the store queued that one already: it
        is only sent)."""
        run = ended.run
        again = [run.id] if run.status is RunStatus.INTERRUPTED else []
        if ended.next_in_key:
            again.append(ended.next_in_key)
        self.enqueue_ids(again)
        if ended.resumed:
            self.send(list(ended.resumed))
        if run.retry_at is not None:
            self.send_at(run.id, run.retry_at)
        elif run.parked_until is not None and versions.waiting_for(run.parked_key) is None:
            # (A run waiting for a worker of its version is sent to that
            # version's queue by the execution that parked it, if one is live.)
            self.send_at(run.id, run.parked_until)

    def serves_version(self, agent: str, version: str) -> bool:
        """Whether a live worker loaded ``agent`` at ``version`` (its record
        in Redis says so: store/workers.py)."""
        if self.leases is None:
            return False
        try:
            workers = self.leases.workers()
        except StoreUnavailable:
            return False
        return any(worker.serves_version(agent, version) for worker in workers.values())

    def noted(self, version: AgentVersion) -> bool:
        """Whether this process recorded ``version`` in its store already."""
        return (str(self.store.engine.url), version.agent, version.id) in _noted

    def note_version(self, version: AgentVersion) -> None:
        """Record a version this process runs (``agent_versions``), once."""
        if self.noted(version):
            return
        self.store.note_versions([version_row(version)])
        _noted.add((str(self.store.engine.url), version.agent, version.id))

    def after_settle(self, ended: Ended) -> None:
        """Deprecated: :meth:`after_end`."""
        retired("Deps.after_settle", "Deps.after_end")
        self.after_end(ended)

    async def notify_approvals(self, agent: Agent, run: Run, new: Sequence[NewApproval]) -> None:
        """First notification of the approvals a step just created."""
        if agent.notifier is None:
            return
        for item in new:
            approval = await in_io(self.store.get_approval, item.approval_id)
            request = decisions.request_for(
                agent, run.id, approval, self.tokens, root_run_id=run.root_id
            )
            try:
                await decisions.deliver(
                    agent.notifier, request, self.tool_executor, step=approval.step_index
                )
            except Exception as exc:
                log.warning(
                    "notifier of %s failed for %s: %s", agent.name, approval.approval_id, exc
                )
                self.observer.notification_failed(agent.name)
                # An endpoint that is gone gets no re-send (NULL: never due).
                retry_at = None
                if not isinstance(exc, NotifierGone):
                    retry_at = self.clock.now() + decisions.backoff(
                        1,
                        self.settings.notify_backoff_seconds,
                        self.settings.notify_backoff_cap_seconds,
                    )
                await in_io(
                    self.store.record_notification,
                    approval.approval_id,
                    accepted=False,
                    retry_at=retry_at,
                )
            else:
                await in_io(
                    self.store.record_notification,
                    approval.approval_id,
                    accepted=True,
                    retry_at=None,
                )
