"""Where ``MemoryStore`` keeps its rows, and what every part of it shares."""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from store.base import check_run_id
from store.config import DEFAULT_MAX_PAYLOAD_BYTES
from store.errors import LeaseLostError, RunNotFound
from store.events import EventType, RunEvent, approval_changes, run_changes
from store.models import (
    Approval,
    Checkpoint,
    Effect,
    Fence,
    Message,
    NewRun,
    Outcome,
    Run,
    RunAttempt,
    RunStatus,
    Settled,
    Step,
    StepCommit,
    StepKind,
    StepRecord,
    Usage,
    utcnow,
)
from store.rules import check_checkpoint, key_head, outcome_columns, wakes_key

Changes = list[tuple[EventType, dict[str, Any]]]


class _Table(dict[str, Any]):
    """A table whose every write derives the run's events from the old and the
    new row, as the Postgres triggers do (store/events.py)."""

    def __init__(
        self,
        derive: Callable[[Any, Any], Changes],
        record: Callable[[str, Changes], None],
    ) -> None:
        super().__init__()
        self._derive = derive
        self._record = record

    def __setitem__(self, key: str, value: Any) -> None:
        old = self.get(key)
        super().__setitem__(key, value)
        changes = self._derive(old, value)
        if changes:
            self._record(value.id if isinstance(value, Run) else value.run_id, changes)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        # A snapshot of the rows (tests compare them), without the callbacks.
        return {key: copy.deepcopy(value, memo) for key, value in self.items()}

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]


