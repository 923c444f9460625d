"""How an approval that nobody decided in time reads, to the model, on the
console's run page and in the CLI (docs/approvals.md, "Expiry").

tick() denies an expired approval itself (runner/core/engine/tick.py) with the
reason "expired": the same words a reviewer could type. So an expiry is told
from a person's denial by the approval's record, never by its reason: the
engine's own decisions name nobody (``decided_by`` is None), and a person's
decision is refused once ``expires_at`` has passed (store/rules.py
``check_decidable``), so only the engine can deny at or after it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from runner.core.errors import InvalidInput
from store.events import EventType, RunEvent
from store.models import Approval, Decision, RequestKind, RunError


def check_expiry(owner: str, expires_in: timedelta | float | None, on_expire: str) -> None:
    """An expiry as a policy (``ApprovalPolicy``, ``AskHuman``) sets it:
    positive, and ``on_expire`` ``"deny"`` or ``"fail"``."""
    if on_expire not in ("deny", "fail"):
        raise InvalidInput(f"on_expire must be 'deny' or 'fail', not {on_expire!r}")
    if expires_in is not None and expiry_seconds(expires_in, 1.0) <= 0:
        raise InvalidInput(f"{owner}.expires_in must be positive")


def expiry_seconds(expires_in: timedelta | float | None, default: float) -> float:
    """Seconds until a request expires; ``default`` if its policy sets none."""
    if expires_in is None:
        return default
    if isinstance(expires_in, timedelta):
        return expires_in.total_seconds()
    return float(expires_in)


def expired(approval: Approval) -> bool:
    """The approval was denied by its expiry, not by a person."""
    return denied_by_expiry(
        approval.decision, approval.decided_by, approval.decided_at, approval.expires_at
    )


def denied_by_expiry(
    decision: Decision | str | None,
    decided_by: str | None,
    decided_at: datetime | None,
    expires_at: datetime | None,
) -> bool:
    """The rule of :func:`expired`, on a decision's fields (an approval's, or
    an ``approval`` event's)."""
    return (
        decision == Decision.DENIED
        and decided_by is None
        and decided_at is not None
        and expires_at is not None
        and decided_at >= expires_at
    )


def marked_event(event: RunEvent) -> dict[str, Any]:
    """An event whole (:func:`runner.sse.full_event`), with an approval
    event denied by its expiry marked ``expired``: the console's live
    timeline then reads it as its rendered page does."""
    shaped = event.to_dict()
    data = event.data
    if event.type is EventType.APPROVAL and data.get("action") == "decided":
        expires_at, decided_at = _time(data.get("expires_at")), _time(data.get("decided_at"))
        if denied_by_expiry(data.get("decision"), data.get("decided_by"), decided_at, expires_at):
            shaped["data"] = {
                **data,
                "expired": True,
                "expired_at": _moment(expires_at),
            }
    return shaped


def _time(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def expired_at(approval: Approval) -> str:
    return _moment(approval.expires_at)


def _moment(at: datetime | None) -> str:
    return "" if at is None else f"{at:%Y-%m-%d %H:%M:%S %Z}".strip()


def expiry_message(approval: Approval) -> str:
    """What the model is told of a call whose approval expired, or of a
    question nobody answered in time."""
    if approval.kind is RequestKind.INPUT:
        return f"not answered: the question expired at {expired_at(approval)} with no answer"
    return f"not approved: the approval expired at {expired_at(approval)} with no decision"


def expiry_failure(approval: Approval) -> RunError:
    """Why a run fails when its request expires and says so (``on_expire="fail"``)."""
    if approval.kind is RequestKind.INPUT:
        return RunError(
            "question_expired",
            f"question {approval.approval_id} expired at {expired_at(approval)} with no answer",
        )
    return RunError(
        "approval_expired",
        f"approval {approval.approval_id} for {approval.tool_name} expired "
        f"at {expired_at(approval)}",
    )
