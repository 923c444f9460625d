"""The run-event feed as the store keeps it: what is an event, and its ids.

Events are derived from the rows the store commits, never written beside them:

- a ``step`` event is a ``steps`` row;
- a ``status`` event is a change of ``runs.status`` (and a run's creation),
  with the time a queued run may go (``retry_at``) and the limit it is parked
  on (``parked_on``), when it has them;
- an ``execution`` event is a rise of ``runs.claim_epoch`` (a claim; a takeover
  when the run was ``running`` under an older epoch);
- an ``approval`` event is an approval row (a request for a person: an
  approval or a question) created (``requested``) or decided.
- a ``version`` event is a move of ``runs.version`` from one agent version
  to another (runner/core/versions.py): ``from``, ``to``, what ``changes``,
  and ``by`` whom when a person moved it (``runwright runs upgrade``).

Postgres derives the others with triggers (:data:`TRIGGERS`), into
``run_events``, so that no statement that changes a run can forget one.
``steps.id`` and ``run_events.id`` come from one sequence, and every
write of a run holds its row lock when it takes ids, so a run's events in id
order are its events in commit order: a reader that remembers the last id it
saw misses nothing and sees nothing twice (the ids are not contiguous).

Token deltas are not here: they are live only (``runner/core/events/feed.py``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from store.models import Step, StepKind, Usage
from store.status import ENDED, RunStatus

# The one sequence of event ids (steps.id and run_events.id).
EVENT_IDS = "run_event_ids"


class EventType(enum.StrEnum):
    STATUS = "status"
    STEP = "step"
    APPROVAL = "approval"
    EXECUTION = "execution"
    CHILD = "child"
    VERSION = "version"
    TOKEN = "token"


def _when(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass(frozen=True)
class RunEvent:
    """One event of a run. ``id`` rises with every durable event of the run
    (a reader resumes after the last one it saw); token deltas have none."""

    run_id: str
    type: EventType
    data: dict[str, Any] = field(default_factory=dict)
    id: int | None = None
    at: datetime | None = None

    @property
    def durable(self) -> bool:
        return self.id is not None

    @property
    def status(self) -> RunStatus | None:
        """The status a status event moved the run to."""
        if self.type is not EventType.STATUS:
            return None
        return RunStatus(self.data["status"])

    @property
    def ends(self) -> bool:
        status = self.status
        return status is not None and status in ENDED

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (SSE, ``runwright watch --json``)."""
        return {
            "id": self.id,
            "run_id": self.run_id,
            "type": self.type.value,
            "at": _when(self.at),
            "data": self.data,
        }


def step_data(step: Step) -> dict[str, Any]:
    """A step as its event carries it: the fields ``steps`` returns."""
    return {
        "kind": step.kind.value,
        "index": step.index,
        "name": step.name,
        "tool_call_id": step.tool_call_id,
        "input": step.input,
        "output": step.output,
        "error": step.error,
        "input_tokens": None if step.usage is None else step.usage.input_tokens,
        "output_tokens": None if step.usage is None else step.usage.output_tokens,
        "usage_estimated": None if step.usage is None else step.usage.estimated,
        "cost_usd": step.cost_usd,
        "started_at": _when(step.started_at),
        "finished_at": _when(step.finished_at),
    }


def step_of(event: RunEvent) -> Step:
    """The step a ``step`` event carries."""
    d = event.data
    usage = None
    if d.get("input_tokens") is not None:
        usage = Usage(
            int(d["input_tokens"]),
            int(d.get("output_tokens") or 0),
            d.get("usage_estimated") is True,
        )
    return Step(
        run_id=event.run_id,
        id=event.id or 0,
        index=int(d["index"]),
        kind=StepKind(d["kind"]),
        started_at=datetime.fromisoformat(d["started_at"]),
        finished_at=None
        if d.get("finished_at") is None
        else datetime.fromisoformat(d["finished_at"]),
        name=d.get("name"),
        tool_call_id=d.get("tool_call_id"),
        input=d.get("input"),
        output=d.get("output"),
        error=d.get("error"),
        usage=usage,
        cost_usd=d.get("cost_usd"),
    )


def step_event(step: Step) -> RunEvent:
    return RunEvent(step.run_id, EventType.STEP, step_data(step), step.id, step.started_at)


# ---------------------------------------------------------------- Postgres

# The rule of this module's docstring, written in SQL only. Ids are taken when
# the trigger fires, at the end of the statement, which holds the run's row lock
# (the runs update, or for approvals the lock every approval write takes on its
# run first).
_RUN_FUNCTION = """
CREATE FUNCTION runwright_run_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.claim_epoch > OLD.claim_epoch THEN
        INSERT INTO run_events (run_id, type, data)
        VALUES (NEW.id, 'execution', jsonb_build_object(
            'epoch', NEW.claim_epoch, 'owner', NEW.claim_owner,
            'takeover', OLD.status = 'running'));
    END IF;
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
        INSERT INTO run_events (run_id, type, data)
        VALUES (NEW.id, 'status', jsonb_strip_nulls(jsonb_build_object(
            'status', NEW.status, 'error_code', NEW.error_code,
            'retry_at', to_jsonb(NEW.retry_at), 'parked_on', NEW.parked_key)));
    END IF;
    -- A child run's start and settle are events of its parent's too.
    IF NEW.parent_id IS NOT NULL AND (TG_OP = 'INSERT' OR (
            NEW.status IS DISTINCT FROM OLD.status AND NEW.status IN ('completed', 'failed', 'cancelled'))) THEN
        INSERT INTO run_events (run_id, type, data)
        VALUES (NEW.parent_id, 'child', jsonb_strip_nulls(jsonb_build_object(
            'action', CASE WHEN TG_OP = 'INSERT' THEN 'started' ELSE 'settled' END,
            'run_id', NEW.id, 'agent', NEW.agent, 'call_id', NEW.parent_call_id,
            'status', NEW.status, 'error_code', NEW.error_code)));
    END IF;
    RETURN NULL;
END
$$
"""

