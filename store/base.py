"""The narrow store interface, implemented by ``PostgresStore``.

Methods taking a :class:`Fence` are the writes of a running run: each is
conditional on ``claim_owner``, ``claim_epoch`` and ``status = 'running'`` and
raises :class:`LeaseLostError` (writing nothing) when the condition fails.

Methods taking ``now`` use it as the current time when given (tests move time
that way); otherwise the database clock, so that workers with skewed clocks
agree on claim expiry.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from store.errors import (
    ApprovalAlreadyDecided,
    ApprovalExpired,
    InvalidApprovalId,
    InvalidInput,
    RunNotFound,
    RunNotWaiting,
)
from store.events import RunEvent
from store.models import (
    Approval,
    Checkpoint,
    Decision,
    DueNotification,
    Effect,
    Fence,
    Message,
    NewRun,
    Outcome,
    RetryWait,
    Run,
    RunAttempt,
    RunError,
    RunStatus,
    Settled,
    Step,
    StepCommit,
    StepRecord,
)
from store.rules import CancelAction
from store.validate import check_new_run


@dataclass(frozen=True)
class EffectBegin:
    """The journal's answer to "may I run this effect?"."""

    effect: Effect
    execute: bool


@dataclass(frozen=True)
class CancelResult:
    run: Run
    action: CancelAction
    next_in_key: str | None = None


@dataclass(frozen=True)
class RetryResult:
    run: Run
    retried: bool


@dataclass(frozen=True)
class DecisionResult:
    approval: Approval
    run: Run
    resumed: bool


@dataclass(frozen=True)
class StartPoint:
    """Where an execution starts: the checkpoint, and the next step's llm row if
    a process journaled it (W1) but died before its W2."""

    checkpoint: Checkpoint | None
    journaled: Step | None


@dataclass(frozen=True)
class RunContext:
    """A run as a person judges what it asks: the run, the messages of its
    checkpoint (none before its first step) and its approvals."""

    run: Run
    messages: list[Message]
    approvals: list[Approval]


@dataclass(frozen=True)
class ThreadStart:
    run_id: str
    messages: list[Message]
    state: object


def check_payload(new: NewRun, limit: int) -> None:
    """Refuse a trigger that is not storable JSON text or exceeds ``limit``
    bytes (``store/validate.py``). Every write of a new run calls this first."""
    check_new_run(new, limit)


def check_decidable(
    approval: Approval, run_status: RunStatus, now: datetime, allow_expired: bool
) -> None:
    """Raise an ApprovalError subclass unless ``approval`` can take a decision now."""
    if approval.decision is not None and approval.decision is not Decision.WITHDRAWN:
        raise ApprovalAlreadyDecided(
            f"approval {approval.approval_id} was already {approval.decision.value}"
            f" at {approval.decided_at:%Y-%m-%d %H:%M:%S %Z}"
        )
    if approval.decision is Decision.WITHDRAWN or run_status is not RunStatus.WAITING:
        raise RunNotWaiting(
            f"run {approval.run_id} is {run_status.value}; approval {approval.approval_id} "
            "can no longer be decided"
        )
    if not allow_expired and approval.expires_at <= now:
        raise ApprovalExpired(
            f"approval {approval.approval_id} expired at {approval.expires_at:%Y-%m-%d %H:%M:%S %Z}"
        )


# Runwright writes every id as a lowercase, hyphenated UUID, and only that
# spelling is accepted. uuid.UUID() would also take "urn:uuid:...", braces,
# uppercase, no hyphens, "_" and non-ASCII digits; one spelling per id keeps
# lookups, logs and links in agreement and keeps odd text away from the driver.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_canonical_id(value: object) -> bool:
    """True if ``value`` is an id as Runwright writes it (a lowercase UUID)."""
    return isinstance(value, str) and _CANONICAL_UUID.fullmatch(value) is not None


def shown_id(value: object) -> str:
    """``value`` for an error message: quoted, escaped, and cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_run_id(run_id: str) -> str:
    """Run ids are UUIDs; anything else cannot name a run."""
    if not is_canonical_id(run_id):
        raise RunNotFound(f"no run with id {shown_id(run_id)}")
    return run_id


def check_page_from(run_id: str | None) -> str | None:
    """A page's starting point (``before``): a run id, as Runwright writes them."""
    if run_id is not None and not is_canonical_id(run_id):
        raise InvalidInput(f"before must be a run id, not {shown_id(run_id)}")
    return run_id


