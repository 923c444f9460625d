"""Cancel, approvals and decisions: the writes of processes other than the
run's owner, and the reads of approvals. Each write locks the run row first,
then its approvals (the step's commit takes them in the same order), and
decides by ``store.rules``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from store.db import Tx, dumps
from store.errors import ApprovalNotFound
from store.models import (
    JSON,
    Approval,
    Decision,
    Ended,
    Message,
    Outcome,
    Run,
    RunError,
    RunStatus,
    StandingApproval,
)
from store.pg.base import PgBase, outcome_params
from store.rows import approval_from_row, run_from_row, standing_from_row
from store.rules import (
    CancelAction,
    cancel_action,
    cancel_outcome,
    check_decidable,
    check_decision,
    check_fail_waiting,
    denial_failure,
)
from store.statements import Statement
from store.validate import check_actor, check_approval_id, check_run_id, is_canonical_id

LOCK_RUN = Statement(
    "lock_run",
    """
    SELECT status, concurrency_key, COALESCE(CAST(:now AS timestamptz), now()) AS now
      FROM runs WHERE id = CAST(:run_id AS uuid) FOR UPDATE
    """,
)

# An end by another process (a cancel, a failed wait): a run cancelled from the
# queue is parked on nothing any more (store/pg/flow.py).
END_BY_ID = Statement(
    "end_by_id",
    """
    UPDATE runs SET
        status = COALESCE(CAST(:o_status AS text), status),
        claim_owner = CASE WHEN CAST(:o_status AS text) IS NULL THEN claim_owner END,
        claim_expires_at = CASE WHEN CAST(:o_status AS text) IS NULL
                                THEN claim_expires_at END,
        finished_at = CASE WHEN CAST(:o_ended AS bool) THEN now() ELSE finished_at END,
        output = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_output AS json)
                      ELSE output END,
        error_code = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_code AS text)
                          ELSE error_code END,
        error_message = CASE WHEN CAST(:o_ended AS bool) THEN CAST(:o_message AS text)
                             ELSE error_message END,
        enqueued_at = CASE WHEN CAST(:o_requeue AS bool)
                           THEN COALESCE(CAST(:o_requeue_at AS timestamptz), now())
                           ELSE enqueued_at END,
        interrupted_reason = CASE WHEN CAST(:o_status AS text) IS NULL
                                  THEN interrupted_reason
                                  ELSE CAST(:o_interruption AS text) END,
        interrupted_by = CASE WHEN CAST(:o_status AS text) IS NULL THEN interrupted_by
                              WHEN CAST(:o_interruption AS text) IS NOT NULL
                              THEN claim_owner END,
        reserved_tokens = CASE WHEN CAST(:o_status AS text) IS NULL THEN reserved_tokens
                               ELSE 0 END,
        updated_at = now(),
        cancel_requested = cancel_requested OR CAST(:cancel AS bool),
        parked_key = NULL
     WHERE id = CAST(:run_id AS uuid)
    """,
)

# The first to ask is who cancelled it.
CANCELLED_BY = Statement(
    "cancelled_by",
    """
    UPDATE runs SET cancelled_by = COALESCE(cancelled_by, CAST(:by AS text))
     WHERE id = CAST(:run_id AS uuid)
    """,
)

REQUEST_CANCEL = Statement(
    "request_cancel",
    "UPDATE runs SET cancel_requested = true, updated_at = now() WHERE id = CAST(:run_id AS uuid)",
)

# The children of some runs that a cancel of them reaches: those not detached
# (ended or not: a cancel goes through them to theirs).
UNDETACHED_CHILDREN = Statement(
    "undetached_children",
    """
    SELECT id, status FROM runs WHERE parent_id = ANY(CAST(:ids AS uuid[])) AND NOT detached
     ORDER BY id
    """,
)

WITHDRAW = Statement(
    "withdraw",
    """
    UPDATE approvals SET decision = CAST(:withdrawn AS text), decided_at = now()
     WHERE run_id = CAST(:run_id AS uuid) AND decision IS NULL
    """,
)

RUN_APPROVALS = Statement(
    "run_approvals",
    "SELECT * FROM approvals WHERE run_id = CAST(:run_id AS uuid) ORDER BY created_at, approval_id",
)

APPROVALS_BY_RUN_IDS = Statement(
    "approvals_by_run_ids",
    """
    SELECT * FROM approvals WHERE run_id = ANY(CAST(:ids AS uuid[]))
     ORDER BY created_at, approval_id
    """,
)

APPROVAL = Statement(
    "approval", "SELECT * FROM approvals WHERE approval_id = CAST(:approval_id AS uuid)"
)

LOCK_APPROVAL = Statement(
    "lock_approval",
    "SELECT * FROM approvals WHERE approval_id = CAST(:approval_id AS uuid) FOR UPDATE",
)

DECIDE = Statement(
    "decide",
    """
    UPDATE approvals SET decision = CAST(:decision AS text), reason = CAST(:reason AS text),
                         decided_at = CAST(:at AS timestamptz), decided_by = CAST(:by AS text),
                         arguments = CAST(:arguments AS json), answer = CAST(:answer AS json),
                         for_run = CAST(:for_run AS bool)
     WHERE approval_id = CAST(:approval_id AS uuid)
    RETURNING *
    """,
)

# A tool approved for the rest of the run: the first grant stands.
GRANT_STANDING = Statement(
    "grant_standing",
    """
    INSERT INTO standing_approvals (run_id, tool_name, approval_id, granted_by, granted_at)
    VALUES (CAST(:run_id AS uuid), CAST(:tool_name AS text), CAST(:approval_id AS uuid),
            CAST(:by AS text), CAST(:at AS timestamptz))
    ON CONFLICT DO NOTHING
    """,
)

# The run's other pending calls of a tool approved for the rest of the run
# (the same step's, decided in any order): approved by that grant. One that
# expired meanwhile is left to its expiry, as a person's decision would be.
DECIDE_BY_STANDING = Statement(
    "decide_by_standing",
    """
    UPDATE approvals SET decision = 'approved',
                         decided_at = CAST(:at AS timestamptz), decided_by = CAST(:by AS text),
                         standing_from = CAST(:approval_id AS uuid)
     WHERE run_id = CAST(:run_id AS uuid) AND tool_name = CAST(:tool_name AS text)
       AND kind = 'approval' AND decision IS NULL
       AND expires_at > CAST(:at AS timestamptz)
    RETURNING *
    """,
)

STANDING_APPROVALS = Statement(
    "standing_approvals",
    "SELECT * FROM standing_approvals WHERE run_id = CAST(:run_id AS uuid) ORDER BY granted_at",
)

LOCK_CHECKPOINT = Statement(
    "lock_checkpoint",
    """
    SELECT step_index, message_count, finish_reason FROM checkpoints
     WHERE run_id = CAST(:run_id AS uuid) FOR UPDATE
    """,
)

# A decision's response appended to the checkpoint at the same step index.
APPEND_MESSAGE = Statement(
    "append_message",
    """
    WITH m AS (
        INSERT INTO messages (run_id, seq, body, step_index)
        VALUES (CAST(:run_id AS uuid), CAST(:seq AS int), CAST(:body AS json),
                CAST(:step_index AS int))
        ON CONFLICT (run_id, seq) DO UPDATE
           SET body = EXCLUDED.body, step_index = EXCLUDED.step_index
    ), gone AS (
        DELETE FROM messages
         WHERE run_id = CAST(:run_id AS uuid) AND seq > CAST(:seq AS int)
    )
    UPDATE checkpoints SET message_count = CAST(:seq AS int) + 1, created_at = now()
     WHERE run_id = CAST(:run_id AS uuid)
    """,
)

# Whether the run still waits for anything once this decision is in (the
# rule of every wait's end, OPEN_WAITS: children count too).
STILL_OPEN = Statement(
    "still_open",
    """
    SELECT (
        EXISTS (SELECT 1 FROM approvals AS oa
                 WHERE oa.run_id = CAST(:run_id AS uuid) AND oa.decision IS NULL)
        OR EXISTS (SELECT 1 FROM runs AS oc
                    WHERE oc.parent_id = CAST(:run_id AS uuid)
                      AND NOT oc.status IN ('completed', 'failed', 'cancelled'))) AS open
    """,
)

FINISH_WAIT = Statement(
    "finish_wait",
    """
    UPDATE steps SET finished_at = CAST(:at AS timestamptz), output = CAST(:output AS json)
     WHERE run_id = CAST(:run_id AS uuid) AND kind = 'wait' AND index = CAST(:index AS int)
    """,
)

# The last decision queues the run again (not an outcome: the run was not running).
RESUME = Statement(
    "resume",
    """
    UPDATE runs SET status = CAST(:status AS text), enqueued_at = CAST(:at AS timestamptz),
                    updated_at = now()
     WHERE id = CAST(:run_id AS uuid)
    """,
)

RECORD_NOTIFICATION = Statement(
    "record_notification",
    """
    UPDATE approvals
       SET attempts = attempts + 1,
           notified_at = CASE WHEN CAST(:accepted AS bool) THEN now() ELSE notified_at END,
           next_notify_at = CASE WHEN CAST(:accepted AS bool) THEN next_notify_at
                                 ELSE CAST(:retry_at AS timestamptz) END
     WHERE approval_id = CAST(:approval_id AS uuid)
    RETURNING approval_id
    """,
)

MARK_NOTIFIED = Statement(
    "mark_notified",
    """
    UPDATE approvals SET notified_at = now()
     WHERE approval_id = ANY(CAST(:approval_ids AS uuid[]))
    """,
)

# The approvals inbox: what waits for a person, oldest first (a run that is
# not waiting any more has nobody to ask).
PENDING_APPROVALS = Statement(
    "pending_approvals",
    """
    SELECT a.* FROM approvals AS a JOIN runs AS r ON r.id = a.run_id
     WHERE a.decision IS NULL AND r.status = 'waiting'
       AND (CAST(:agent AS text) IS NULL OR r.agent = CAST(:agent AS text))
     ORDER BY a.created_at, a.approval_id LIMIT CAST(:limit AS int)
    """,
)


RUNS_BY_IDS = Statement(
    "runs_by_ids",
    """
    SELECT r.*, w.approval_id AS w_approval_id, w.tool_name AS w_tool_name,
           w.input AS w_input, w.expires_at AS w_expires_at, w.token_id AS w_token_id,
           w.notified_at AS w_notified_at, w.kind AS w_kind
      FROM runs AS r
      LEFT JOIN LATERAL (
           SELECT a.approval_id, a.tool_name, a.input, a.expires_at, a.token_id, a.notified_at,
                  a.kind
             FROM approvals AS a
            WHERE a.run_id = r.id AND a.decision IS NULL
              AND r.status = 'waiting'
            ORDER BY a.created_at, a.approval_id
            LIMIT 1) AS w ON true
     WHERE r.id = ANY(CAST(:ids AS uuid[]))
    """,
)

CHECKPOINT_MESSAGES_BY_RUN_IDS = Statement(
    "checkpoint_messages_by_run_ids",
    """
    SELECT c.run_id,
           COALESCE((SELECT json_agg(m.body ORDER BY m.seq) FROM messages AS m
                      WHERE m.run_id = c.run_id AND m.seq < c.message_count), '[]') AS messages
      FROM checkpoints AS c WHERE c.run_id = ANY(CAST(:ids AS uuid[]))
    """,
)


@dataclass(frozen=True)
class CancelResult:
    run: Run
    action: CancelAction
    next_in_key: str | None = None
    # Its parent, let out of its wait by this cancel (store/pg/base.RESUME_IF_DONE).
    resumed: tuple[str, ...] = ()
    # Its descendants (child runs that are not detached, and theirs) the cancel
    # reached: those executing were asked to stop (their owners are to be told).
    stopping: tuple[str, ...] = ()


@dataclass(frozen=True)
class DecisionResult:
    approval: Approval
    run: Run
    resumed: bool
    # The run's other pending calls of the tool that this decision approved
    # for the rest of the run decided with it.
    also: tuple[Approval, ...] = ()
    # The run, failed by a denial its request says ends it (on_deny="fail").
    ended: Ended | None = None


@dataclass(frozen=True)
class RunForReview:
    """A run as a person judges what it asks (the approvals inbox): the run,
    the messages of its checkpoint (none before its first step) and its
    approvals."""

    run: Run
    messages: list[Message]
    approvals: list[Approval]


class PgApprovals(PgBase):
    def _lock_run(
        self, tx: Tx, run_id: str, now: datetime | None = None
    ) -> tuple[RunStatus, datetime]:
        row = tx.first(LOCK_RUN, {"run_id": run_id, "now": now})
        if row is None:
            self._require_run(tx, run_id)  # raises RunNotFound
        assert row is not None
        return RunStatus(row["status"]), row["now"]

    def _end_by_id(self, tx: Tx, run_id: str, outcome: Outcome, *, cancel: bool) -> None:
        params = {
            "run_id": run_id,
            "cancel": cancel,
            **outcome_params(outcome, run_id, self.sealing),
        }
        tx.execute(END_BY_ID, params)
        tx.execute(WITHDRAW, {"run_id": run_id, "withdrawn": Decision.WITHDRAWN.value})

    def _sealed(self, value: object, column: str, approval_id: str) -> str | None:
        """A person's edit or answer as its column stores it."""
        if value is None:
            return None
        return dumps(self.sealing.seal(value, "approvals", column, approval_id))

    def request_cancel(self, run_id: str, *, by: str | None = None) -> CancelResult:
        """Cancel the run, or ask its execution to stop, and the same for its
        descendants that are not detached; ``by`` whom (kept from the first
        to ask)."""
        run_id = check_run_id(run_id)
        by = check_actor(by)
        result = self._cancel_one(run_id, by)
        return replace(result, stopping=self._cancel_descendants(run_id, by))

    def _cancel_one(self, run_id: str, by: str | None) -> CancelResult:
        with self.db.tx() as tx:
            status, _ = self._lock_run(tx, run_id)
            action = cancel_action(status)
            if action is not CancelAction.ENDED and by is not None:
                tx.execute(CANCELLED_BY, {"run_id": run_id, "by": by})
            if action is CancelAction.CANCELLED:
                self._end_by_id(tx, run_id, cancel_outcome(), cancel=True)
            elif action is CancelAction.REQUESTED:
                tx.execute(REQUEST_CANCEL, {"run_id": run_id})
        if action is CancelAction.CANCELLED:
            self._committed(run_id)
            ended = self._after_end(run_id, cancel_outcome())
            assert ended is not None
            return CancelResult(ended.run, action, ended.next_in_key, ended.resumed)
        return CancelResult(self.get_run(run_id), action)

    def _cancel_descendants(self, run_id: str, by: str | None) -> tuple[str, ...]:
        """Cancel the run's live descendants that are not detached (runner/core/children.py),
        a level at a time, however deep the tree; the executing ones among
        them are asked to stop, and returned. The levels are read through
        runs that ended already, so a cancel repeated after one that
        stopped part way (a process that died) reaches what that one left.
        The run's own cancel is committed first: a child it starts from now
        on is refused (``start_children`` reads the parent's cancel_requested)."""
        stopping: list[str] = []
        level = [run_id]
        while level:
            rows = self.db.rows(UNDETACHED_CHILDREN, {"ids": level})
            level = [str(row["id"]) for row in rows]
            for row in rows:
                if RunStatus(row["status"]).ended:
                    continue
                result = self._cancel_one(str(row["id"]), by)
                if result.action is CancelAction.REQUESTED:
                    stopping.append(result.run.id)
        return tuple(stopping)

    def fail_waiting(self, run_id: str, error: RunError) -> Ended:
        outcome = Outcome(RunStatus.FAILED, error=error)
        with self.db.tx() as tx:
            status, _ = self._lock_run(tx, run_id)
            check_fail_waiting(run_id, status)
            self._end_by_id(tx, run_id, outcome, cancel=False)
        self._committed(run_id)
        ended = self._after_end(run_id, outcome)
        assert ended is not None
        return ended

    def approvals(self, run_id: str) -> list[Approval]:
        run_id = check_run_id(run_id)
        return [
            approval_from_row(r, sealing=self.sealing)
            for r in self.db.rows(RUN_APPROVALS, {"run_id": run_id})
        ]

    def pending_approvals(self, limit: int = 50, agent: str | None = None) -> list[Approval]:
        rows = self.db.rows(PENDING_APPROVALS, {"limit": limit, "agent": agent})
        return [approval_from_row(r, sealing=self.sealing) for r in rows]

    def runs_for_review(self, run_ids: Sequence[str]) -> dict[str, RunForReview]:
        ids = list(dict.fromkeys(i for i in run_ids if is_canonical_id(i)))
        if not ids:
            return {}
        with self.db.tx() as tx:
            runs = [
                run_from_row(r, sealing=self.sealing) for r in tx.rows(RUNS_BY_IDS, {"ids": ids})
            ]
            messages = {
                str(r["run_id"]): self.sealing.opened_messages(r["messages"], str(r["run_id"]))
                for r in tx.rows(CHECKPOINT_MESSAGES_BY_RUN_IDS, {"ids": ids})
            }
            approvals: dict[str, list[Approval]] = {}
            for row in tx.rows(APPROVALS_BY_RUN_IDS, {"ids": ids}):
                approval = approval_from_row(row, sealing=self.sealing)
                approvals.setdefault(approval.run_id, []).append(approval)
        return {
            run.id: RunForReview(run, messages.get(run.id, []), approvals.get(run.id, []))
            for run in runs
        }

    def get_approval(self, approval_id: str) -> Approval:
        with self.db.tx() as tx:
            return self._approval(tx, approval_id, lock=False)

    def _approval(self, tx: Tx, approval_id: str, *, lock: bool) -> Approval:
        approval_id = check_approval_id(approval_id)
        row = tx.first(LOCK_APPROVAL if lock else APPROVAL, {"approval_id": approval_id})
        if row is None:
            raise ApprovalNotFound(f"no approval with id {approval_id!r}")
        return approval_from_row(row, sealing=self.sealing)

    def standing_approvals(self, run_id: str) -> list[StandingApproval]:
        """The tools a person approved for the rest of the run, oldest first."""
        run_id = check_run_id(run_id)
        return [standing_from_row(r) for r in self.db.rows(STANDING_APPROVALS, {"run_id": run_id})]

    def decide(
        self,
        approval_id: str,
        decision: Decision,
        reason: str | None,
        response: Callable[[Approval], Message],
        *,
        allow_expired: bool = False,
        now: datetime | None = None,
        by: str | None = None,
        arguments: JSON = None,
        answer: JSON = None,
        for_run: bool = False,
        failure: RunError | None = None,
    ) -> DecisionResult:
        """Record a person's (or the engine's) decision of a request, with the
        history's record of it (``response(decided)``, appended to the
        checkpoint at its step); with the last one, queue the run again.
        ``arguments``: the edited arguments an approval runs with; ``answer``:
        a question's; ``for_run``: the tool is approved for the rest of the
        run, and its other pending calls with it. A denial whose request says
        ``on_deny="fail"`` fails the run instead (``DecisionResult.ended``),
        as does a denial given a ``failure`` (a person failing the run from
        the decision), with that error."""
        with self.db.tx() as tx:
            # The run row first, then its approvals (the lock order everywhere).
            # An approval's run never changes, so reading it unlocked first is safe.
            run_id = self._approval(tx, approval_id, lock=False).run_id
            status, at = self._lock_run(tx, run_id, now)
            approval = self._approval(tx, approval_id, lock=True)
            check_decidable(approval, status, at, allow_expired)
            check_decision(
                approval,
                decision,
                arguments=arguments,
                answer=answer,
                for_run=for_run,
                expiry=allow_expired,
            )
            params = {
                "approval_id": approval_id,
                "decision": decision.value,
                "reason": self.sealing.seal(reason, "approvals", "reason", approval_id),
                "at": at,
                "by": by,
                "arguments": self._sealed(arguments, "arguments", approval_id),
                "answer": self._sealed(answer, "answer", approval_id),
                "for_run": for_run,
            }
            decided = approval_from_row(_one(tx.first(DECIDE, params)), sealing=self.sealing)
            if failure is None or decision is not Decision.DENIED:
                failure = denial_failure(decided, expiry=allow_expired)
            if failure is not None:
                outcome = Outcome(RunStatus.FAILED, error=failure)
                self._end_by_id(tx, run_id, outcome, cancel=False)
            else:
                also = self._grant(tx, decided, at) if for_run else []
                self._append_responses(tx, run_id, [response(a) for a in (decided, *also)])
                still_open = bool(_one(tx.first(STILL_OPEN, {"run_id": run_id}))["open"])
                if not still_open:
                    tx.execute(
                        FINISH_WAIT,
                        {
                            "run_id": run_id,
                            "index": approval.step_index,
                            "at": at,
                            "output": dumps({"resumed": True}),
                        },
                    )
                    tx.execute(
                        RESUME, {"run_id": run_id, "status": RunStatus.QUEUED.value, "at": at}
                    )
                run = self._get_run(tx, run_id)
        self._committed(run_id)
        if failure is not None:
            ended = self._after_end(run_id, outcome)
            assert ended is not None
            return DecisionResult(decided, ended.run, resumed=False, ended=ended)
        return DecisionResult(decided, run, resumed=not still_open, also=tuple(also))

    def _grant(self, tx: Tx, decided: Approval, at: datetime) -> list[Approval]:
        """``decided``'s tool approved for the rest of its run, by whom decided
        it; the run's other pending calls of the tool, decided by that grant."""
        grant = {
            "run_id": decided.run_id,
            "tool_name": decided.tool_name,
            "approval_id": decided.approval_id,
            "at": at,
            "by": decided.decided_by,
        }
        tx.execute(GRANT_STANDING, grant)
        return [
            approval_from_row(row, sealing=self.sealing)
            for row in tx.rows(DECIDE_BY_STANDING, grant)
        ]

    def _append_responses(self, tx: Tx, run_id: str, responses: list[Message]) -> None:
        """The decisions' records, appended to the checkpoint at its step index
        (the seed's replace rule: an equal index replaces)."""
        cp = _one(tx.first(LOCK_CHECKPOINT, {"run_id": run_id}))
        count = cp["message_count"]
        assert isinstance(count, int)
        for offset, body in enumerate(responses):
            tx.execute(
                APPEND_MESSAGE,
                {
                    "run_id": run_id,
                    "seq": count + offset,
                    "body": dumps(
                        self.sealing.seal(body, "messages", "body", run_id, count + offset)
                    ),
                    "step_index": cp["step_index"],
                },
            )

    def record_notification(
        self, approval_id: str, *, accepted: bool, retry_at: datetime | None
    ) -> None:
        approval_id = check_approval_id(approval_id)
        params = {"approval_id": approval_id, "accepted": accepted, "retry_at": retry_at}
        if self.db.first(RECORD_NOTIFICATION, params) is None:
            raise ApprovalNotFound(f"no approval with id {approval_id!r}")

    def mark_notified(self, approval_ids: list[str]) -> None:
        if approval_ids:
            self.db.execute(MARK_NOTIFIED, {"approval_ids": approval_ids})


def _one(row: dict[str, object] | None) -> dict[str, object]:
    assert row is not None  # the row was locked earlier in this transaction
    return row
