"""What a person without the ``see_payloads`` ability (runner/console/abilities.py)
is shown of a run's payloads: their shape, with every value masked.

A payload keeps its keys and its lists' lengths; each leaf value (a string,
a number, a boolean) becomes :data:`MASK`. A missing value (None) stays
missing, so a page still says whether a step failed or a run has an output,
and nothing more. Ids, names, statuses, times, usage and costs are not
payloads and stay.

The records are masked before any page renders them, so no renderer can
forget a field: a field added to a record later shows unmasked only if it is
added to a renderer and not here, which the tests of each surface catch.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from store.events import EventType, RunEvent
from store.models import (
    Approval,
    Effect,
    Evaluation,
    EvaluationCase,
    Run,
    RunAttempt,
    RunError,
    Schedule,
)

if TYPE_CHECKING:
    from runner.core.approvals.inbox import InboxItem

MASK = "[masked]"

# The fields of an event's data that carry a payload, by the event's type.
_EVENT_PAYLOADS = {
    EventType.STEP: ("input", "output", "error"),
    EventType.APPROVAL: ("input", "arguments", "answer", "reason"),
    EventType.TOKEN: ("text",),
}


def mask(value: Any) -> Any:
    """``value`` with its keys kept and every leaf replaced by :data:`MASK`."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {str(key): mask(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [mask(inner) for inner in value]
    return MASK


def masked_event(event: RunEvent) -> RunEvent:
    fields = _EVENT_PAYLOADS.get(event.type, ())
    if not any(key in event.data for key in fields):
        return event
    data = {key: mask(value) if key in fields else value for key, value in event.data.items()}
    return replace(event, data=data)


def masked_run(run: Run) -> Run:
    trigger = run.trigger.model_copy(
        update={"payload": mask(run.trigger.payload), "keys": mask(run.trigger.keys)}
    )
    waiting = run.waiting
    if waiting is not None:
        waiting = replace(waiting, input=mask(waiting.input))
    retry = run.retry  # a provider's error may quote the request
    if retry is not None:
        retry = replace(retry, error=MASK)
    return replace(
        run,
        trigger=trigger,
        output=mask(run.output),
        error=_masked_error(run.error),
        state=mask(run.state),
        waiting=waiting,
        retry=retry,
    )


def masked_approval(approval: Approval) -> Approval:
    return replace(
        approval,
        input=mask(approval.input),
        arguments=mask(approval.arguments),
        answer=mask(approval.answer),
        reason=mask(approval.reason),
    )


def masked_effect(effect: Effect) -> Effect:
    return replace(
        effect,
        input=mask(effect.input),
        output=mask(effect.output),
        error=mask(effect.error),
        resolved_note=mask(effect.resolved_note),
    )


def masked_attempt(attempt: RunAttempt) -> RunAttempt:
    return replace(attempt, error=_masked_error(attempt.error))


def masked_schedule(schedule: Schedule) -> Schedule:
    return replace(schedule, payload=mask(schedule.payload), keys=mask(schedule.keys))


def masked_item(item: InboxItem) -> InboxItem:
    """An inbox entry: the request, its run, the message that asked and
    the results it had seen."""
    return replace(
        item,
        approval=masked_approval(item.approval),
        run=masked_run(item.run),
        asking=mask(item.asking),
        seen=[replace(seen, content=mask(seen.content)) for seen in item.seen],
        step_approvals=[masked_approval(a) for a in item.step_approvals],
    )


def masked_evaluation(evaluation: Evaluation) -> Evaluation:
    """An evaluation's cases: each replay report (the outputs, where the
    replay parted from the recording, what would have run, the error that
    stopped it) and what each scorer said of it (a judge's reason, an
    error, may quote the output). Verdicts, scores and what a case took stay."""
    return replace(evaluation, cases=[_masked_case(case) for case in evaluation.cases])


def _masked_case(case: EvaluationCase) -> EvaluationCase:
    scores = case.scores
    if scores is not None:
        scores = {
            name: {**score, "detail": mask(score.get("detail"))}
            if isinstance(score, dict)
            else score
            for name, score in scores.items()
        }
    return replace(case, result=mask(case.result), scores=scores)


def _masked_error(error: RunError | None) -> RunError | None:
    # The code says what kind of failure; the message may quote a payload.
    return None if error is None else RunError(error.code, MASK)


__all__ = [
    "MASK",
    "mask",
    "masked_approval",
    "masked_attempt",
    "masked_effect",
    "masked_evaluation",
    "masked_event",
    "masked_item",
    "masked_run",
    "masked_schedule",
]
