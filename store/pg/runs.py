"""Runs and what they hold, read from Postgres; creating a run."""

from __future__ import annotations

from datetime import datetime

from store.base import StartPoint, ThreadStart, check_page_from, check_payload, check_run_id
from store.db import dumps
from store.events import RunEvent
from store.models import Checkpoint, Effect, NewRun, Run, RunStatus, Step
from store.pg.base import PgBase, checkpoint_from_row
from store.queries import events as qe
from store.queries import runs as q
from store.rows import effect_from_row, event_from_row, run_from_row, step_from_row


class PgRuns(PgBase):
    def create_run(self, new: NewRun) -> tuple[Run, bool]:
        check_payload(new, self.max_payload_bytes)
        params = {
            "id": new.id,
            "agent": new.agent,
            "trigger": dumps(new.trigger.model_dump(mode="json")),
            "trigger_id": new.trigger.id,
            "key": new.concurrency_key,
            "thread": new.thread,
            "trace_context": dumps(new.trace_context) if new.trace_context else None,
        }
        with self.db.tx() as tx:
            row = tx.first(q.CREATE_RUN, params)
            if row is not None:
                return run_from_row(row), True
            existing = tx.first(q.RUN_BY_TRIGGER, params)
            assert existing is not None  # the conflict was on (agent, trigger_id)
            return run_from_row(existing), False

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        agent: str | None = None,
        thread: str | None = None,
        limit: int = 50,
        before: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[Run]:
        params = {
            "status": None if status is None else RunStatus(status).value,
            "agent": agent,
            "thread": thread,
            "limit": limit,
            "before": check_page_from(before),
            "since": since,
            "until": until,
        }
        return [run_from_row(row) for row in self.db.rows(q.LIST_RUNS, params)]

    def run_counts(self, agent: str | None = None) -> dict[RunStatus, int]:
        rows = self.db.rows(q.RUN_COUNTS, {"agent": agent})
        return {RunStatus(row["status"]): int(row["runs"]) for row in rows}

    def steps(self, run_id: str) -> list[Step]:
        run_id = check_run_id(run_id)
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
            return [step_from_row(row) for row in tx.rows(q.STEPS, {"run_id": run_id})]

    def events(self, run_id: str, after: int | None = None, limit: int = 1000) -> list[RunEvent]:
        run_id = check_run_id(run_id)
        params = {"run_id": run_id, "after": after or 0, "limit": limit}
        events = [event_from_row(row) for row in self.db.rows(qe.EVENTS_AFTER, params)]
        if not events:
            with self.db.tx() as tx:
                self._require_run(tx, run_id)  # none yet, or no such run
        return events

    def llm_step(self, run_id: str, index: int) -> Step | None:
        row = self.db.first(q.LLM_STEP, {"run_id": run_id, "index": index})
        return None if row is None else step_from_row(row)

    def checkpoint(self, run_id: str) -> Checkpoint | None:
        run_id = check_run_id(run_id)
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
            return self._checkpoint(tx, run_id)

    def start_point(self, run_id: str) -> StartPoint:
        row = self.db.first(q.START_POINT, {"run_id": run_id})
        assert row is not None  # the statement selects from a one-row VALUES
        checkpoint = None
        if row["step_index"] is not None:
            checkpoint = checkpoint_from_row(run_id, row)
        journaled = None if row["kind"] is None else step_from_row(row)
        return StartPoint(checkpoint=checkpoint, journaled=journaled)

    def effect(self, run_id: str, key: str) -> Effect | None:
        row = self.db.first(q.EFFECT, {"run_id": run_id, "key": key})
        return None if row is None else effect_from_row(row)

    def thread_start(self, thread: str, before_run_id: str) -> ThreadStart | None:
        with self.db.tx() as tx:
            row = tx.first(q.THREAD_START, {"thread": thread, "before": before_run_id})
            if row is None:
                return None
            checkpoint = self._checkpoint(tx, str(row["id"]))
            messages = checkpoint.messages if checkpoint else []
            return ThreadStart(run_id=str(row["id"]), messages=messages, state=row["state"])
