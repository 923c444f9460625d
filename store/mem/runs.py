"""Runs and what they hold, in memory; creating and claiming a run."""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta

from store.base import StartPoint, ThreadStart, check_page_from, check_payload
from store.events import RunEvent, step_event
from store.mem.base import MemBase
from store.models import (
    Checkpoint,
    Claim,
    Effect,
    NewRun,
    Outcome,
    Run,
    RunStatus,
    Settled,
    Step,
    StepKind,
)
from store.rules import claimable, crashed_error, is_takeover, takeover_crashes


class MemRuns(MemBase):
    def create_run(self, new: NewRun) -> tuple[Run, bool]:
        check_payload(new, self.max_payload_bytes)
        with self._lock:
            for run in self._runs.values():
                if run.agent == new.agent and run.trigger.id == new.trigger.id:
                    return self._with_wait(run), False
            run = self._new_run(new)
            self._runs[run.id] = run
            self._steps[run.id] = []
            self._messages[run.id] = []
            return run, True

    def events(self, run_id: str, after: int | None = None, limit: int = 1000) -> list[RunEvent]:
        after = after or 0
        with self._lock:
            self._run(run_id)
            merged = [step_event(s) for s in self._steps[run_id] if s.id > after]
            merged += [e for e in self._events.get(run_id, ()) if e.id is not None and e.id > after]
        return sorted(merged, key=lambda e: e.id or 0)[:limit]

    def get_run(self, run_id: str) -> Run:
        with self._lock:
            return self._with_wait(self._run(run_id))

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
        before = check_page_from(before)
        with self._lock:
            runs = [
                self._with_wait(r)
                for r in sorted(self._runs.values(), key=lambda r: r.id, reverse=True)
                if (status is None or r.status is status)
                and (agent is None or r.agent == agent)
                and (thread is None or r.thread == thread)
                and (before is None or r.id < before)
                and (since is None or r.created_at >= since)
                and (until is None or r.created_at < until)
            ]
            return runs[:limit]

    def run_counts(self, agent: str | None = None) -> dict[RunStatus, int]:
        with self._lock:
            counts = Counter(r.status for r in self._runs.values() if agent in (None, r.agent))
        return dict(counts)

    def steps(self, run_id: str) -> list[Step]:
        with self._lock:
            self._run(run_id)
            return sorted(self._steps[run_id], key=lambda s: (s.index, s.id))

    def llm_step(self, run_id: str, index: int) -> Step | None:
        with self._lock:
            for step in self._steps.get(run_id, []):
                if step.kind is StepKind.LLM and step.index == index:
                    return step
            return None

    def checkpoint(self, run_id: str) -> Checkpoint | None:
        with self._lock:
            self._run(run_id)
            return self._checkpoint(run_id)

    def start_point(self, run_id: str) -> StartPoint:
        with self._lock:
            checkpoint = self._checkpoint(run_id)
            index = checkpoint.step_index if checkpoint else 0
            return StartPoint(checkpoint, self.llm_step(run_id, index + 1))

    def effect(self, run_id: str, key: str) -> Effect | None:
        with self._lock:
            return self._effects.get((run_id, key))

    def thread_start(self, thread: str, before_run_id: str) -> ThreadStart | None:
        with self._lock:
            earlier = [
                r
                for r in self._runs.values()
                if r.thread == thread and r.id < before_run_id and r.settled
            ]
            if not earlier:
                return None
            last = max(earlier, key=lambda r: r.id)
            checkpoint = self._checkpoint(last.id)
            messages = checkpoint.messages if checkpoint else []
            return ThreadStart(run_id=last.id, messages=messages, state=copy.deepcopy(last.state))

    # ---------------------------------------------------------------- claims

    def claim(
        self, run_id: str, owner: str, ttl_seconds: float, *, max_takeovers: int | None = None
    ) -> Claim | None:
        run = self.claim_run(run_id, owner, ttl_seconds, max_takeovers=max_takeovers)
        return run.claim if isinstance(run, Run) else None

    def claim_run(
        self, run_id: str, owner: str, ttl_seconds: float, *, max_takeovers: int | None = None
    ) -> Run | Settled | None:
        with self._lock:
            run = self._run(run_id)
            now = self._now()
            expires_at = run.claim.expires_at if run.claim else None
            if not claimable(run.status, expires_at, now, run.retry_at):
                return None
            takeovers = run.takeovers
            if is_takeover(run.status, expires_at, now):
                assert run.claim is not None
                if takeover_crashes(takeovers, max_takeovers):
                    assert max_takeovers is not None
                    self._runs[run.id] = replace(run, takeovers=takeovers + 1)
                    error = crashed_error(run.claim.epoch, max_takeovers)
                    return self._apply_outcome(run.id, Outcome(RunStatus.FAILED, error=error))
                takeovers += 1
            key = run.concurrency_key
            if key and run.status is RunStatus.QUEUED and self._next_in_key(key) != run.id:
                return None  # another run holds the key, or is older in its queue
            epoch = self._epochs.get(run.id, 0) + 1
            claim = Claim(owner=owner, expires_at=now + timedelta(seconds=ttl_seconds), epoch=epoch)
            self._epochs[run.id] = epoch
            self._runs[run.id] = replace(
                run,
                takeovers=takeovers,
                status=RunStatus.RUNNING,
                claim=claim,
                started_at=run.started_at or now,
                updated_at=now,
            )
            return self._runs[run.id]