class MemBase:
    """The tables: plain dicts under one lock."""

    def __init__(
        self,
        *,
        clock: Callable[[], datetime] = utcnow,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.clock = clock
        self.max_payload_bytes = max_payload_bytes
        self._lock = threading.RLock()
        # One counter of ids for steps and the other events (store/events.py).
        self._step_ids = itertools.count(1)
        self._events: dict[str, list[RunEvent]] = {}
        self._runs: dict[str, Run] = _Table(run_changes, self._record_events)
        self._steps: dict[str, list[Step]] = {}
        self._messages: dict[str, list[Message]] = {}
        # The step that wrote each message, index for index (a fork's history).
        self._message_steps: dict[str, list[int]] = {}
        # Earlier attempts of retried runs (store/mem/recovery.py).
        self._attempts: dict[str, list[RunAttempt]] = {}
        self._checkpoints: dict[str, tuple[int, int, str | None, datetime]] = {}
        self._effects: dict[tuple[str, str], Effect] = {}
        self._approvals: dict[str, Approval] = _Table(approval_changes, self._record_events)
        # The epoch survives settling (which clears the claim): it only ever rises.
        self._epochs: dict[str, int] = {}
        self._agent_missing_since: dict[str, datetime] = {}
        self._last_tick: datetime | None = None  # tick_mark (store/schema.py)

    def _record_events(self, run_id: str, changes: Changes) -> None:
        now = self._now()
        log = self._events.setdefault(run_id, [])
        log.extend(
            RunEvent(run_id, kind, data, next(self._step_ids), now) for kind, data in changes
        )

    def _new_run(self, new: NewRun, **fields: Any) -> Run:
        """A queued run as ``create_run`` and ``fork_run`` store it."""
        now = self._now()
        return Run(
            id=new.id,
            agent=new.agent,
            status=RunStatus.QUEUED,
            trigger=new.trigger,
            usage=Usage(),
            created_at=now,
            updated_at=now,
            concurrency_key=new.concurrency_key,
            thread=new.thread,
            enqueued_at=now,
            trace_context=dict(new.trace_context) if new.trace_context else None,
            **fields,
        )

    def _now(self, now: datetime | None = None) -> datetime:
        return now or self.clock()

    def _run(self, run_id: str) -> Run:
        run = self._runs.get(check_run_id(run_id))
        if run is None:
            raise RunNotFound(f"no run with id {run_id!r}")
        return run

    def _with_wait(self, run: Run) -> Run:
        if run.status is not RunStatus.WAITING:
            return replace(run, waiting=None)
        pending = [a for a in self._run_approvals(run.id) if a.pending]
        return replace(run, waiting=pending[0].wait_point() if pending else None)

    def _run_approvals(self, run_id: str) -> list[Approval]:
        return sorted(
            (a for a in self._approvals.values() if a.run_id == run_id),
            key=lambda a: (a.created_at, a.approval_id),
        )

    def _fenced(self, fence: Fence) -> Run:
        run = self._runs.get(fence.run_id)
        if (
            run is None
            or run.status is not RunStatus.RUNNING
            or run.claim is None
            or run.claim.owner != fence.owner
            or run.claim.epoch != fence.epoch
        ):
            raise LeaseLostError(f"run {fence.run_id} is no longer claimed by this execution")
        return run

    def _add_step(self, run_id: str, record: StepRecord) -> None:
        """A step row, once: the same unique keys as the Postgres indexes
        (an llm or wait step per index, a tool step per index and call)."""
        for step in self._steps[run_id]:
            if record.kind is StepKind.STATE:
                break  # every state a step left is kept (the last one counts)
            if (
                step.kind is record.kind
                and step.index == record.index
                and (record.kind is not StepKind.TOOL or step.tool_call_id == record.tool_call_id)
            ):
                return
        self._steps[run_id].append(
            Step(
                run_id=run_id,
                id=next(self._step_ids),
                index=record.index,
                kind=record.kind,
                started_at=record.started_at,
                finished_at=record.finished_at,
                name=record.name,
                tool_call_id=record.tool_call_id,
                input=copy.deepcopy(record.input),
                output=copy.deepcopy(record.output),
                error=copy.deepcopy(record.error),
                usage=record.usage,
                cost_usd=record.cost_usd,
            )
        )

    def _checkpoint(self, run_id: str) -> Checkpoint | None:
        stored = self._checkpoints.get(run_id)
        if stored is None:
            return None
        index, count, finish_reason, created_at = stored
        return Checkpoint(
            run_id=run_id,
            step_index=index,
            messages=copy.deepcopy(self._messages[run_id][:count]),
            created_at=created_at,
            finish_reason=finish_reason,
        )

    def _write_checkpoint(self, run_id: str, commit: StepCommit) -> None:
        stored = self._checkpoints.get(run_id)
        check_checkpoint(run_id, None if stored is None else (stored[0], stored[1]), commit)
        log = self._messages[run_id]
        del log[commit.base_count :]
        log.extend(copy.deepcopy(commit.new_messages))
        written = self._message_steps.setdefault(run_id, [])
        del written[commit.base_count :]
        written.extend([commit.step_index] * len(commit.new_messages))
        self._checkpoints[run_id] = (commit.step_index, len(log), commit.finish_reason, self._now())

    def _apply_outcome(self, run_id: str, outcome: Outcome, **extra: Any) -> Settled:
        """Write ``outcome`` as ``store.rules.outcome_columns`` says (the
        counterpart of the SQL ``OUTCOME_SET``)."""
        run = self._runs[run_id]
        now = self._now()
        columns = outcome_columns(outcome)
        changes: dict[str, Any] = {"status": columns.status, "updated_at": now, **extra}
        if columns.releases_claim:
            changes["claim"] = None
        if columns.settled:
            changes.update(
                finished_at=now, output=copy.deepcopy(columns.output), error=columns.error
            )
        if columns.requeue:
            changes["enqueued_at"] = columns.requeue_at or now
        self._runs[run_id] = replace(run, **changes)
        next_id = None
        if run.concurrency_key and wakes_key(run.concurrency_key, outcome.status):
            next_id = self._next_in_key(run.concurrency_key)
        return Settled(run=self._with_wait(self._runs[run_id]), next_in_key=next_id)

    def _next_in_key(self, key: str) -> str | None:
        return key_head((r.id, r.status) for r in self._runs.values() if r.concurrency_key == key)

    def next_in_key(self, key: str) -> str | None:
        with self._lock:
            return self._next_in_key(key)

    def _mark_enqueued(self, run_ids: list[str], at: datetime) -> None:
        for run_id in run_ids:
            self._runs[run_id] = replace(self._runs[run_id], enqueued_at=at)
