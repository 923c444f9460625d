"""How an approval that nobody decided in time reads, to the model, on the
console's run page and in the CLI (docs/approvals.md, "Expiry").

tick() denies an expired approval itself (runner/engine/tick.py) with the
reason "expired": the same words a reviewer could type. So an expiry is told
from a person's denial by the approval's record, never by its reason: the
engine's own decisions name nobody (``decided_by`` is None), and a person's
decision is refused once ``expires_at`` has passed (store/rules.py
``check_decidable``), so only the engine can deny at or after it.
"""

from __future__ import annotations

from store.models import Approval, Decision


def expired(approval: Approval) -> bool:
    """The approval was denied by its expiry, not by a person."""
    return (
        approval.decision is Decision.DENIED
        and approval.decided_by is None
        and approval.decided_at is not None
        and approval.decided_at >= approval.expires_at
    )


def expired_at(approval: Approval) -> str:
    return f"{approval.expires_at:%Y-%m-%d %H:%M:%S %Z}".strip()


def expiry_message(approval: Approval) -> str:
    """What the model is told of a call whose approval expired."""
    return f"not approved: the approval expired at {expired_at(approval)} with no decision"
