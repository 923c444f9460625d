"""Retry and fork: the checks and what a fork copies are ``store/retry_fork.py``'s;
what a retry resets and reopens is written here, in ``REQUEUE`` and
``REOPEN_APPROVALS``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from store.db import Row, Tx, dumps
from store.errors import InvalidTransition, RanEffect, RunNotFound
from store.models import Decision, EffectStatus, NewRun, Run, RunAttempt
from store.pg.base import PgBase
from store.pg.runs import LLM_STEP, new_run_params
from store.retry_fork import (
    attempt_of,
    check_existing_fork,
    check_extra_steps,
    check_fork_effects,
    check_fork_step,
    check_model,
    check_new_id,
    fork_finish_reason,
    fork_messages,
    fork_state,
    may_retry,
)
from store.rows import attempt_from_row, run_from_row, step_from_row
from store.rules import VERSION_CHANGED
from store.statements import Statement
from store.validate import check_new_run, check_run_id

# ------------------------------------------------------------------- retry

# The run row first, as every writer of another process takes it (the lock
# order of store/pg/approvals.py); ``now`` is the transaction's clock.
LOCK_FOR_RETRY = Statement(
    "lock_for_retry",
    "SELECT *, now() AS now FROM runs WHERE id = CAST(:run_id AS uuid) FOR UPDATE",
)

ATTEMPT_COUNT = Statement(
    "attempt_count",
    "SELECT count(*) AS n FROM run_attempts WHERE run_id = CAST(:run_id AS uuid)",
)

ADD_ATTEMPT = Statement(
    "add_attempt",
    """
    INSERT INTO run_attempts (run_id, attempt, status, error_code, error_message, steps_used,
                              input_tokens, output_tokens, started_at, finished_at,
                              extra_steps, retried_at)
    VALUES (CAST(:run_id AS uuid), CAST(:attempt AS int), CAST(:status AS text),
            CAST(:error_code AS text), CAST(:error_message AS text), CAST(:steps_used AS int),
            CAST(:input_tokens AS bigint), CAST(:output_tokens AS bigint),
            CAST(:started_at AS timestamptz), CAST(:finished_at AS timestamptz),
            CAST(:extra_steps AS int), CAST(:retried_at AS timestamptz))
    """,
)

# The approvals of the checkpoint's step that a retry opens again: those the
# run's end withdrew (or left undecided), so that the run, which re-pauses on the
# history's unanswered request, waits for them again. Each keeps its id, so the
# history's request and any link still name it; its lifetime starts afresh
# from now, and it is notified again (if the agent has a notifier, which
# next_notify_at says).
REOPEN_APPROVALS = Statement(
    "reopen_approvals",
    """
    UPDATE approvals AS a
       SET decision = NULL, reason = NULL, decided_at = NULL, decided_by = NULL,
           arguments = NULL, answer = NULL, for_run = false, standing_from = NULL,
           expires_at = now() + (a.expires_at - a.created_at), created_at = now(),
           notified_at = NULL, attempts = 0,
           next_notify_at = CASE WHEN a.next_notify_at IS NULL THEN NULL ELSE now() END
      FROM checkpoints AS c
     WHERE a.run_id = CAST(:run_id AS uuid) AND c.run_id = a.run_id
       AND a.step_index = c.step_index
       AND (a.decision IS NULL OR a.decision = CAST(:withdrawn AS text))
    """,
)

# A retry starts without the tools people approved for the rest of the run,
# unless the one retrying keeps them: they asked afresh who approves what.
DROP_STANDING = Statement(
    "drop_standing", "DELETE FROM standing_approvals WHERE run_id = CAST(:run_id AS uuid)"
)

# A fork takes its origin's standing approvals only when asked to.
COPY_STANDING = Statement(
    "copy_standing",
    """
    INSERT INTO standing_approvals (run_id, tool_name, approval_id, granted_by, granted_at)
    SELECT CAST(:new_id AS uuid), tool_name, approval_id, granted_by, granted_at
      FROM standing_approvals WHERE run_id = CAST(:run_id AS uuid)
    """,
)

# Back to the queue from the checkpoint: the last outcome cleared (the attempt
# keeps it), the cancel request, the takeover count, the agent-missing grace and
# any retry wait reset, the start time cleared so that the next claim stamps
# this attempt's start, and the budget widened. The claim was released when
# the run ended.
REQUEUE = Statement(
    "requeue",
    """
    UPDATE runs
       SET status = 'queued',
           output = NULL, error_code = NULL, error_message = NULL,
           started_at = NULL, finished_at = NULL,
           cancel_requested = false,
           takeovers = 0,
           agent_missing_since = NULL,
           retry_attempts = 0, retry_at = NULL, retry_since = NULL, retry_error = NULL,
           extra_steps = extra_steps + CAST(:extra_steps AS int),
           -- A run that failed because its agent's version changed starts
           -- again on the version of the worker that takes it.
           version = CASE WHEN error_code = CAST(:version_changed AS text) THEN NULL
                          ELSE version END,
           enqueued_at = now(),
           updated_at = now()
     WHERE id = CAST(:run_id AS uuid)
    """,
)

ATTEMPTS = Statement(
    "attempts",
    "SELECT * FROM run_attempts WHERE run_id = CAST(:run_id AS uuid) ORDER BY attempt",
)

# -------------------------------------------------------------------- fork

# The original's row, in SHARE mode: every writer of a run's checkpoint,
# messages and steps updates or locks that row in the same transaction, so none
# can commit until the fork does. Taken before the reads below, which therefore
# see the history as the last such writer committed it.
LOCK_FOR_FORK = Statement(
    "lock_for_fork",
    "SELECT id FROM runs WHERE id = CAST(:run_id AS uuid) FOR SHARE",
)

FORK_SOURCE = Statement(
    "fork_source",
    """
    SELECT r.*, c.step_index AS cp_step, c.message_count AS cp_count,
           c.finish_reason AS cp_finish
      FROM runs AS r LEFT JOIN checkpoints AS c ON c.run_id = r.id
     WHERE r.id = CAST(:run_id AS uuid)
    """,
)

FORK_HISTORY = Statement(
    "fork_history",
    """
    SELECT seq, step_index, body FROM messages
     WHERE run_id = CAST(:run_id AS uuid) AND seq < CAST(:count AS int)
     ORDER BY seq
    """,
)

# The state the run had after step :at (the newest state step up to it).
FORK_STATE = Statement(
    "fork_state",
    """
    SELECT run_id, kind, index, tool_call_id, output FROM steps
     WHERE run_id = CAST(:run_id AS uuid) AND kind = 'state' AND index <= CAST(:at AS int)
     ORDER BY id DESC LIMIT 1
    """,
)

# The llm steps after step :at, whose messages hold the calls of the effects
# that may have taken place since (an effect's key is ``{run_id}:{call_id}``,
# unique within the run). The step's journal write records that step before
# any of its effects starts, so this finds an effect whose step's commit never
# happened, too. Read and matched in Python: the messages may be sealed.
FORK_CALLS = Statement(
    "fork_calls",
    """
    SELECT run_id, kind, index, tool_call_id, output FROM steps
     WHERE run_id = CAST(:run_id AS uuid) AND kind = 'llm' AND index > CAST(:at AS int)
     ORDER BY index
    """,
)

# The run's effects that may have taken place (completed, or started with an
# unknown outcome; a failed one did nothing to repeat).
FORK_EFFECTS = Statement(
    "fork_effects",
    """
    SELECT key, tool, status FROM effects
     WHERE run_id = CAST(:run_id AS uuid) AND status <> CAST(:failed_effect AS text)
     ORDER BY started_at, key
    """,
)

# The state steps up to :at, oldest first (a fork copies them).
FORK_STATE_STEPS = Statement(
    "fork_state_steps",
    """
    SELECT kind, index, name, tool_call_id, input, output, error, input_tokens,
           output_tokens, started_at, finished_at
      FROM steps
     WHERE run_id = CAST(:run_id AS uuid) AND kind = 'state' AND index <= CAST(:at AS int)
     ORDER BY id
    """,
)

# A run that already has the fork's id, or its trigger id for its agent.
EXISTING_RUN = Statement(
    "existing_run",
    """
    SELECT * FROM runs
     WHERE id = CAST(:id AS uuid)
        OR (agent = CAST(:agent AS text) AND trigger_id = CAST(:trigger_id AS text))
     ORDER BY id = CAST(:id AS uuid) DESC
     LIMIT 1
    """,
)

# A fork keeps its original's tenant and priority (a retry, the same row, keeps
# them too).
CREATE_FORK = Statement(
    "create_fork",
    """
    INSERT INTO runs (id, agent, status, trigger, trigger_id, concurrency_key, thread,
                      trace_context, enqueued_at, state, steps_used, extra_steps, model,
                      forked_from, forked_at_step, tenant, priority)
    SELECT CAST(:id AS uuid), CAST(:agent AS text), 'queued',
           CAST(:trigger AS json), CAST(:trigger_id AS text), CAST(:key AS text),
           CAST(:thread AS text), CAST(:trace_context AS json), now(), CAST(:state AS json),
           CAST(:at AS int), CAST(:at AS int), CAST(:model AS text), o.id,
           CAST(:at AS int), o.tenant, o.priority
      FROM runs AS o WHERE o.id = CAST(:run_id AS uuid)
    ON CONFLICT DO NOTHING
    RETURNING *
    """,
)

# The fork's history: the original's first messages (exactly, step numbers
# included), its state steps up to the fork's step, and a checkpoint there;
# each sealed for the fork's row when there is a key (store/sealing.py).
COPY_HISTORY = Statement(
    "copy_history",
    """
    WITH m AS (
        INSERT INTO messages (run_id, seq, body, step_index)
        SELECT CAST(:new_id AS uuid), m.seq, m.body, m.step_index
          FROM json_to_recordset(CAST(:messages AS json)) AS m(seq int, body json, step_index int)
    ), s AS (
        INSERT INTO steps (run_id, kind, index, name, tool_call_id, input, output, error,
                           input_tokens, output_tokens, started_at, finished_at)
        SELECT CAST(:new_id AS uuid), s.kind, s.index, s.name, s.tool_call_id, s.input,
               s.output, s.error, s.input_tokens, s.output_tokens, s.started_at, s.finished_at
          FROM ROWS FROM (json_to_recordset(CAST(:steps AS json)) AS (
               kind text, index int, name text, tool_call_id text, input json, output json,
               error json, input_tokens bigint, output_tokens bigint, started_at timestamptz,
               finished_at timestamptz)) WITH ORDINALITY
               AS s(kind, index, name, tool_call_id, input, output, error, input_tokens,
                    output_tokens, started_at, finished_at, ord)
         ORDER BY s.ord
    )
    INSERT INTO checkpoints (run_id, step_index, message_count, finish_reason)
    VALUES (CAST(:new_id AS uuid), CAST(:at AS int), CAST(:count AS int),
            CAST(:finish_reason AS text))
    """,
)


def erased_refusal(run: Run, what: str) -> str:
    """Why an erased run cannot be retried or forked: its history is gone."""
    when = "" if run.erased_at is None else f" at {run.erased_at.isoformat(timespec='seconds')}"
    return (
        f"run {run.id} was erased{when} by {run.erased_by}: its history is gone,"
        f" so it cannot be {what}"
    )


@dataclass(frozen=True)
class RetryResult:
    run: Run
    retried: bool


class PgRetryFork(PgBase):
    def retry_run(
        self, run_id: str, extra_steps: int = 0, *, keep_standing: bool = False
    ) -> RetryResult:
        """Queue an ended run again from its checkpoint (``store/retry_fork.py``
        says which); ``keep_standing``: the tools approved for the rest of the
        run stay approved (by default the retry asks again)."""
        run_id = check_run_id(run_id)
        extra_steps = check_extra_steps(extra_steps)
        with self.db.tx() as tx:
            row = tx.first(LOCK_FOR_RETRY, {"run_id": run_id})
            if row is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            run = run_from_row(row, sealing=self.sealing)
            if run.erased_at is not None:
                raise InvalidTransition(erased_refusal(run, "retried"))
            if not may_retry(run, extra_steps):
                return RetryResult(self._get_run(tx, run_id), retried=False)
            count = tx.first(ATTEMPT_COUNT, {"run_id": run_id})
            assert count is not None
            attempt = attempt_of(run, int(count["n"]) + 1, extra_steps, row["now"])
            tx.execute(ADD_ATTEMPT, _attempt_params(run_id, attempt))
            tx.execute(REOPEN_APPROVALS, {"run_id": run_id, "withdrawn": Decision.WITHDRAWN.value})
            if not keep_standing:
                tx.execute(DROP_STANDING, {"run_id": run_id})
            tx.execute(
                REQUEUE,
                {
                    "run_id": run_id,
                    "extra_steps": extra_steps,
                    "version_changed": VERSION_CHANGED,
                },
            )
            retried = self._get_run(tx, run_id)
        self._committed(run_id)
        return RetryResult(retried, retried=True)

    def attempts(self, run_id: str) -> list[RunAttempt]:
        run_id = check_run_id(run_id)
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
            return [attempt_from_row(row) for row in tx.rows(ATTEMPTS, {"run_id": run_id})]

    def attempt_count(self, run_id: str) -> int:
        """How many earlier attempts the run has (0 for a run never retried,
        or none): :meth:`attempts` counted, without reading them."""
        row = self.db.first(ATTEMPT_COUNT, {"run_id": check_run_id(run_id)})
        assert row is not None  # an aggregate always returns one row
        return int(row["n"])

    def fork_run(
        self,
        run_id: str,
        at_step: int,
        new: NewRun,
        *,
        model: str | None,
        rerun_effects: bool = False,
        keep_standing: bool = False,
    ) -> Run:
        """A new run from ``run_id``'s history after ``at_step``; with
        ``keep_standing``, the tools approved for the rest of the original
        stay approved in the fork."""
        run_id = check_run_id(run_id)
        check_new_run(new, self.max_payload_bytes)
        model = check_model(model)
        check_new_id(new.id)
        params = {**new_run_params(new, self.sealing), "model": model, "run_id": run_id}
        with self.db.tx() as tx:
            existing = tx.first(EXISTING_RUN, params)
            if existing is not None:
                return self._same_fork(tx, existing, run_id, at_step)
            if tx.first(LOCK_FOR_FORK, {"run_id": run_id}) is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            source = tx.first(FORK_SOURCE, {"run_id": run_id})
            assert source is not None  # locked above
            if source["erased_at"] is not None:
                raise InvalidTransition(
                    erased_refusal(run_from_row(source, sealing=self.sealing), "forked")
                )
            cp_step = source["cp_step"]
            at_step = check_fork_step(run_id, at_step, cp_step)
            history = tx.rows(FORK_HISTORY, {"run_id": run_id, "count": source["cp_count"]})
            bodies = self.sealing.opened_messages((r["body"] for r in history), run_id)
            messages = fork_messages(
                run_id,
                at_step,
                cp_step,
                [(r["step_index"], body) for r, body in zip(history, bodies, strict=True)],
            )
            check_fork_effects(
                run_id, at_step, self._ran_effects(tx, run_id, at_step), rerun_effects=rerun_effects
            )
            journaled = tx.first(FORK_STATE, {"run_id": run_id, "at": at_step})
            state = fork_state(
                (
                    journaled is not None,
                    self.sealing.step(journaled, run_id, opening=True)["output"]
                    if journaled
                    else None,
                ),
                at_step,
                cp_step,
                self.sealing.open(source["state"], "runs", "state", run_id),
            )
            state = self.sealing.seal(state, "runs", "state", new.id)
            row = tx.first(CREATE_FORK, {**params, "at": at_step, "state": _json_or_null(state)})
            if row is None:
                # A concurrent fork with this id or trigger id committed first
                # (the insert waited for it, so this statement sees it).
                existing = tx.first(EXISTING_RUN, params)
                assert existing is not None
                return self._same_fork(tx, existing, run_id, at_step)
            llm = tx.first(LLM_STEP, {"run_id": run_id, "index": at_step})
            llm_output = None if llm is None else step_from_row(llm, sealing=self.sealing).output
            sealed = self.sealing.messages(messages, new.id, 0)
            copied = [
                {"seq": seq, "body": body, "step_index": r["step_index"]}
                for seq, (r, body) in enumerate(zip(history, sealed, strict=False))
            ]
            steps = [
                self.sealing.step(self.sealing.step(r, run_id, opening=True), new.id)
                for r in tx.rows(FORK_STATE_STEPS, {"run_id": run_id, "at": at_step})
            ]
            tx.execute(
                COPY_HISTORY,
                {
                    "new_id": new.id,
                    "messages": dumps(copied),
                    "steps": dumps(steps),
                    "count": len(messages),
                    "at": at_step,
                    "finish_reason": fork_finish_reason(
                        at_step, cp_step, source["cp_finish"], llm_output
                    ),
                },
            )
            if keep_standing:
                tx.execute(COPY_STANDING, {"new_id": new.id, "run_id": run_id})
        fork = run_from_row(row, sealing=self.sealing)
        self._committed(fork.id)
        return fork

    def _ran_effects(self, tx: Tx, run_id: str, at_step: int) -> list[RanEffect]:
        """The effects the run journaled after step ``at_step`` that may have
        taken place, each with the step whose model call asked for it."""
        step_of: dict[str, int] = {}
        for row in tx.rows(FORK_CALLS, {"run_id": run_id, "at": at_step}):
            output = self.sealing.step(row, run_id, opening=True)["output"]
            message = output.get("message") if isinstance(output, dict) else None
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    step_of.setdefault(f"{run_id}:{call['id']}", int(row["index"]))
        ran = tx.rows(FORK_EFFECTS, {"run_id": run_id, "failed_effect": EffectStatus.FAILED.value})
        found = [
            (
                step_of[r["key"]],
                RanEffect(r["tool"], step_of[r["key"]], r["status"] == EffectStatus.COMPLETED),
            )
            for r in ran
            if r["key"] in step_of
        ]
        return [effect for _, effect in sorted(found, key=lambda pair: pair[0])]

    def _same_fork(self, tx: Tx, existing: Row, run_id: str, at_step: int) -> Run:
        check_existing_fork(run_from_row(existing, sealing=self.sealing), run_id, at_step)
        return self._get_run(tx, str(existing["id"]))  # with its wait point, if waiting


def _attempt_params(run_id: str, attempt: RunAttempt) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "attempt": attempt.attempt,
        "status": attempt.status.value,
        "error_code": attempt.error.code if attempt.error else None,
        "error_message": attempt.error.message if attempt.error else None,
        "steps_used": attempt.steps_used,
        "input_tokens": attempt.usage.input_tokens,
        "output_tokens": attempt.usage.output_tokens,
        "started_at": attempt.started_at,
        "finished_at": attempt.finished_at,
        "extra_steps": attempt.extra_steps,
        "retried_at": attempt.retried_at,
    }


def _json_or_null(value: object) -> str | None:
    return None if value is None else dumps(value)
