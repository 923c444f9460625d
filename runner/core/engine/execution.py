"""One execution of a run: claim, heartbeat, the step loop, end.

The steps are docs/concepts.md's ("Execution", "Step"). The execution reaches
the store through its journal (runner/core/journal.py, on Postgres:
runner/core/engine/pg_journal.py), which holds the claim and fences every write; a
refused write raises :class:`LeaseLostError` and the execution stops writing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from runner.core import appdb, faults, retry, versions
from runner.core.agent import Agent, limit_label
from runner.core.engine.deps import Deps
from runner.core.engine.pg_journal import NotClaimed, PgJournal
from runner.core.errors import (
    AgentNotFound,
    LeaseLostError,
    MCPUnavailable,
    ModelError,
    RunwrightError,
    StoreUnavailable,
)
from runner.core.journal import Journal, Start
from runner.core.limits.admission import Park
from runner.core.limits.limiter import CallTooLarge, Grant
from runner.core.runtime import in_io, runtime
from runner.core.steps.run_context import AbortReason, AbortSignal, RunContext
from runner.core.steps.step_loop import StepLoop
from store.models import (
    Ended,
    Interruption,
    Outcome,
    RetryWait,
    Run,
    RunError,
    RunStatus,
)
from store.rules import VERSION_CHANGED, cancel_outcome

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
        self.signal = AbortSignal(asyncio.get_running_loop())
        self.ended: Ended | None = None
        # The limits' grants this execution holds (its run's Concurrency and
        # max_running, its model call's), renewed by its heartbeat.
        self.held: list[Grant] = []
        # The store as this execution sees it (runner/core/journal.py), wrapped to
        # crash at the named fault points when a test armed one.
        self._pg = PgJournal(deps, run_id, self.owner, self.signal)
        self.journal: Journal = faults.wrap(self._pg)

    @property
    def not_claimed(self) -> NotClaimed | None:
        """Why the claim was refused, when it was."""
        return self._pg.not_claimed

    def abort(self, reason: AbortReason) -> None:
        self.signal.abort(reason)

    async def io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await in_io(fn, *args, **kwargs)

    async def run(self) -> Ended | None:
        rt = runtime()
        if rt.draining:
            # This worker is shutting down: hand the run to another one.
            await self.io(self.deps.enqueue_ids, [self.run_id])
            return None
        start = await self.journal.start()
        if start is None:
            return None
        run, fence = start.run, self.journal.fence
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
                await self.journal.close(self.ended)
                if self.ended is not None:
                    observer.ended(self.ended.run, time.monotonic() - began)

    async def _execute(self, run: Run, start: Start) -> Ended | None:
        agent: Agent | None = None
        try:
            try:
                agent = self.deps.registry.get(run.agent)
            except AgentNotFound as exc:
                self.ended = await self._agent_missing(exc)
                return self.ended
            self.ended = await self._run_agent(agent, run, start)
            return self.ended
        except LeaseLostError as exc:
            await self._lease_lost()
            await self._report(agent, exc)
            return None
        except StoreUnavailable as exc:
            # Not the run's fault: leave it to a takeover once the claim lapses.
            log.error("run %s stopped: %s", self.run_id, exc)
            await self._report(agent, exc)
            return None
        except Exception as exc:
            log.exception("run %s crashed", self.run_id)
            await self._report(agent, exc)
            self.ended = await self._end_crash(exc)
            return self.ended

    async def _lease_lost(self) -> None:
        current = None
        with contextlib.suppress(Exception):  # only for the log line
            claim = (await self.journal.run()).claim
            current = claim.epoch if claim is not None else None
        self.deps.observer.lease_lost(self.run_id, self.journal.fence.epoch, current)

    async def _run_agent(self, agent: Agent, run: Run, start: Start) -> Ended:
        if run.cancel_requested:
            return await self.end(abort_outcome(AbortReason.CANCEL))
        moved = await self._on_version(agent, run)
        if isinstance(moved, Ended):
            return moved
        run = moved
        start = dataclasses.replace(start, run=run)
        timer = None
        if agent.budget.timeout_ms:
            timer = asyncio.get_running_loop().call_later(
                agent.budget.timeout_ms / 1000, self.abort, AbortReason.TIMEOUT
            )
        slots: list[Grant] = []
        try:
            ctx = RunContext(run.id, agent.name, run.trigger, self.signal)
            loop = StepLoop(self, self.deps, agent, ctx, start)
            try:
                taken = await self._run_limits(agent, run)
                if taken is None:
                    return await self.end_aborted(agent)
                slots, self.held = taken, list(taken)
                return await loop.run()
            except (ModelError, MCPUnavailable) as exc:
                return await self._step_failed(agent, loop.retry, exc, run.model or agent.model)
            except Park as park:
                return await self._park(run, park)
            except CallTooLarge as exc:
                error = RunError("call_too_large", str(exc))
                return await self.end(Outcome(RunStatus.FAILED, error=error))
        finally:
            if timer is not None:
                timer.cancel()
            if slots:
                self.held = []
                admission = self.deps.admission
                assert admission is not None
                with contextlib.suppress(RunwrightError):
                    self.deps.wake(await asyncio.shield(admission.leave_run(slots)))

    async def _on_version(self, agent: Agent, run: Run) -> Run | Ended:
        """The run on this worker's version of its agent (docs/deploying.md):
        its first execution records the version; one on another version than
        the run last ran on does what the agent's ``on_new_version`` says:
        goes on, recording what changed ("continue"), waits for a worker of
        the run's version ("pin"), or ends the run ``version_changed`` ("fail")."""
        version = agent.current_version()
        if not self.deps.noted(version):
            with contextlib.suppress(StoreUnavailable):  # recorded by the next execution then
                await self.io(self.deps.note_version, version)
        if run.version == version.id:
            return run
        if run.version is None:
            await self.journal.record_version(version.id, None)
            return dataclasses.replace(run, version=version.id, started_version=version.id)
        earlier = await self.io(self.deps.store.agent_version, agent.name, run.version)
        changes = (
            versions.diff(earlier.definition, version.definition)
            if earlier is not None
            else [f"version {run.version} was not recorded: what changed is not known"]
        )
        policy = agent.on_new_version
        if policy == "pin":
            return await self._wait_for_version(agent, run.version)
        if policy == "fail":
            said = "; ".join(changes) or "no change of behaviour"
            error = RunError(
                VERSION_CHANGED,
                f"the run ran on version {run.version} of {agent.name} and this worker runs "
                f"{version.title} ({said}); `runwright retry {run.id}` starts it again on "
                "the new version",
            )
            return await self.end(Outcome(RunStatus.FAILED, error=error))
        log.info(
            "run %s: resumed on version %s of %s (it ran on %s): %s",
            self.run_id,
            version.title,
            agent.name,
            run.version,
            "; ".join(changes) or "no change of behaviour",
        )
        await self.journal.record_version(version.id, {"changes": changes})
        return dataclasses.replace(run, version=version.id)

    async def _wait_for_version(self, agent: Agent, wanted: str) -> Ended:
        """A pinned run that this worker's version may not run: back to the
        queue, parked for a worker of its own version (``version:agent:v``),
        holding no lease. Sent to that version's queue now if a live worker
        takes it; else it waits, looked at again every
        RUNWRIGHT_VERSION_RECHECK_SECONDS (tick() re-sends it), and a worker
        of its version that starts sends it at once. Never failed for it."""
        settings = self.deps.settings
        served = await self.io(self.deps.serves_version, agent.name, wanted)
        now = self.deps.clock.now()
        at = now if served else now + timedelta(seconds=settings.version_recheck_seconds)
        ended = await self.journal.park(versions.waiting_key(agent.name, wanted), at)
        if served:
            queue = versions.queue_for(settings.queue, wanted)
            await self.io(self.deps.send, [self.run_id], queue=queue)
            log.info(
                "run %s: pinned to version %s of %s; sent to %s",
                self.run_id,
                wanted,
                agent.name,
                queue,
            )
        else:
            log.warning(
                "run %s: pinned to version %s of %s, which no live worker runs; it waits "
                "for a worker of that version",
                self.run_id,
                wanted,
                agent.name,
            )
        return ended

    async def _run_limits(self, agent: Agent, run: Run) -> list[Grant] | None:
        """The run's own limits, taken before its first step (``Concurrency``
        above 1, ``max_running``): held by this execution, renewed with its
        heartbeat, given back when it ends. None if aborted while waiting;
        raises Park to park the run when they cannot be had soon."""
        admission = self.deps.admission
        limits = agent.run_limits(run.trigger)
        if admission is None or not limits:
            return []
        hold = 3 * self.deps.settings.lease_ttl_seconds
        return await admission.enter_run(limits, run, self._aborted_within, hold_seconds=hold)

    async def _aborted_within(self, seconds: float) -> bool:
        """Waits ``seconds`` on the engine's clock; True at once if aborted."""
        pause = asyncio.ensure_future(self.deps.clock.sleep(seconds))
        racers: set[asyncio.Future[Any]] = {pause, self.signal.fired()}
        await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
        if not pause.done():
            pause.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pause
        return self.signal.aborted

    async def _park(self, run: Run, park: Park) -> Ended:
        """The step's model call waits for its limit longer than a call waits
        in place: the run goes back to the queue until it may go, holding no
        lease and no worker thread, and is sent again then (tick() too, if
        that message is lost). Nothing of the step was journaled: the call is
        made once, when the run comes back."""
        # The key by its kind alone: a Concurrency key is a value of the trigger.
        log.info(
            "run %s: parked on %s until %s (%s)",
            self.run_id,
            limit_label(park.key),
            f"{park.at:%H:%M:%S}",
            park.reason.value,
        )
        ended = await self.journal.park(park.key, park.at)
        self.deps.observer.parked(ended.run, park.key, park.reason.value)
        wake = [run_id for run_id in park.wake if run_id != self.run_id]
        if wake:
            await self.io(self.deps.wake, wake)
        return ended

    async def _step_failed(
        self,
        agent: Agent,
        previous: RetryWait | None,
        exc: ModelError | MCPUnavailable,
        model_name: str,
    ) -> Ended:
        """A step could not run: its model call failed, or an MCP server it
        needs cannot be reached. A transient failure the retry policy still
        allows sends the run back to the queue until its next attempt, holding
        no worker thread meanwhile; otherwise the run fails with the error's
        code (``model_error``, ``mcp_unavailable``, ``mcp_auth``), with its
        attempts recorded. A 429 of a model under a limit is retried when that
        shared limit lets calls go again (what the provider asked for), not on
        the policy's own backoff; the policy still counts the attempts."""
        policy = agent.retry or self.deps.retry_policy
        cap = self.deps.settings.max_retry_after_seconds
        now = self.deps.clock.now()
        verdict = retry.next_wait(policy, previous, exc, now, max_retry_after=cap)
        wait = verdict.wait
        admission = self.deps.admission
        if (
            wait.at is not None
            and isinstance(exc, ModelError)
            and exc.rate_limited
            and admission is not None
            and admission.limit_for(model_name) is not None
        ):
            pause = min(exc.retry_after or 0.0, cap)
            wait = dataclasses.replace(wait, at=now + timedelta(seconds=pause))
        if wait.at is None:
            error = RunError(exc.code, verdict.gave_up or exc.message)
            return await self.journal.defer_retry(wait, error)
        log.warning(
            "run %s: step failed (attempt %d): %s; retrying at %s",
            self.run_id,
            wait.attempts,
            exc.message,
            f"{wait.at:%H:%M:%S}",
        )
        ended = await self.journal.defer_retry(wait)
        self.deps.observer.retry_scheduled(ended.run, wait)
        return ended

    async def _agent_missing(self, exc: AgentNotFound) -> Ended | None:
        """During a rolling deploy an old worker can claim a run of an agent
        that only new workers know: give the run back (tick() enqueues it again)
        rather than fail it, until the grace period since the first miss ends."""
        grace = self.deps.settings.agent_grace_seconds
        deferred = await self.journal.defer_missing_agent(grace)
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
        return await self.end(
            Outcome(
                RunStatus.FAILED,
                error=RunError(
                    "agent_not_found",
                    f"{exc.message} (no worker that knows it claimed the run within {grace:.0f} s)",
                ),
            )
        )

    async def _end_crash(self, exc: Exception) -> Ended | None:
        """Fail the run after an unexpected error. This write must not fail on
        what the error says: if the full message cannot be written, a bare one
        is, so the run never stays claimed by an execution that is gone."""
        messages = [f"{type(exc).__name__}: {exc}", f"{type(exc).__name__} (details in the log)"]
        for message in messages:
            try:
                return await self.end(
                    Outcome(RunStatus.FAILED, error=RunError("internal_error", message))
                )
            except (LeaseLostError, StoreUnavailable):
                return None
            except Exception:
                log.exception("run %s: recording the failure failed", self.run_id)
        return None

    async def end(self, outcome: Outcome) -> Ended:
        return await self.journal.end(outcome)

    async def end_aborted(self, agent: Agent) -> Ended:
        assert self.signal.reason is not None
        return await self.end(abort_outcome(self.signal.reason, timeout_ms=agent.budget.timeout_ms))

    async def _heartbeat(self) -> None:
        interval = self.deps.settings.lease_ttl_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                cancel_requested = await self.journal.heartbeat()
            except LeaseLostError:
                if await self._taken_over():
                    log.warning("run %s: the claim was lost; aborting", self.run_id)
                self.abort(AbortReason.LEASE_LOST)
                return
            except StoreUnavailable as exc:
                log.warning("heartbeat of run %s failed: %s", self.run_id, exc)
                continue
            if cancel_requested is None:
                return
            if cancel_requested:
                self.abort(AbortReason.CANCEL)
            if self.held and self.deps.admission is not None:
                hold = 3 * self.deps.settings.lease_ttl_seconds
                with contextlib.suppress(RunwrightError):  # the hold is the bound meanwhile
                    await self.deps.admission.renew(list(self.held), hold)

    async def _taken_over(self) -> bool:
        """Whether the claim is gone to another execution, rather than because
        a write of this one moved the run on (ended, paused, given back)
        while the heartbeat's renewal was in flight: only then is it news."""
        try:
            run = await self.journal.run()
        except StoreUnavailable:
            return True
        return run.status is RunStatus.RUNNING

    async def _report(self, agent: Agent | None, exc: BaseException) -> None:
        """The agent's ``on_error``, on a thread of the tool pool, as a sync
        tool runs: never on the loop, which it would hold for every run of
        the process (and where Django refuses its ORM: runner/core/appdb.py)."""
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
