"""One execution of a run: claim, heartbeat, the step loop, settle.

The steps are docs/concepts.md's ("Execution", "Step"). Every write goes
through :meth:`Execution.write`, which checks the Redis lease first and lets
the Postgres fence decide; a refused write raises :class:`LeaseLostError` and
the execution stops writing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from runner import appdb, retry
from runner.agent import Agent
from runner.engine.deps import Deps
from runner.engine.runtime import in_io, runtime
from runner.errors import (
    AgentNotFound,
    LeaseLostError,
    MCPUnavailable,
    ModelError,
    StoreUnavailable,
)
from runner.steps.run_context import AbortReason, AbortSignal, RunContext
from runner.steps.step_loop import StepLoop
from store.claims import Heartbeat, NotClaimed
from store.models import (
    Fence,
    Interruption,
    Outcome,
    RetryWait,
    Run,
    RunError,
    RunStatus,
    Settled,
)
from store.onloop import blocking, carry
from store.pg.runs import StartPoint
from store.rules import cancel_outcome

log = logging.getLogger(__name__)
T = TypeVar("T")

_HOST = socket.gethostname()


def new_owner() -> str:
    """Unique per execution, readable in ``runwright show``: host, pid, nonce."""
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def abort_outcome(reason: AbortReason, *, timeout_ms: int | None = None) -> Outcome:
    if reason is AbortReason.CANCEL:
        return cancel_outcome()
    if reason is AbortReason.DRAIN:
        return Outcome(RunStatus.INTERRUPTED, interruption=Interruption.DRAIN)
    if reason is AbortReason.TIMEOUT:
        return Outcome(
            RunStatus.FAILED,
            error=RunError("timeout", f"the execution ran past its timeout of {timeout_ms} ms"),
        )
    raise LeaseLostError("the lease was lost; the new owner carries the run on")


class Execution:
    def __init__(self, deps: Deps, run_id: str) -> None:
        self.deps = deps
        self.run_id = run_id
        self.owner = new_owner()
        self.fence: Fence | None = None
        self.signal = AbortSignal(asyncio.get_running_loop())
        self.settled: Settled | None = None
        # Why the claim was refused, when it was.
        self.not_claimed: NotClaimed | None = None
        self._claimed: tuple[Fence, Run] | None = None
        # Set once a write moved the run out of `running`: a heartbeat racing
        # with that write then finds the claim gone, and that is no loss.
        self.left_running = False
        # The lease is given up once, as soon as the run leaves `running`. The
        # lock keeps a heartbeat already in flight from renewing it after that.
        self._lease_lock = threading.Lock()
        self._lease_released = False

    def abort(self, reason: AbortReason) -> None:
        self.signal.abort(reason)

    async def io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await in_io(fn, *args, **kwargs)

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A fenced write: lease check, then the store call with the fence.

        Where the lease check answers from memory, the write goes to Postgres
        from the loop itself (``RUNWRIGHT_STORE_ON_LOOP``, store/onloop.py):
        no thread hand-off. Otherwise, and through an outage, it takes a
        thread of the I/O pool. An outage is waited out
        (:meth:`_through_outage`); a write whose commit was ambiguous is
        idempotent on retry.
        """
        fence = self.fence
        assert fence is not None
        if self.deps.store_on_loop and self.deps.claims.answers_from_memory(fence):
            try:
                result: T = await carry(self._checked, fn, fence, *args, **kwargs)
            except StoreUnavailable:
                pass  # waited out on the I/O pool below
            else:
                return result
        result = await self._through_outage(
            "commit a write", self._checked, fn, fence, *args, **kwargs
        )
        return result

    async def _through_outage(
        self,
        doing: str,
        fn: Callable[..., T],
        *args: Any,
        give_up: Callable[[], bool] = lambda: False,
        **kwargs: Any,
    ) -> T:
        """``fn`` on the I/O pool, with an outage of Redis or Postgres waited
        out: tried again with backoff for ``RUNWRIGHT_STORE_WAIT_SECONDS``
        (or until ``give_up()``), then its :class:`StoreUnavailable` is raised.
        One WARNING line per outage. The one rule for every store call of an
        execution: its claim and its fenced writes."""
        deadline = time.monotonic() + self.deps.store_wait_seconds
        delay = 0.1
        warned = False
        while True:
            try:
                return await self.io(fn, *args, **kwargs)
            except StoreUnavailable as exc:
                if time.monotonic() + delay > deadline or give_up():
                    raise
                if not warned:
                    log.warning(
                        "run %s: %s; the execution waits for it to %s (up to %.0f s)",
                        self.run_id,
                        exc.message,
                        doing,
                        self.deps.store_wait_seconds,
                    )
                    warned = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _claim(self) -> tuple[Fence, Run, StartPoint] | None:
        # Step 0 and step 1 in one hop to the I/O pool: claim, then the start
        # point. Tried again through an outage, keeping a claim it has made.
        if self._claimed is None:
            claimed = self.deps.claims.acquire_run(self.run_id, self.owner)
            if isinstance(claimed, Settled):
                # A takeover of a run that keeps killing its executions: the store
                # settled it failed/crashed instead; hand its key to the next run.
                self.deps.after_settle(claimed)
                self.deps.observer.settled(claimed.run, 0.0)
                return None
            if claimed is None:
                self.not_claimed = self.deps.claims.refusal(self.run_id)
                return None
            self._claimed = claimed
        fence, run = self._claimed
        try:
            return fence, run, self.deps.store.start_point(self.run_id)
        except StoreUnavailable:
            raise  # waited out, still claimed
        except BaseException:
            self.deps.claims.release(fence)
            raise

    def _release_unstarted(self) -> None:
        """Let go of a claim whose start point never loaded (the store stayed away)."""
        if self._claimed is not None:
            self.deps.claims.release(self._claimed[0])

    def _finish_left(self) -> bool:
        """Whether :meth:`_finish` has anything to do, which takes a thread: the
        lease is still held, or the settle hands something on. A run that
        completed let its lease go with its last write, so it takes none."""
        return not self._lease_released or (self.settled is not None and self.settled.hands_on)

    def _finish(self, fence: Fence) -> None:
        self._release(fence)  # unless a write let the run go already
        if self.settled is not None:
            self.deps.after_settle(self.settled)

    def _checked(self, fn: Callable[..., T], fence: Fence, *args: Any, **kwargs: Any) -> T:
        # One call, on a thread of the I/O pool or carried on the loop: the
        # lease check, the write, and letting the run go if the write moved
        # it out of `running` (Redis and the broker: on a thread).
        if self.signal.reason is AbortReason.LEASE_LOST:
            raise LeaseLostError(f"run {self.run_id} was taken over")
        self.deps.claims.check(fence)
        result = fn(fence, *args, **kwargs)
        if isinstance(result, Settled):
            blocking(runtime().calls, self._let_go, fence, result)
        return result

    def _let_go(self, fence: Fence, settled: Settled) -> None:
        """The run has left `running`: give up its lease now, not when this
        execution ends. After a pause that can be much later: the notifier
        runs after the step's commit and may take seconds (a webhook), and a decision's
        resume must not wait for it.

        A decision can still land between the write's commit and the release:
        its resume then found the lease taken and was dropped. So after a
        pause, look once more and send the run again if it is queued; a
        decision after this look finds the lease free. The store reads the
        paused run back after its commit, so a decision that came first is
        read as `queued` (not waiting for a retry): that run is looked at too."""
        self.left_running = True
        self._release(fence)
        run = settled.run
        if run.status is RunStatus.WAITING or (
            run.status is RunStatus.QUEUED and run.retry_at is None
        ):
            with contextlib.suppress(StoreUnavailable):  # then tick() re-enqueues it
                if self.deps.store.get_run(self.run_id).status is RunStatus.QUEUED:
                    self.deps.send([self.run_id])

    def _release(self, fence: Fence) -> None:
        with self._lease_lock:
            if not self._lease_released:
                self._lease_released = True
                self.deps.claims.release(fence)

    def _renew(self, fence: Fence) -> Heartbeat | None:
        """A heartbeat, unless the run was let go (None): a renewal must never
        re-create a lease that was given up, or the next claim is refused."""
        with self._lease_lock:
            if self._lease_released:
                return None
            return self.deps.claims.heartbeat(fence)

    async def run(self) -> Settled | None:
        rt = runtime()
        if rt.draining:
            # This worker is shutting down: hand the run to another one.
            await self.io(self.deps.enqueue_ids, [self.run_id])
            return None
        try:
            # A worker that is shutting down stops waiting: the message goes
            # back to the broker, for another worker.
            claimed = await self._through_outage(
                "claim the run", self._claim, give_up=lambda: rt.draining
            )
        except StoreUnavailable:
            await self.io(self._release_unstarted)
            raise
        if claimed is None:
            if self.not_claimed is not None:
                log.debug("%s; nothing to do here", self.not_claimed)
            return None
        fence, run, start = claimed
        self.fence = fence
        rt.add(self)
        observer = self.deps.observer
        began = time.monotonic()
        with observer.execution(run, fence, self.owner):
            if run.takeovers:
                observer.taken_over(run, fence.epoch - 1)
            heartbeat = asyncio.create_task(self._heartbeat(), name=f"heartbeat {self.run_id}")
            try:
                return await self._execute(run, start)
            finally:
                heartbeat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat
                rt.remove(self)
                if self._finish_left():
                    await self.io(self._finish, fence)
                if self.settled is not None:
                    observer.settled(self.settled.run, time.monotonic() - began)

    async def _execute(self, run: Run, start: StartPoint) -> Settled | None:
        agent: Agent | None = None
        try:
            try:
                agent = self.deps.registry.get(run.agent)
            except AgentNotFound as exc:
                self.settled = await self._agent_missing(exc)
                return self.settled
            self.settled = await self._run_agent(agent, run, start)
            return self.settled
        except LeaseLostError as exc:
            await self._lease_lost()
            await self._report(agent, exc)
            return None
        except StoreUnavailable as exc:
            # Not the run's fault: leave it to recovery once the claim lapses.
            log.error("run %s stopped: %s", self.run_id, exc)
            await self._report(agent, exc)
            return None
        except Exception as exc:
            log.exception("run %s crashed", self.run_id)
            await self._report(agent, exc)
            self.settled = await self._settle_crash(exc)
            return self.settled

    async def _lease_lost(self) -> None:
        assert self.fence is not None
        current = None
        with contextlib.suppress(Exception):  # only for the log line
            claim = (await self.io(self.deps.store.get_run, self.run_id)).claim
            current = claim.epoch if claim is not None else None
        self.deps.observer.lease_lost(self.run_id, self.fence.epoch, current)

    async def _run_agent(self, agent: Agent, run: Run, start: StartPoint) -> Settled:
        if run.cancel_requested:
            return await self.settle(abort_outcome(AbortReason.CANCEL))
        timer = None
        if agent.budget.timeout_ms:
            timer = asyncio.get_running_loop().call_later(
                agent.budget.timeout_ms / 1000, self.abort, AbortReason.TIMEOUT
            )
        try:
            ctx = RunContext(run.id, agent.name, run.trigger, self.signal)
            loop = StepLoop(self, agent, run, ctx, start)
            try:
                return await loop.run()
            except (ModelError, MCPUnavailable) as exc:
                return await self._step_failed(agent, loop.retry, exc)
        finally:
            if timer is not None:
                timer.cancel()

    async def _step_failed(
        self, agent: Agent, previous: RetryWait | None, exc: ModelError | MCPUnavailable
    ) -> Settled:
        """A step could not run: its model call failed, or an MCP server it
        needs cannot be reached. A transient failure the retry policy still
        allows sends the run back to the queue until its next attempt, holding
        no worker thread meanwhile; otherwise the run fails with the error's
        code (``model_error``, ``mcp_unavailable``, ``mcp_auth``), with its
        attempts recorded."""
        policy = agent.retry or self.deps.retry_policy
        cap = self.deps.settings.max_retry_after_seconds
        verdict = retry.next_wait(policy, previous, exc, self.deps.clock.now(), max_retry_after=cap)
        wait = verdict.wait
        if wait.at is None:
            error = RunError(exc.code, verdict.gave_up or exc.message)
            settled: Settled = await self.write(self.deps.store.defer_retry, wait, error)
            return settled
        log.warning(
            "run %s: step failed (attempt %d): %s; retrying at %s",
            self.run_id,
            wait.attempts,
            exc.message,
            f"{wait.at:%H:%M:%S}",
        )
        settled = await self.write(self.deps.store.defer_retry, wait)
        self.deps.observer.retry_scheduled(settled.run, wait)
        return settled

    async def _agent_missing(self, exc: AgentNotFound) -> Settled | None:
        """During a rolling deploy an old worker can claim a run of an agent
        that only new workers know: give the run back (tick() enqueues it again)
        rather than fail it, until the grace period since the first miss ends."""
        grace = self.deps.settings.agent_grace_seconds
        deferred = await self.write(self.deps.store.defer_missing_agent, grace)
        if deferred is not None:
            log.warning(
                "run %s: agent %r is not loaded in this worker; the run is left for a worker "
                "that has it (it fails if none has within %.0f s)",
                self.run_id,
                deferred.agent,
                grace,
            )
            return None
        log.error("run %s: %s", self.run_id, exc)
        return await self.settle(
            Outcome(
                RunStatus.FAILED,
                error=RunError(
                    "agent_not_found",
                    f"{exc.message} (no worker that knows it claimed the run within {grace:.0f} s)",
                ),
            )
        )

    async def _settle_crash(self, exc: Exception) -> Settled | None:
        """Fail the run after an unexpected error. This write must not fail on
        what the error says: if the full message cannot be written, a bare one
        is, so the run never stays claimed by an execution that is gone."""
        messages = [f"{type(exc).__name__}: {exc}", f"{type(exc).__name__} (details in the log)"]
        for message in messages:
            try:
                return await self.settle(
                    Outcome(RunStatus.FAILED, error=RunError("internal_error", message))
                )
            except (LeaseLostError, StoreUnavailable):
                return None
            except Exception:
                log.exception("run %s: recording the failure failed", self.run_id)
        return None

    async def settle(self, outcome: Outcome) -> Settled:
        settled: Settled = await self.write(self.deps.store.settle, outcome)
        return settled

    async def settle_aborted(self, agent: Agent) -> Settled:
        assert self.signal.reason is not None
        return await self.settle(
            abort_outcome(self.signal.reason, timeout_ms=agent.budget.timeout_ms)
        )

    async def _heartbeat(self) -> None:
        assert self.fence is not None
        interval = self.deps.claims.ttl_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                beat = await self.io(self._renew, self.fence)
            except LeaseLostError:
                if not self.left_running:
                    if await self._taken_over():
                        log.warning("run %s: the claim was lost; aborting", self.run_id)
                    self.abort(AbortReason.LEASE_LOST)
                return
            except StoreUnavailable as exc:
                log.warning("heartbeat of run %s failed: %s", self.run_id, exc)
                continue
            if beat is None:
                return
            if beat.cancel_requested:
                self.abort(AbortReason.CANCEL)

    async def _taken_over(self) -> bool:
        """Whether the claim is gone to another execution, rather than because
        a write of this one moved the run on (settled, paused, given back)
        while the heartbeat's renewal was in flight: only then is it news."""
        try:
            run = await self.io(self.deps.store.get_run, self.run_id)
        except StoreUnavailable:
            return True
        return run.status is RunStatus.RUNNING

    async def _report(self, agent: Agent | None, exc: BaseException) -> None:
        """The agent's ``on_error``, on a thread of the tool pool, as a sync
        tool runs: never on the loop, which it would hold for every run of
        the process (and where Django refuses its ORM: runner/appdb.py)."""
        if agent is None or agent.on_error is None:
            return
        loop = asyncio.get_running_loop()
        call = functools.partial(appdb.call, agent.on_error, self.run_id, exc)
        try:
            await loop.run_in_executor(
                self.deps.tool_executor, contextvars.copy_context().run, call
            )
        except Exception:
            log.exception("on_error of agent %s raised", agent.name)
