"""The rules of a run that ``PostgresStore`` decides in Python, beside the SQL.

What a cancel does, what an outcome writes, the checkpoint rule, what the
step's commit moves a run to and which steps it journals, and whether an
approval can take a decision are decided here; the statements of
``store/pg/`` apply them. The rules that SQL decides are written there only:
what is claimable and when a takeover crashes a run (``pg/execution.py``,
``CLAIM``), what a park writes (``pg/flow.py``, ``PARK``), what progress
resets (``RECORD_LLM_STEP``, ``COMMIT_STEP``), which run of a concurrency key
goes next (``CLAIM``, and ``pg/base.py``'s ``NEXT_IN_KEY``), what a retry
resets and reopens (``pg/retry_fork.py``), and which events a write makes
(``store/events.py``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime

from store.errors import (
    ApprovalAlreadyDecided,
    ApprovalExpired,
    CheckpointConflict,
    InvalidInput,
    InvalidTransition,
    RunNotWaiting,
    WrongRequestKind,
)
from store.models import (
    JSON,
    Admission,
    AdmissionVerdict,
    Approval,
    BudgetBound,
    Decision,
    Interruption,
    OnDeny,
    Outcome,
    Overlap,
    RequestKind,
    RetryWait,
    RunError,
    SharedUse,
    StepCommit,
    StepKind,
    StepRecord,
    Usage,
    utcnow,
)
from store.status import CANCELLABLE, KEY_HOLDING, RunStatus

# The error of a run cancelled on request (ended at once, or by its owner).
CANCELLED_ON_REQUEST = RunError(RunStatus.CANCELLED.value, "cancelled on request")


class CancelAction(enum.StrEnum):
    CANCELLED = "cancelled"  # ended now
    REQUESTED = "requested"  # the owner will abort
    ENDED = "settled"  # already ended: nothing to do


def cancel_outcome() -> Outcome:
    return Outcome(RunStatus.CANCELLED, error=CANCELLED_ON_REQUEST)


def cancel_action(status: RunStatus) -> CancelAction:
    """What a cancel request does to a run in ``status``."""
    if status in CANCELLABLE:
        return CancelAction.CANCELLED
    if status is RunStatus.RUNNING:
        return CancelAction.REQUESTED
    return CancelAction.ENDED


# ------------------------------------------------------- shared budgets


def admit(bounds: tuple[BudgetBound, ...], uses: dict[str, SharedUse], tokens: int) -> Admission:
    """Whether a child's model call expected to take ``tokens`` may go out
    under the budgets it shares with its ancestors (runner/core/children.py).

    Spent: an ancestor's totals reached its token or cost budget. Held: they
    have not, but with what its other descendants' calls in flight reserved
    they would; the call waits for those to end rather than spend what
    they may need. A call is admitted while the tree's use and reservations
    are below each budget, so its tree overshoots a budget by at most what
    one call takes beyond it (docs/children.md). A step whose reply is
    journaled makes no call (``tokens`` 0): only spent stops it. An ancestor
    pruned meanwhile bounds nothing."""
    held: Admission | None = None
    for bound in bounds:
        use = uses.get(bound.run_id)
        if use is None:
            continue
        if (bound.max_tokens is not None and use.tokens >= bound.max_tokens) or (
            bound.max_cost_usd is not None and use.cost_usd >= bound.max_cost_usd
        ):
            return Admission(AdmissionVerdict.SPENT, bound, use)
        over = bound.max_tokens is not None and use.tokens + use.reserved >= bound.max_tokens
        if tokens > 0 and over and held is None:
            held = Admission(AdmissionVerdict.HELD, bound, use)
    return held or Admission(AdmissionVerdict.ADMITTED)


# ------------------------------------------------------------------- claims

# The ``enqueued_at`` of a claimable run whose message could not be sent:
# older than any re-enqueue window, so the next tick() sends it.
UNSENT = datetime(1970, 1, 1, tzinfo=UTC)


def holds_key(status: RunStatus) -> bool:
    """A run holds its concurrency key from its first claim until it ends."""
    return status in KEY_HOLDING


def crashed_error(epoch: int, max_takeovers: int) -> RunError:
    return RunError(
        "crashed",
        f"the run was taken over {max_takeovers} times without progress; its executions"
        f" keep dying (last epoch {epoch}), so it is not retried (RUNWRIGHT_MAX_TAKEOVERS)",
    )


# ----------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class OutcomeColumns:
    """What moving a run to an outcome writes. ``status`` None: no outcome."""

    status: RunStatus | None
    ended: bool = False
    output: JSON = None
    error: RunError | None = None
    # ``enqueued_at`` is set (to ``requeue_at``, else now), so tick()
    # re-enqueues the run in its time.
    requeue: bool = False
    requeue_at: datetime | None = None
    # Why an interrupted run was given back (None for every other outcome).
    interruption: Interruption | None = None


def outcome_columns(outcome: Outcome | None) -> OutcomeColumns:
    """The one place that decides what an outcome writes (and any outcome
    releases the claim: ``store/pg/base.OUTCOME_SET``)."""
    if outcome is None:
        return OutcomeColumns(None)
    ended = outcome.status.ended
    return OutcomeColumns(
        status=outcome.status,
        ended=ended,
        output=outcome.output if ended else None,
        error=outcome.error if ended else None,
        requeue=outcome.status in (RunStatus.INTERRUPTED, RunStatus.QUEUED),
        requeue_at=outcome.not_before,
        interruption=outcome.interruption if outcome.status is RunStatus.INTERRUPTED else None,
    )


def unpriced_call(usage: Usage | None, cost_usd: float | None) -> bool:
    """A model call that used tokens and has no price (litellm knows no price
    for its model: runner/core/model.py ``_cost``); a failed call used none. The
    run keeps a mark of one (``runs.cost_unpriced``), so that a list of runs
    can say its cost is incomplete without reading steps (runner/core/costs.py)."""
    return usage is not None and cost_usd is None


def check_end(outcome: Outcome) -> None:
    """A running run ends, pauses or is given back; it cannot stay or requeue."""
    if outcome.status in (RunStatus.RUNNING, RunStatus.QUEUED):
        raise InvalidTransition(f"a running run cannot end as {outcome.status.value}")


def retry_outcome(wait: RetryWait, error: RunError | None) -> Outcome:
    """A failing model step: back to the queue until ``wait.at``, or failed
    with ``error`` once the retry policy is exhausted."""
    if error is not None:
        return Outcome(RunStatus.FAILED, error=error)
    if wait.at is None:
        raise InvalidTransition("a run waiting to retry needs a time to retry at")
    return Outcome(RunStatus.QUEUED, not_before=wait.at)


def park_outcome(at: datetime) -> Outcome:
    """A run parked on a limit (store/pg/flow.py): back to the queue until
    ``at``, an aware time, as a run waiting to retry is."""
    if not isinstance(at, datetime) or at.utcoffset() is None:
        raise InvalidInput(f"a parked run needs an aware time to go at, not {at!r}")
    return Outcome(RunStatus.QUEUED, not_before=at)


def check_fail_waiting(run_id: str, status: RunStatus) -> None:
    if status is not RunStatus.WAITING:
        raise InvalidTransition(f"run {run_id} is {status.value}, not waiting")


def commit_waits(commit: StepCommit) -> bool:
    """The step waits: it asks a person (an approval or a question nobody has
    decided; a call a standing approval decided does not wait), or it waits
    for children."""
    return commit.waits or any(a.pending for a in commit.approvals)


def commit_outcome(commit: StepCommit) -> Outcome | None:
    """What the step's commit moves the run to: waiting when it waits."""
    return Outcome(RunStatus.WAITING) if commit_waits(commit) else commit.outcome


