"""The rules of retrying and forking a run that are decided in Python.

A retry puts a ``failed`` or ``cancelled`` run back in the queue from its
checkpoint and keeps what it replaced as an attempt. A fork starts a new run
from another run's history as it stood after one of its steps. What is
allowed, the attempt kept and what a fork copies are decided here; what a
retry resets on the run and which approvals it opens again are decided by the
statements of ``store/pg/retry_fork.py`` (``REQUEUE``, ``REOPEN_APPROVALS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from store.errors import ForkRepeatsEffects, InvalidInput, InvalidTransition, RanEffect
from store.models import JSON, Message, Run, RunAttempt
from store.status import RunStatus
from store.validate import check_text, is_canonical_id, shown_id

# Statuses a retry starts again; a completed run is refused, the others are live.
RETRYABLE = frozenset({RunStatus.FAILED, RunStatus.CANCELLED})
# Extra steps one retry may add, and in all (runs.extra_steps is an int column).
MAX_EXTRA_STEPS = 1_000_000
MAX_TOTAL_EXTRA_STEPS = 2**31 - 1
MAX_MODEL_CHARS = 256


# ------------------------------------------------------------------- retry


def check_extra_steps(extra_steps: object) -> int:
    if isinstance(extra_steps, bool) or not isinstance(extra_steps, int):
        raise InvalidInput(f"extra steps must be a whole number, not {extra_steps!r}"[:200])
    if not 0 <= extra_steps <= MAX_EXTRA_STEPS:
        raise InvalidInput(f"extra steps must be from 0 to {MAX_EXTRA_STEPS}, not {extra_steps}")
    return extra_steps


def may_retry(run: Run, extra_steps: int) -> bool:
    """Whether a retry of ``run`` (its row locked) queues it again: True for a
    failed or cancelled run, False for a live one (nothing to do); a completed
    run raises :class:`InvalidTransition`."""
    if run.status is RunStatus.COMPLETED:
        raise InvalidTransition(f"run {run.id} completed; a completed run cannot be retried")
    if run.status not in RETRYABLE:
        return False
    if run.extra_steps + extra_steps > MAX_TOTAL_EXTRA_STEPS:
        raise InvalidInput(
            f"run {run.id} already has {run.extra_steps} extra steps; "
            f"{extra_steps} more is past the limit of {MAX_TOTAL_EXTRA_STEPS}"
        )
    return True


def attempt_of(run: Run, attempt: int, extra_steps: int, retried_at: datetime) -> RunAttempt:
    """The attempt a retry keeps: the run's outcome as it stood (its usage and
    steps are the run's totals then; they keep counting over attempts)."""
    return RunAttempt(
        attempt=attempt,
        status=run.status,
        error=run.error,
        steps_used=run.steps_used,
        usage=run.usage,
        started_at=run.started_at,
        finished_at=run.finished_at,
        retried_at=retried_at,
        extra_steps=extra_steps,
    )


# -------------------------------------------------------------------- fork


def check_model(model: object) -> str | None:
    if model is None:
        return None
    text = check_text(model, "the model", max_chars=MAX_MODEL_CHARS)
    if not text.strip():
        raise InvalidInput("the model is empty")
    return text


def check_new_id(run_id: str) -> str:
    """A new run's id is a UUID as Runwright writes them."""
    if not is_canonical_id(run_id):
        raise InvalidInput(f"a new run's id must be a lowercase UUID, not {shown_id(run_id)}")
    return run_id


def check_fork_step(run_id: str, at_step: object, checkpoint_step: int | None) -> int:
    if isinstance(at_step, bool) or not isinstance(at_step, int):
        raise InvalidInput(f"the step to fork at must be a whole number, not {at_step!r}"[:200])
    if checkpoint_step is None:
        raise InvalidInput(f"run {run_id} has no checkpoint yet; there is no step to fork at")
    if not 1 <= at_step <= checkpoint_step:
        raise InvalidInput(
            f"run {run_id} can be forked at steps 1 to {checkpoint_step}, not at step {at_step}"
        )
    return at_step