# A request's kind, and what a person did beyond yes or no: the model's
# arguments (``input``) beside the person's (``arguments``, ``edited``), a
# question's answer, a tool approved for the rest of the run (``for_run``), and
# the standing approval that decided a later call (``standing_from``).
_APPROVAL_FUNCTION = """
CREATE FUNCTION runwright_approval_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_events (run_id, type, data)
    VALUES (NEW.run_id, 'approval', jsonb_build_object(
        'action', CASE WHEN NEW.decision IS NULL THEN 'requested' ELSE 'decided' END,
        'approval_id', NEW.approval_id, 'step_index', NEW.step_index,
        'tool_call_id', NEW.tool_call_id, 'tool_name', NEW.tool_name,
        'decision', NEW.decision, 'reason', NEW.reason, 'decided_by', NEW.decided_by,
        'decided_at', to_jsonb(NEW.decided_at), 'expires_at', to_jsonb(NEW.expires_at))
        || jsonb_build_object(
        'kind', NEW.kind, 'input', to_jsonb(NEW.input), 'arguments', to_jsonb(NEW.arguments),
        'edited', NEW.arguments IS NOT NULL, 'answer', to_jsonb(NEW.answer),
        'for_run', NEW.for_run, 'standing_from', NEW.standing_from));
    RETURN NULL;
END
$$
"""

# A run's move to another version: what changed is written with the move
# (``runs.version_change``), so the event says it.
_VERSION_FUNCTION = """
CREATE FUNCTION runwright_version_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_events (run_id, type, data)
    VALUES (NEW.id, 'version', jsonb_strip_nulls(jsonb_build_object(
        'from', OLD.version, 'to', NEW.version,
        'changes', NEW.version_change -> 'changes', 'by', NEW.version_change -> 'by')));
    RETURN NULL;
END
$$
"""

# (name, create statement, drop statement), in creation order.
TRIGGERS: tuple[tuple[str, str, str], ...] = (
    (
        "runwright_run_events",
        _RUN_FUNCTION,
        "DROP FUNCTION IF EXISTS runwright_run_events()",
    ),
    (
        "runs_events_insert",
        "CREATE TRIGGER runs_events_insert AFTER INSERT ON runs"
        " FOR EACH ROW EXECUTE FUNCTION runwright_run_events()",
        "DROP TRIGGER IF EXISTS runs_events_insert ON runs",
    ),
    (
        "runs_events_update",
        # The WHEN keeps the per-step writes (the journal write, the commit
        # mid-run) out of the function.
        "CREATE TRIGGER runs_events_update AFTER UPDATE OF status, claim_epoch ON runs"
        " FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status"
        " OR OLD.claim_epoch IS DISTINCT FROM NEW.claim_epoch)"
        " EXECUTE FUNCTION runwright_run_events()",
        "DROP TRIGGER IF EXISTS runs_events_update ON runs",
    ),
    (
        "runwright_version_events",
        _VERSION_FUNCTION,
        "DROP FUNCTION IF EXISTS runwright_version_events()",
    ),
    (
        "runs_version_events",
        # A run's first version (its first execution) is no move.
        "CREATE TRIGGER runs_version_events AFTER UPDATE OF version ON runs"
        " FOR EACH ROW WHEN (OLD.version IS NOT NULL AND OLD.version IS DISTINCT FROM NEW.version)"
        " EXECUTE FUNCTION runwright_version_events()",
        "DROP TRIGGER IF EXISTS runs_version_events ON runs",
    ),
    (
        "runwright_approval_events",
        _APPROVAL_FUNCTION,
        "DROP FUNCTION IF EXISTS runwright_approval_events()",
    ),
    (
        "approvals_events_insert",
        "CREATE TRIGGER approvals_events_insert AFTER INSERT ON approvals"
        " FOR EACH ROW EXECUTE FUNCTION runwright_approval_events()",
        "DROP TRIGGER IF EXISTS approvals_events_insert ON approvals",
    ),
    (
        "approvals_events_update",
        "CREATE TRIGGER approvals_events_update AFTER UPDATE OF decision ON approvals"
        " FOR EACH ROW WHEN (OLD.decision IS DISTINCT FROM NEW.decision)"
        " EXECUTE FUNCTION runwright_approval_events()",
        "DROP TRIGGER IF EXISTS approvals_events_update ON approvals",
    ),
)
