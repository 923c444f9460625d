"""The audit log's actions (docs/security.md, "The audit log"): what a
person did to a run's data, as the engine appends it after the action.

The chain itself is the store's (``store/pg/audit.py``). This module names
the actions, says what each entry's ``detail`` holds (ids, flags and the
names of edited fields, never the values a person typed or read), appends
an entry without undoing an action that already committed, and keeps the
views of payloads from flooding the log (:class:`ViewWindow`).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from store.pg.approvals import DecisionResult
    from store.postgres import PostgresStore

log = logging.getLogger(__name__)

# Who an entry names when the caller did not say (``by=None``).
UNKNOWN_ACTOR = "unknown"

# A person's views of one run's payloads are one entry per this many seconds
# and process: a page that polls, or a stream that reconnects, adds no more.
VIEW_WINDOW_SECONDS = 600.0


class AuditAction(enum.StrEnum):
    """The actions the log records. Persisted: the ``audit.action`` column."""

    VIEWED_PAYLOADS = "viewed_payloads"
    DECIDED = "decided"
    EDITED = "edited"  # approved with arguments a person edited
    ANSWERED = "answered"
    CANCELLED = "cancelled"
    RETRIED = "retried"
    FORKED = "forked"
    RESOLVED_EFFECT = "resolved_effect"
    ERASED = "erased"
    UPGRADED_RUNS = "upgraded_runs"
    ROTATED_KEYS = "rotated_keys"
    EXPORTED = "exported"  # a run's payloads written out as a case (a file, a dataset)


def record(
    store: PostgresStore,
    action: AuditAction,
    by: str | None,
    *,
    run_id: str | None = None,
    source: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> int | None:
    """Append one entry, after the action it records committed; its id.

    An entry that cannot be appended (the store down, say) is logged as an
    ERROR and the action stands: it is done already, and undoing it would be
    worse than a gap the log names. None then."""
    try:
        return store.append_audit(
            by or UNKNOWN_ACTOR, action.value, run_id=run_id, source=source, detail=detail
        )
    except Exception:  # any failure: the action committed, and must not look failed
        log.exception(
            "audit: %s by %s on run %s was done but could not be recorded",
            action.value,
            by or UNKNOWN_ACTOR,
            run_id,
        )
        return None


def edited_keys(model: Any, edited: Any) -> list[str]:
    """The top-level fields a person's arguments changed from the model's
    (added, removed or given another value), by name only."""
    if not isinstance(model, Mapping) or not isinstance(edited, Mapping):
        return []
    return sorted(k for k in {*model, *edited} if model.get(k, ...) != edited.get(k, ...))


def decision(result: DecisionResult, *, fail_run: bool) -> tuple[AuditAction, dict[str, Any]]:
    """The action and detail of a decision: ``edited`` (with the names of
    the fields changed) when a person approved edited arguments, else
    ``decided``. The reason a person gave is not copied: it may quote the
    payload."""
    approval = result.approval
    detail: dict[str, Any] = {
        "approval_id": approval.approval_id,
        "tool": approval.tool_name,
        "decision": None if approval.decision is None else approval.decision.value,
    }
    if approval.for_run:
        detail["for_run"] = True
        detail["also"] = [also.approval_id for also in result.also]
    if fail_run:
        detail["fail_run"] = True
    if approval.edited:
        detail["edited"] = edited_keys(approval.input, approval.arguments)
        return AuditAction.EDITED, detail
    return AuditAction.DECIDED, detail


class ViewWindow:
    """Which (person, run) pairs had a ``viewed_payloads`` entry in the last
    ``seconds``, in this process only: each process (web worker) appends its
    own first view per window, so the log holds at most that many per window
    and not one per page load. Safe across threads."""

    def __init__(
        self, seconds: float = VIEW_WINDOW_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds = seconds
        self._clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def claim(self, by: str, run_id: str) -> bool:
        """True if this view is the first of its window (the caller appends
        it); then the window starts now."""
        now = self._clock()
        with self._lock:
            last = self._last.get((by, run_id))
            if last is not None and now - last < self.seconds:
                return False
            if len(self._last) > 10_000:  # forget the windows that ended
                self._last = {k: t for k, t in self._last.items() if now - t < self.seconds}
            self._last[(by, run_id)] = now
            return True

    def release(self, by: str, run_id: str) -> None:
        """The view claimed was not recorded: the next one tries again."""
        with self._lock:
            self._last.pop((by, run_id), None)