def check_approval_id(approval_id: str) -> str:
    """Approval ids are UUIDs; anything else cannot name an approval."""
    if not is_canonical_id(approval_id):
        raise InvalidApprovalId(f"no approval with id {shown_id(approval_id)}")
    return approval_id


class Store(Protocol):
    max_payload_bytes: int

    # ------------------------------------------------------------------ runs
    def create_run(self, new: NewRun) -> tuple[Run, bool]:
        """Create the run, or return the existing one with the same trigger id
        for that agent. The bool says whether it was created."""
        ...

    def get_run(self, run_id: str) -> Run: ...

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        agent: str | None = None,
        thread: str | None = None,
        limit: int = 50,
        before: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[Run]:
        """Newest first; ``before`` (a run id) pages to older runs, ``since``
        and ``until`` bound ``created_at``."""
        ...

    def run_counts(self, agent: str | None = None) -> dict[RunStatus, int]:
        """How many runs there are in each status (of ``agent``)."""
        ...

    def steps(self, run_id: str) -> list[Step]: ...

    def events(self, run_id: str, after: int | None = None, limit: int = 1000) -> list[RunEvent]:
        """The run's durable events with an id above ``after``, in id order
        (store/events.py), at most ``limit``; RunNotFound if there is no run."""
        ...

    def llm_step(self, run_id: str, index: int) -> Step | None: ...

    def checkpoint(self, run_id: str) -> Checkpoint | None: ...

    def start_point(self, run_id: str) -> StartPoint: ...

    def effect(self, run_id: str, key: str) -> Effect | None: ...

    def thread_start(self, thread: str, before_run_id: str) -> ThreadStart | None:
        """The latest settled run on ``thread`` older than ``before_run_id``."""
        ...

    # ---------------------------------------------------------------- claims
    def claim_run(
        self, run_id: str, owner: str, ttl_seconds: float, *, max_takeovers: int | None = None
    ) -> Run | Settled | None:
        """Move the run to ``running`` with ``claim_epoch + 1`` and return it;
        None if it is not claimable. When the claim is a takeover that the
        takeover limit (``max_takeovers``, ``store/queries/execution.py``)
        refuses, the run settled ``failed/crashed`` instead (the caller
        enqueues ``next_in_key``)."""
        ...

    def renew(self, fence: Fence, ttl_seconds: float) -> bool:
        """Extend the claim; returns ``cancel_requested``."""
        ...

    # -------------------------------------------------------- fenced writes
    def record_llm_step(self, fence: Fence, step: StepRecord) -> bool:
        """W1. False if the step was already recorded (its usage is not added twice)."""
        ...

    def commit_step(self, fence: Fence, commit: StepCommit) -> Settled | None:
        """W2. Returns :class:`Settled` when ``commit.outcome`` or approvals moved the run."""
        ...

    def settle(self, fence: Fence, outcome: Outcome) -> Settled: ...

    def defer_missing_agent(self, fence: Fence, grace_seconds: float) -> Run | None:
        """Give back a run whose agent this process does not know: ``interrupted``,
        claim released, re-enqueued by ``tick()``; the first such time is
        remembered. None (nothing written) once ``grace_seconds`` have passed
        since that first time: the caller fails the run."""
        ...

    def defer_retry(self, fence: Fence, wait: RetryWait, error: RunError | None = None) -> Settled:
        """Give back a run whose model step failed transiently and may be tried
        again: ``queued``, claim released, not claimable before ``wait.at``,
        with the attempts and the error recorded (``Run.retry``). Progress (the
        next W1 that records a step) clears them. With ``error`` (the retry
        policy is exhausted), the run settles ``failed`` with it instead, the
        attempts recorded all the same."""
        ...

    def begin_effect(
        self, fence: Fence, key: str, tool: str, input: object, *, rerun_started: bool
    ) -> EffectBegin: ...

    def finish_effect(
        self, fence: Fence, key: str, *, output: object = None, error: str | None = None
    ) -> Effect: ...

    # ------------------------------------------------------- other processes
    def request_cancel(self, run_id: str) -> CancelResult: ...

    def retry_run(self, run_id: str, extra_steps: int = 0) -> RetryResult:
        """Queue a ``failed`` or ``cancelled`` run again, from its checkpoint,
        keeping its outcome as an attempt (:meth:`attempts`) and adding
        ``extra_steps`` to its budget. A run that is live already (queued,
        running, waiting, interrupted) is returned unchanged with
        ``retried=False``; a completed run raises :class:`InvalidTransition`."""
        ...

    def attempts(self, run_id: str) -> list[RunAttempt]:
        """The run's earlier attempts, oldest first (empty if never retried)."""
        ...

    def fork_run(
        self,
        run_id: str,
        at_step: int,
        new: NewRun,
        *,
        model: str | None,
        rerun_effects: bool = False,
    ) -> Run:
        """A new ``queued`` run ``new`` whose history is the one of ``run_id``
        as it stood after step ``at_step``; the original is not written.
        Effects that ran after that step refuse it (:class:`ForkRepeatsEffects`)
        unless ``rerun_effects``."""
        ...

    def approvals(self, run_id: str) -> list[Approval]: ...

    def pending_approvals(self, limit: int = 50, agent: str | None = None) -> list[Approval]:
        """Undecided approvals of waiting runs, oldest first."""
        ...

    def run_contexts(self, run_ids: Sequence[str]) -> dict[str, RunContext]:
        """The context of each run named (ids that name no run are left out),
        read in one transaction: the inbox's one read for all its runs."""
        ...

    def get_approval(self, approval_id: str) -> Approval: ...

    def decide(
        self,
        approval_id: str,
        decision: Decision,
        reason: str | None,
        response: Message,
        *,
        allow_expired: bool = False,
        now: datetime | None = None,
        by: str | None = None,
    ) -> DecisionResult:
        """Record a decision once, and ``by`` whom; append ``response`` to the checkpoint at the
        same step index; when none is pending any more, queue the run."""
        ...

    def fail_waiting(self, run_id: str, error: RunError) -> Settled: ...

    def record_notification(
        self, approval_id: str, *, accepted: bool, retry_at: datetime | None
    ) -> None:
        """The execution's own first notification attempt and its result."""
        ...

    def mark_notified(self, approval_ids: list[str]) -> None:
        """Re-sent notifications (claimed by ``claim_due_notifications``) were accepted."""
        ...

    # ------------------------------------------------------------------ tick
    def claim_due_notifications(
        self, limit: int, backoff_base: float, backoff_cap: float, now: datetime | None = None
    ) -> list[DueNotification]: ...

    def expired_approvals(self, limit: int, now: datetime | None = None) -> list[Approval]: ...

    def lapsed_claims(
        self, limit: int, reenqueue_seconds: float, now: datetime | None = None
    ) -> list[str]: ...

    def stale_claimable(
        self, limit: int, older_than_seconds: float, now: datetime | None = None
    ) -> list[str]:
        """Queued runs without a key and interrupted runs whose last enqueue is
        older than the cutoff; marks them enqueued."""
        ...

    def free_key_heads(
        self, limit: int, older_than_seconds: float, now: datetime | None = None
    ) -> list[str]:
        """The oldest queued run of every key nobody holds; marks them enqueued."""
        ...

    def next_in_key(self, key: str) -> str | None: ...

    def mark_enqueued(self, run_ids: list[str]) -> None: ...

    def mark_unsent(self, run_ids: list[str]) -> None:
        """Record that these runs' messages could not be sent (the broker was
        unreachable): tick() sends them at its next pass instead of
        RUNWRIGHT_REENQUEUE_SECONDS later."""
        ...

    def prune(self, older_than: datetime, batch: int = 500) -> int: ...

    def mark_tick(self, at: datetime) -> None:
        """Record that tick() finished at ``at``: the store's copy of the mark
        that Redis keeps too (``Leases.mark_tick``), which outlives a Redis restart."""
        ...

    def last_tick(self) -> datetime | None:
        """When tick() last finished, as :meth:`mark_tick` recorded it (None: never)."""
        ...

    # --------------------------------------------------------------- metrics
    def approval_backlog(self) -> tuple[int, datetime | None]:
        """How many approvals are pending (undecided), and when the oldest of
        them was created (None if none is)."""
        ...

    def close(self) -> None: ...