def wakes_key(key: str | None, status: RunStatus) -> bool:
    """After a write, whether the key's next run should be looked for."""
    return bool(key) and not holds_key(status)


# --------------------------------------------------------------- checkpoints


def check_checkpoint(run_id: str, stored: tuple[int, int] | None, commit: StepCommit) -> None:
    """The checkpoint rule: a commit appends to the stored messages, or replaces
    those from ``base_count`` on at an equal or higher step index; it never
    goes below the stored step index, nor extends from more messages than are
    stored. ``stored`` is ``(step_index, message_count)``, None if no checkpoint."""
    stored_index, stored_count = stored if stored is not None else (0, 0)
    if stored is not None and commit.step_index < stored_index:
        raise CheckpointConflict(
            f"run {run_id} already has a checkpoint at step {stored_index}; "
            f"refusing step {commit.step_index}"
        )
    if commit.base_count > stored_count:
        raise CheckpointConflict(
            f"run {run_id} has {stored_count} messages; cannot extend from {commit.base_count}"
        )


def with_state_step(commit: StepCommit) -> list[StepRecord]:
    """The step rows the step's commit writes: the tool steps, and a ``state`` step with the
    run's state when the step changed it (so that a fork at that step starts
    from the state as it was then)."""
    if not commit.state_changed:
        return commit.tool_steps
    now = utcnow()
    state = StepRecord(
        index=commit.step_index,
        kind=StepKind.STATE,
        started_at=now,
        finished_at=now,
        output=commit.state,
    )
    return [*commit.tool_steps, state]


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