def check_fork_effects(
    run_id: str, at_step: int, ran: Sequence[RanEffect], *, rerun_effects: bool
) -> None:
    """Refuse a fork at ``at_step`` that would repeat effects: ``ran`` are the
    effects the run journaled after that step, completed or with an unknown
    outcome, in step order. The fork's model takes the run up again from the
    step, so it is likely to call them again, and then they run under the
    fork's own keys (``f"{fork_id}:{call_id}"``), where no journal and no
    downstream deduplication recognises them; a failed effect had no effect to
    repeat. ``rerun_effects`` is the caller's word that this is intended."""
    if ran and not rerun_effects:
        raise ForkRepeatsEffects(run_id, at_step, list(ran))


def fork_messages(
    run_id: str,
    at_step: int,
    checkpoint_step: int,
    history: Sequence[tuple[int | None, Message]],
) -> list[Message]:
    """The messages a fork at ``at_step`` starts from: those of the checkpoint
    (``history``: ``(step_index, body)`` in order) that steps up to ``at_step``
    wrote. They must be the checkpoint's first messages; messages written
    before step numbers were kept (revision 0004) allow a fork at the last step only."""
    if at_step == checkpoint_step:
        kept = [body for _, body in history]
    else:
        if any(step is None for step, _ in history):
            raise InvalidInput(
                f"run {run_id}'s history was written before step numbers were kept"
                f" (revision 0004); it can be forked only at its last step, {checkpoint_step}"
            )
        count = sum(1 for step, _ in history if step is not None and step <= at_step)
        prefix = all(step is not None and step <= at_step for step, _ in history[:count])
        if not prefix:
            raise InvalidInput(
                f"run {run_id}'s messages up to step {at_step} are not the start of its"
                " history; it cannot be forked there"
            )
        kept = [body for _, body in history[:count]]
    unanswered = unanswered_calls(kept)
    if unanswered:
        raise InvalidInput(
            f"run {run_id}'s history after step {at_step} ends with tool calls that have no"
            f" result ({', '.join(unanswered)}); fork at another step"
        )
    return kept


def unanswered_calls(messages: Sequence[Message]) -> list[str]:
    """Names of the last assistant message's tool calls that no ``tool``
    message answers (a step waiting for approval, say)."""
    for position in range(len(messages) - 1, -1, -1):
        if messages[position].get("role") == "assistant":
            break
    else:
        return []
    answered = {m.get("tool_call_id") for m in messages[position + 1 :] if m.get("role") == "tool"}
    calls = messages[position].get("tool_calls") or []
    return [
        str((c.get("function") or {}).get("name") or "?")
        for c in calls
        if c.get("id") not in answered
    ]


def fork_state(
    journaled: tuple[bool, JSON], at_step: int, checkpoint_step: int, current: JSON
) -> JSON:
    """The state a fork starts with: the newest ``state`` step up to ``at_step``
    (``journaled``: found, value); else, at the last step, the run's state
    (a history from before revision 0004 journaled none); else none."""
    found, value = journaled
    if found:
        return value
    return current if at_step == checkpoint_step else None


def fork_finish_reason(
    at_step: int, checkpoint_step: int, checkpoint_reason: str | None, step_output: JSON
) -> str | None:
    """The finish reason of the fork's checkpoint: the model's, at ``at_step``."""
    if at_step == checkpoint_step:
        return checkpoint_reason
    if isinstance(step_output, dict):
        reason = step_output.get("finish_reason")
        return reason if isinstance(reason, str) else None
    return None


def check_existing_fork(existing: Run, run_id: str, at_step: int) -> Run:
    """A run with the fork's id or trigger id exists: it is the answer (a fork is
    idempotent) only if it is that same fork."""
    if existing.forked_from != run_id or existing.forked_at_step != at_step:
        raise InvalidInput(
            f"run {existing.id} already has this id or trigger id and is not a fork of"
            f" run {run_id} at step {at_step}"
        )
    return existing
