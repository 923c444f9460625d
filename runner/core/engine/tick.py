"""``tick()``: the periodic housekeeping that Celery beat runs (docs/operations.md):
it fires the schedules that are due, re-sends approval notifications, expires
waits, queues runs whose claims lapsed for a takeover, re-enqueues lost messages, starts
the head of every free concurrency key and resumes stranded parents.

It is idempotent and safe to run twice at once: a Redis lock keeps two ticks
apart, and each job claims its rows with ``FOR UPDATE SKIP LOCKED`` or a
conditional write, so even without the lock no notification is sent twice and
no decision is recorded twice. Every job works in bounded batches over partial
indexes, so its cost follows the due work, not the size of the tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from runner.core.approvals import decisions
from runner.core.approvals.expiry import expiry_failure
from runner.core.coordination.leases import TICK_LOCK_KEY
from runner.core.engine.deps import Deps
from runner.core.errors import (
    AgentNotFound,
    ApprovalError,
    InvalidTransition,
    NotifierGone,
    StoreUnavailable,
)
from runner.core.observe import TickReport, logs
from runner.core.runtime import runtime
from runner.core.schedules import book as schedules
from runner.core.steps.history import approval_response
from store.models import Decision

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


Job = Callable[[Deps, TickReport, "datetime | None"], None]


def tick(deps: Deps, now: datetime | None = None) -> TickReport:
    """One round of the jobs, measured against ``now`` (default: the engine's
    clock for the store, which in production is Postgres's own)."""
    if now is None:
        now = deps.clock.for_store()
    token = uuid.uuid4().hex
    lock_ms = int(max(deps.settings.tick_seconds * 4, 30) * 1000)
    leases = deps.leases
    if leases is not None:
        try:
            if not leases.try_lock(TICK_LOCK_KEY, token, lock_ms):
                return TickReport(skipped=True)
        except StoreUnavailable:
            leases = None  # the jobs are safe without the lock
    try:
        report = TickReport()
        for job in _JOBS:
            # Each job on its own: a failing one (a bad row, a store outage
            # during one query) must not keep the others from their work.
            try:
                job(deps, report, now)
            except Exception:
                log.exception("tick job %s failed; the other jobs ran", job.__name__)
                report.failed_jobs.append(job.__name__.lstrip("_"))
        # What `runwright doctor`, the workers' beat watchdog and the metrics
        # read: Redis's mark first, and the store's once a Redis restart lost it.
        finished = time.time()
        with contextlib.suppress(StoreUnavailable):
            deps.store.mark_tick(datetime.fromtimestamp(finished, UTC))
        if deps.leases is not None:
            with contextlib.suppress(StoreUnavailable):
                deps.leases.mark_tick(finished)
        return report
    finally:
        if leases is not None:
            with contextlib.suppress(StoreUnavailable):
                leases.unlock(TICK_LOCK_KEY, token)


def _resend_notifications(deps: Deps, report: TickReport, now: datetime | None) -> None:
    settings = deps.settings
    due = deps.store.claim_due_notifications(
        settings.tick_batch,
        settings.notify_backoff_seconds,
        settings.notify_backoff_cap_seconds,
        now=now,
    )
    sends = []
    for item in due:
        try:
            agent = deps.registry.get(item.agent)
        except AgentNotFound:
            log.warning(
                "approval %s: agent %s is not loaded here", item.approval.approval_id, item.agent
            )
            continue
        if agent.notifier is None:
            continue
        try:
            run = deps.store.get_run(item.approval.run_id)
            request = decisions.request_for(
                agent, run.id, item.approval, deps.tokens, root_run_id=run.root_id
            )
        except Exception as exc:
            # Typically signed with a key that has since been removed: no valid
            # link can be made for it. The claim moved next_notify_at out by
            # the backoff, so it is retried rarely; its expiry still applies.
            log.warning("cannot re-send approval %s: %s", item.approval.approval_id, exc)
            report.item_errors += 1
            continue
        sends.append((item.approval, agent.notifier, request, agent.name))
    if not sends:
        return

    async def send_all() -> list[BaseException | None]:
        return await asyncio.gather(
            *(
                decisions.deliver(n, r, deps.tool_executor, step=a.step_index)
                for a, n, r, _ in sends
            ),
            return_exceptions=True,
        )

    # All at once: a slow webhook does not hold up the others.
    results = runtime().run(send_all())
    accepted = []
    for (approval, _, _, agent_name), result in zip(sends, results, strict=True):
        if isinstance(result, BaseException):
            # The claim already moved next_notify_at out by the backoff.
            with logs.bound(run_id=approval.run_id, agent=agent_name, step=approval.step_index):
                log.warning("re-sent notification for %s failed: %s", approval.approval_id, result)
            report.notify_failed += 1
            deps.observer.notification_failed(agent_name)
            if isinstance(result, NotifierGone):  # its endpoint wants no more: no re-send
                deps.store.record_notification(approval.approval_id, accepted=False, retry_at=None)
        else:
            accepted.append(approval.approval_id)
    deps.store.mark_notified(accepted)
    report.notified += len(accepted)


def _expire_waits(deps: Deps, report: TickReport, now: datetime | None) -> None:
    for approval in deps.store.expired_approvals(deps.settings.tick_batch, now=now):
        try:
            if approval.on_expire == "fail":
                ended = deps.store.fail_waiting(approval.run_id, expiry_failure(approval))
                deps.after_end(ended)
                deps.observer.ended(ended.run, 0.0)
            else:
                result = deps.store.decide(
                    approval.approval_id,
                    Decision.DENIED,
                    "expired",
                    approval_response,
                    allow_expired=True,
                    now=now,
                )
                deps.observer.approval_decided(result.run, result.approval)
                if result.resumed:
                    deps.send([result.run.id])  # decide() marked it enqueued
            report.expired += 1
        except (ApprovalError, InvalidTransition) as exc:
            log.info("approval %s changed meanwhile: %s", approval.approval_id, exc)
        except StoreUnavailable:
            raise  # the store is gone for every item: the job fails, the others try
        except Exception:
            log.exception("could not expire approval %s", approval.approval_id)
            report.item_errors += 1


def _queue_lapsed(deps: Deps, report: TickReport, now: datetime | None) -> None:
    settings = deps.settings
    lapsed = deps.store.lapsed_claims(settings.tick_batch, settings.reenqueue_seconds, now=now)
    if not lapsed:
        return
    if deps.leases is not None:
        try:
            # A live lease means the owner is alive, only its heartbeat to
            # Postgres is late: leave the run alone.
            lapsed = sorted(deps.leases.lapsed(lapsed))
        except StoreUnavailable:
            return  # cannot tell who is alive: try next time
    deps.enqueue_ids(lapsed)
    report.lapsed = lapsed


def _reenqueue(deps: Deps, report: TickReport, now: datetime | None) -> None:
    settings = deps.settings
    stale = deps.store.stale_claimable(settings.tick_batch, settings.reenqueue_seconds, now=now)
    # The query already marked these runs enqueued.
    deps.send(stale)
    report.reenqueued = stale


def _start_key_heads(deps: Deps, report: TickReport, now: datetime | None) -> None:
    settings = deps.settings
    heads = deps.store.free_key_heads(settings.tick_batch, settings.reenqueue_seconds, now=now)
    # The query already marked these runs enqueued.
    deps.send(heads)
    report.key_heads = heads


def _resume_parents(deps: Deps, report: TickReport, now: datetime | None) -> None:
    """Parents whose children all ended while nothing resumed them (the
    wake-up after the last child's end was lost): queued again and sent."""
    resumed = deps.store.resume_stranded_parents(deps.settings.tick_batch, 0.0, now=now)
    report.resumed += resumed
    deps.send(resumed)


def _fire_schedules(deps: Deps, report: TickReport, now: datetime | None) -> None:
    """The schedules that are due (runner/core/schedules/): each firing recorded
    once, with its run, or why it has none."""
    fired = schedules.fire(deps, now)
    report.firings += len(fired.firings)
    report.fired += fired.started


# The schedules fire last: the runs they start are sent as they start, and
# the jobs before them (the re-enqueue's "queued too long") never see them.
_JOBS: tuple[Job, ...] = (
    _resend_notifications,
    _expire_waits,
    _queue_lapsed,
    _reenqueue,
    _start_key_heads,
    _resume_parents,
    _fire_schedules,
)