def check_decision(
    approval: Approval,
    decision: Decision,
    *,
    arguments: JSON = None,
    answer: JSON = None,
    for_run: bool = False,
    expiry: bool = False,
) -> None:
    """What a request takes: an approval is approved (with edited
    ``arguments``, or ``for_run``) or denied; a question is answered, and
    denied only by its ``expiry`` (tick()'s)."""
    if approval.kind is RequestKind.INPUT:
        if decision is not Decision.ANSWERED and not (expiry and decision is Decision.DENIED):
            raise WrongRequestKind(
                f"request {approval.approval_id} is a question ({approval.tool_name}); "
                "answer it (Engine.answer): it takes no approval or denial"
            )
        if decision is Decision.ANSWERED and answer is None:
            raise WrongRequestKind(f"question {approval.approval_id} needs an answer")
        return
    if decision is Decision.ANSWERED or answer is not None:
        raise WrongRequestKind(
            f"request {approval.approval_id} is an approval of {approval.tool_name}; approve or "
            "deny it (Engine.decide), it takes no answer"
        )
    if decision is not Decision.APPROVED and (arguments is not None or for_run):
        raise WrongRequestKind(
            "edited arguments and approving for the rest of the run go with an approval, "
            "not a denial"
        )


def denial_failure(decided: Approval, *, expiry: bool = False) -> RunError | None:
    """The run's failure when a person's denial ends it (``on_deny="fail"``);
    None when the model is told instead. The engine's own denial of an
    ``expiry`` follows ``on_expire``, never this."""
    if expiry or decided.decision is not Decision.DENIED or decided.on_deny is not OnDeny.FAIL:
        return None
    why = f": {decided.reason}" if decided.reason else ""
    who = decided.decided_by or "a person"
    return RunError(
        "approval_denied", f"{who} denied {decided.tool_name} (approval {decided.approval_id}){why}"
    )


# ---------------------------------------------------------------- schedules


class OverlapAction(enum.StrEnum):
    START = "start"
    SKIP = "skip"
    BUFFER = "buffer"
    CANCEL_AND_START = "cancel_and_start"


def overlap_action(policy: Overlap, runs_open: bool, buffered: bool) -> OverlapAction:
    """What a schedule's firing does (docs/triggers.md): with no earlier run
    still open it starts; otherwise its ``policy`` decides."""
    if not runs_open or policy is Overlap.ALLOW_ALL:
        return OverlapAction.START
    if policy is Overlap.CANCEL_OTHER:
        return OverlapAction.CANCEL_AND_START
    if policy is Overlap.BUFFER_ONE and not buffered:
        return OverlapAction.BUFFER
    return OverlapAction.SKIP


# Agent versions (runner/core/versions.py). The error code of a run whose
# agent's version changed under it, the agent saying ``on_new_version="fail"``:
# a retry starts it on the version then.
VERSION_CHANGED = "version_changed"
# The prefix of the limit key (``runs.parked_key``) of a pinned run waiting
# for a worker of its version: ``version:<agent>:<version>``.
WAITING_PREFIX = "version:"
