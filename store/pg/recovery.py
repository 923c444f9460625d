"""Retry and fork on Postgres: the checks and what a fork copies are
``store/recovery.py``'s; what a retry resets is ``store/queries/recovery.py``'s."""

from __future__ import annotations

from typing import Any

from store.base import RetryResult, check_payload, check_run_id
from store.db import Row, Tx, dumps
from store.errors import RanEffect, RunNotFound
from store.models import Decision, EffectStatus, NewRun, Run, RunAttempt
from store.pg.base import PgBase
from store.queries import recovery as q
from store.queries import runs as qr
from store.recovery import (
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
from store.rows import attempt_from_row, run_from_row


class PgRecovery(PgBase):
    def retry_run(self, run_id: str, extra_steps: int = 0) -> RetryResult:
        run_id = check_run_id(run_id)
        extra_steps = check_extra_steps(extra_steps)
        with self.db.tx() as tx:
            row = tx.first(q.LOCK_FOR_RETRY, {"run_id": run_id})
            if row is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            run = run_from_row(row)
            if not may_retry(run, extra_steps):
                return RetryResult(self._get_run(tx, run_id), retried=False)
            count = tx.first(q.ATTEMPT_COUNT, {"run_id": run_id})
            assert count is not None
            attempt = attempt_of(run, int(count["n"]) + 1, extra_steps, row["now"])
            tx.execute(q.ADD_ATTEMPT, _attempt_params(run_id, attempt))
            tx.execute(
                q.REOPEN_APPROVALS, {"run_id": run_id, "withdrawn": Decision.WITHDRAWN.value}
            )
            tx.execute(q.REQUEUE, {"run_id": run_id, "extra_steps": extra_steps})
            return RetryResult(self._get_run(tx, run_id), retried=True)

    def attempts(self, run_id: str) -> list[RunAttempt]:
        run_id = check_run_id(run_id)
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
            return [attempt_from_row(row) for row in tx.rows(q.ATTEMPTS, {"run_id": run_id})]

    def fork_run(
        self,
        run_id: str,
        at_step: int,
        new: NewRun,
        *,
        model: str | None,
        rerun_effects: bool = False,
    ) -> Run:
        run_id = check_run_id(run_id)
        check_payload(new, self.max_payload_bytes)
        model = check_model(model)
        params = {
            "id": check_new_id(new.id),
            "agent": new.agent,
            "trigger": dumps(new.trigger.model_dump(mode="json")),
            "trigger_id": new.trigger.id,
            "key": new.concurrency_key,
            "thread": new.thread,
            "trace_context": dumps(new.trace_context) if new.trace_context else None,
            "model": model,
            "run_id": run_id,
        }
        with self.db.tx() as tx:
            existing = tx.first(q.EXISTING_RUN, params)
            if existing is not None:
                return self._same_fork(tx, existing, run_id, at_step)
            if tx.first(q.LOCK_FOR_FORK, {"run_id": run_id}) is None:
                raise RunNotFound(f"no run with id {run_id!r}")
            source = tx.first(q.FORK_SOURCE, {"run_id": run_id})
            assert source is not None  # locked above
            cp_step = source["cp_step"]
            at_step = check_fork_step(run_id, at_step, cp_step)
            history = tx.rows(q.FORK_HISTORY, {"run_id": run_id, "count": source["cp_count"]})
            messages = fork_messages(
                run_id, at_step, cp_step, [(r["step_index"], r["body"]) for r in history]
            )
            ran = tx.rows(
                q.FORK_EFFECTS,
                {"run_id": run_id, "at": at_step, "failed_effect": EffectStatus.FAILED.value},
            )
            check_fork_effects(
                run_id,
                at_step,
                [
                    RanEffect(r["tool"], r["step_index"], r["status"] == EffectStatus.COMPLETED)
                    for r in ran
                ],
                rerun_effects=rerun_effects,
            )
            journaled = tx.first(q.FORK_STATE, {"run_id": run_id, "at": at_step})
            state = fork_state(
                (journaled is not None, journaled["output"] if journaled else None),
                at_step,
                cp_step,
                source["state"],
            )
            row = tx.first(q.CREATE_FORK, {**params, "at": at_step, "state": _json_or_null(state)})
            if row is None:
                # A concurrent fork with this id or trigger id committed first
                # (the insert waited for it, so this statement sees it).
                existing = tx.first(q.EXISTING_RUN, params)
                assert existing is not None
                return self._same_fork(tx, existing, run_id, at_step)
            llm = tx.first(qr.LLM_STEP, {"run_id": run_id, "index": at_step})
            tx.execute(
                q.COPY_HISTORY,
                {
                    "new_id": new.id,
                    "run_id": run_id,
                    "count": len(messages),
                    "at": at_step,
                    "finish_reason": fork_finish_reason(
                        at_step, cp_step, source["cp_finish"], llm["output"] if llm else None
                    ),
                },
            )
            return run_from_row(row)

    def _same_fork(self, tx: Tx, existing: Row, run_id: str, at_step: int) -> Run:
        check_existing_fork(run_from_row(existing), run_id, at_step)
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
