"""How the console answers what it, or the engine, refuses."""

from __future__ import annotations

from runner.console.abilities import Ability
from runner.core.errors import (
    AgentNotFound,
    ApprovalAlreadyDecided,
    ApprovalExpired,
    ApprovalNotFound,
    DatasetNotFound,
    EffectNotFound,
    EvaluationNotFound,
    InvalidApprovalToken,
    InvalidInput,
    InvalidTransition,
    RunNotFound,
    RunNotWaiting,
    RunwrightError,
    ScheduleNotFound,
    StoreUnavailable,
)

CSRF_MESSAGE = (
    "The form did not carry this session's CSRF token (it is stale, or it was not sent "
    "from this console). Nothing changed: reload the page and try again."
)
FORBIDDEN_MESSAGE = "Sign in to use the console."
# What a signed-in user is told when their role lacks the ability a page needs.
NOT_ALLOWED = {
    Ability.SEE_RUNS: "Your account may not see runs.",
    Ability.SEE_PAYLOADS: "Your account may not see what runs carry.",
    Ability.DECIDE: (
        "Your account may not decide (approve, edit, answer, deny, cancel, retry or "
        "resolve): nothing changed."
    ),
}


class BadLink(InvalidApprovalToken):
    """This approval link is not valid (the token or the approval id is wrong)."""


class NoSuchStep(RunNotFound):
    """The run asked for no approval at that step."""


class NoSuchApproval(ApprovalNotFound):
    """The run named by the form has no such approval."""


def status_for(exc: RunwrightError) -> tuple[int, str]:
    """The HTTP status and page title for an error. Order matters: an error
    can be of two kinds (an invalid approval id is both bad input and "no such
    approval"), and the more specific answer wins."""
    if isinstance(exc, StoreUnavailable):
        return 503, "Unavailable"  # not the client's fault: it may retry
    if isinstance(exc, InvalidApprovalToken):
        return 403, "Forbidden"
    if isinstance(exc, ApprovalAlreadyDecided):
        return 409, "Already decided"
    if isinstance(exc, ApprovalExpired | RunNotWaiting | InvalidTransition):
        return 409, "Not done"
    not_found = (
        RunNotFound
        | ApprovalNotFound
        | AgentNotFound
        | EffectNotFound
        | ScheduleNotFound
        | EvaluationNotFound
        | DatasetNotFound
    )
    if isinstance(exc, not_found):
        return 404, "Not found"
    if isinstance(exc, InvalidInput):
        return 400, "Bad request"
    return 400, "Not done"
