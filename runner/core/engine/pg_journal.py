"""The journal port (runner/core/journal.py) on Postgres, with the Redis lease when
there is one: the claim, the lease and every fenced write of one execution.

Every write checks the lease first and lets the Postgres fence decide; a
refused write raises :class:`LeaseLostError` and the execution stops writing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from runner.core.coordination.claims import Heartbeat
from runner.core.coordination.claims import (
    NotClaimed as NotClaimed,
)  # what Execution.not_claimed says
from runner.core.engine.deps import Deps
from runner.core.errors import LeaseLostError, StoreUnavailable
from runner.core.journal import Start
from runner.core.runtime import in_io, runtime
from runner.core.steps.run_context import AbortReason, AbortSignal
from store.models import (
    Admission,
    Approval,
    Effect,
    EffectBegin,
    Ended,
    Fence,
    NewChild,
    Outcome,
    RetryWait,
    Run,
    RunAttempt,
    RunError,
    RunStatus,
    StandingApproval,
    Step,
    StepCommit,
    StepRecord,
    ThreadStart,
)
from store.onloop import blocking, carry

log = logging.getLogger(__name__)
T = TypeVar("T")


class PgJournal:
    """One execution's :class:`~runner.core.journal.Journal`, claimed as ``owner``.

    ``signal``: the execution's abort signal; once it says the lease was lost,
    no write is tried."""

    def __init__(self, deps: Deps, run_id: str, owner: str, signal: AbortSignal) -> None:
        self.deps = deps
        self.store = deps.store
        self.run_id = run_id
        self.owner = owner
        self.signal = signal
        self._fence: Fence | None = None
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
        # A step's commit still in flight (commit_step_soon): every later
        # operation but the heartbeat waits for it first.
        self._pending: asyncio.Future[Any] | None = None

    @property
    def fence(self) -> Fence:
        assert self._fence is not None, "the journal is read after start()"
        return self._fence

    async def io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await in_io(fn, *args, **kwargs)

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A read of the run, after the commit in flight (it may read what that wrote)."""
        await self.caught_up()
        return await in_io(fn, *args, **kwargs)

    async def caught_up(self) -> None:
        """Wait for the step's commit in flight, if any: raises what it raised
        (a lost lease), to every caller until it is done."""
        pending = self._pending
        if pending is None:
            return
        try:
            await asyncio.shield(pending)
        finally:
            if pending.done() and self._pending is pending:
                self._pending = None

    # ------------------------------------------------------ the claim

    async def start(self) -> Start | None:
        rt = runtime()
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
        self._fence, start = claimed
        return start

    def _claim(self) -> tuple[Fence, Start] | None:
        # Step 0 and step 1 in one hop to the I/O pool: claim, then the start
        # point. Tried again through an outage, keeping a claim it has made.
        if self._claimed is None:
            claimed = self.deps.claims.acquire_run(self.run_id, self.owner)
            if isinstance(claimed, Ended):
                # A takeover of a run that keeps killing its executions: the store
                # ended it failed/crashed instead; hand its key to the next run.
                self.deps.after_end(claimed)
                self.deps.observer.ended(claimed.run, 0.0)
                return None
            if claimed is None:
                self.not_claimed = self.deps.claims.refusal(self.run_id)
                return None
            self._claimed = claimed
        fence, run = self._claimed
        try:
            point = self.store.start_point(self.run_id)
        except StoreUnavailable:
            raise  # waited out, still claimed
        except BaseException:
            self.deps.claims.release(fence)
            raise
        return fence, Start(run, point.checkpoint, point.journaled)

    def _release_unstarted(self) -> None:
        """Let go of a claim whose start point never loaded (the store stayed away)."""
        if self._claimed is not None:
            self.deps.claims.release(self._claimed[0])

    async def heartbeat(self) -> bool | None:
        try:
            beat = await self.io(self._renew, self.fence)
        except LeaseLostError:
            if self.left_running:
                return None  # a write of this execution moved the run on meanwhile
            raise
        return None if beat is None else beat.cancel_requested

    def _renew(self, fence: Fence) -> Heartbeat | None:
        """A heartbeat, unless the run was let go (None): a renewal must never
        re-create a lease that was given up, or the next claim is refused."""
        with self._lease_lock:
            if self._lease_released:
                return None
            return self.deps.claims.heartbeat(fence)

    async def close(self, ended: Ended | None) -> None:
        if self._pending is not None:
            # The execution stopped on an error while a commit was in flight:
            # that commit ends before the lease goes. What it raised is the
            # execution's to report, not the close's.
            with contextlib.suppress(Exception):
                await self.caught_up()
        # A run that completed let its lease go with its last write, and an
        # end that hands nothing on needs no thread either.
        if not self._lease_released or (ended is not None and ended.hands_on):
            await self.io(self._finish, self.fence, ended)

    def _finish(self, fence: Fence, ended: Ended | None) -> None:
        self._release(fence)  # unless a write let the run go already
        if ended is not None:
            self.deps.after_end(ended)

    def _release(self, fence: Fence) -> None:
        with self._lease_lock:
            if not self._lease_released:
                self._lease_released = True
                self.deps.claims.release(fence)

    # ------------------------------------------------------ fenced writes

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A fenced write: lease check, then the store call with the fence.

        Where the lease check answers from memory, the write goes to Postgres
        from the loop itself (``RUNWRIGHT_STORE_ON_LOOP``, store/onloop.py):
        no thread hand-off. Otherwise, and through an outage, it takes a
        thread of the I/O pool. An outage is waited out
        (:meth:`_through_outage`); a write whose commit was ambiguous is
        idempotent on retry.
        """
        await self.caught_up()
        return await self._write(fn, *args, **kwargs)

    async def _write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        fence = self.fence
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

    def _checked(self, fn: Callable[..., T], fence: Fence, *args: Any, **kwargs: Any) -> T:
        # One call, on a thread of the I/O pool or carried on the loop: the
        # lease check, the write, and letting the run go if the write moved
        # it out of `running` (Redis and the broker: on a thread).
        if self.signal.reason is AbortReason.LEASE_LOST:
            raise LeaseLostError(f"run {self.run_id} was taken over")
        self.deps.claims.check(fence)
        result = fn(fence, *args, **kwargs)
        if isinstance(result, Ended):
            blocking(runtime().calls, self._let_go, fence, result)
        return result

    def _let_go(self, fence: Fence, ended: Ended) -> None:
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
        run = ended.run
        if run.status is RunStatus.WAITING or (
            run.status is RunStatus.QUEUED and run.retry_at is None and run.parked_until is None
        ):
            with contextlib.suppress(StoreUnavailable):  # then tick() re-enqueues it
                if self.store.get_run(self.run_id).status is RunStatus.QUEUED:
                    self.deps.send([self.run_id])

    async def admit(self, run: Run, tokens: int, *, now: datetime | None) -> Admission:
        return await self.write(self.store.admit, run, tokens, now=now)

    async def record_model_step(
        self, record: StepRecord, *, rolls_up: bool, soon: bool = False
    ) -> bool:
        if not soon:
            return await self.write(self.store.record_llm_step, record, rolls_up=rolls_up)
        await self.caught_up()
        self._pending = asyncio.ensure_future(self._record_soon(record, rolls_up))
        return True

    async def _record_soon(self, record: StepRecord, rolls_up: bool) -> None:
        """The journal write in flight. Found written already, it must be this
        execution's own (a write retried through an outage): a reply another
        execution journaled means this one lost the run."""
        if await self._write(self.store.record_llm_step, record, rolls_up=rolls_up):
            return
        found = await self.io(self.store.llm_step, self.run_id, record.index)
        if found is None or found.output != record.output:
            raise LeaseLostError(
                f"run {self.run_id}: step {record.index} was journaled by another execution"
            )

    async def start_children(self, children: list[NewChild]) -> list[Run]:
        return await self.write(self.store.start_children, children)

    async def commit_step(self, commit: StepCommit, *, soon: bool = False) -> Ended | None:
        if not soon:
            return await self.write(self.store.commit_step, commit)
        await self.caught_up()
        self._pending = asyncio.ensure_future(self._write(self.store.commit_step, commit))
        return None

    async def begin_effect(
        self, key: str, tool: str, input: Any, *, rerun_started: bool, version: str | None = None
    ) -> EffectBegin:
        return await self.write(
            self.store.begin_effect, key, tool, input, rerun_started=rerun_started, version=version
        )

    async def finish_effect(
        self, key: str, *, output: Any = None, error: str | None = None
    ) -> Effect:
        return await self.write(self.store.finish_effect, key, output=output, error=error)

    async def mark_unknown(self, key: str) -> Effect:
        return await self.write(self.store.mark_effect_unknown, key)

    async def withdraw_effect(self, key: str) -> bool:
        return await self.write(self.store.withdraw_effect, key)

    async def end(self, outcome: Outcome) -> Ended:
        return await self.write(self.store.end, outcome)

    async def defer_retry(self, wait: RetryWait, error: RunError | None = None) -> Ended:
        return await self.write(self.store.defer_retry, wait, error)

    async def park(self, key: str, at: datetime) -> Ended:
        return await self.write(self.store.park, key, at)

    async def defer_missing_agent(self, grace_seconds: float) -> Run | None:
        return await self.write(self.store.defer_missing_agent, grace_seconds)

    async def record_version(self, version: str, change: dict[str, Any] | None) -> None:
        await self.write(self.store.record_version, version, change)

    # ------------------------------------------------------ reads

    async def run(self) -> Run:
        return await self.read(self.store.get_run, self.run_id)

    async def model_step(self, index: int) -> Step | None:
        return await self.read(self.store.llm_step, self.run_id, index)

    async def effects(self, call_ids: list[str]) -> dict[str, Effect]:
        return await self.read(self.store.journaled_effects, self.run_id, call_ids)

    async def thread_start(self, thread: str) -> ThreadStart | None:
        return await self.read(self.store.thread_start, thread, self.run_id)

    async def mcp_listing(self) -> dict[str, Any] | None:
        return await self.read(self.store.mcp_listing, self.run_id)

    async def approval(self, approval_id: str) -> Approval:
        return await self.read(self.store.get_approval, approval_id)

    async def standing_approvals(self) -> list[StandingApproval]:
        return await self.read(self.store.standing_approvals, self.run_id)

    async def children(self) -> list[Run]:
        return await self.read(self.store.children, self.run_id)

    async def attempts(self) -> list[RunAttempt]:
        return await self.read(self.store.attempts, self.run_id)
