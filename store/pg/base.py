"""What every part of ``PostgresStore`` shares: the executor and a few reads."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from store.base import check_run_id
from store.db import Executor, Tx, dumps
from store.errors import RunNotFound
from store.models import Checkpoint, Fence, Outcome, Run, Settled
from store.queries import maintenance as qm
from store.queries import runs as qr
from store.rows import run_from_row
from store.rules import outcome_columns, wakes_key


def fence_params(fence: Fence) -> dict[str, Any]:
    return {"run_id": fence.run_id, "owner": fence.owner, "epoch": fence.epoch}


def outcome_params(outcome: Outcome | None) -> dict[str, Any]:
    """The parameters of ``store.queries.fragments.OUTCOME_SET``."""
    columns = outcome_columns(outcome)
    error = columns.error
    return {
        "o_status": None if columns.status is None else columns.status.value,
        "o_settled": columns.settled,
        "o_output": dumps(columns.output) if columns.settled else None,
        "o_code": error.code if error else None,
        "o_message": error.message if error else None,
        "o_requeue": columns.requeue,
        "o_requeue_at": columns.requeue_at,
    }


class PgBase:
    db: Executor
    max_payload_bytes: int

    @property
    def engine(self) -> sa.Engine:
        return self.db.engine

    def get_run(self, run_id: str) -> Run:
        run_id = check_run_id(run_id)
        with self.db.tx() as tx:
            return self._get_run(tx, run_id)

    def _get_run(self, tx: Tx, run_id: str) -> Run:
        row = tx.first(qr.GET_RUN, {"id": run_id})
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        return run_from_row(row)

    def _require_run(self, tx: Tx, run_id: str) -> None:
        if tx.first(qr.RUN_EXISTS, {"id": run_id}) is None:
            raise RunNotFound(f"no run with id {run_id!r}")

    def _checkpoint(self, tx: Tx, run_id: str) -> Checkpoint | None:
        row = tx.first(qr.CHECKPOINT, {"run_id": run_id})
        return None if row is None else checkpoint_from_row(run_id, row)

    def next_in_key(self, key: str) -> str | None:
        row = self.db.first(qm.NEXT_IN_KEY, {"key": key})
        return None if row is None else str(row["id"])

    def _after_settle(self, run_id: str, outcome: Outcome | None) -> Settled | None:
        if outcome is None:
            return None
        with self.db.tx() as tx:
            run = self._get_run(tx, run_id)
        next_id = None
        if run.concurrency_key and wakes_key(run.concurrency_key, run.status):
            next_id = self.next_in_key(run.concurrency_key)
        return Settled(run=run, next_in_key=next_id)


def checkpoint_from_row(run_id: str, row: dict[str, Any]) -> Checkpoint:
    return Checkpoint(
        run_id=run_id,
        step_index=row["step_index"],
        messages=row["messages"],
        created_at=row["created_at"],
        finish_reason=row["finish_reason"],
    )
