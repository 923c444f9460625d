"""The journal port: the store as one execution sees it (docs/architecture.md,
"The journal port").

An execution, its step loop and its tool calls reach the store through a
:class:`Journal` and nothing else. The journal holds the execution's claim, so
every write is fenced by its epoch without the callers passing a fence or a
store around; a write the fence refuses raises
:class:`~runner.core.errors.LeaseLostError`, an outage that outlasts
``RUNWRIGHT_STORE_WAIT_SECONDS`` :class:`~runner.core.errors.StoreUnavailable`.

Implemented by :class:`runner.core.engine.pg_journal.PgJournal` (Postgres, with the
Redis lease when there is one); :class:`runner.core.faults.Faulted` wraps one to
crash at the named fault points.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from store.models import (
    Admission,
    Approval,
    Checkpoint,
    Effect,
    EffectBegin,
    Ended,
    Fence,
    NewChild,
    Outcome,
    RetryWait,
    Run,
    RunAttempt,
    RunError,
    StandingApproval,
    Step,
    StepCommit,
    StepRecord,
    ThreadStart,
)


@dataclass(frozen=True, slots=True)
class Start:
    """Where a claimed execution starts: the run, its checkpoint, and the next
    step's model reply if a process journaled it but died before the commit."""

    run: Run
    checkpoint: Checkpoint | None
    journaled: Step | None


class Journal(Protocol):
    """One execution's journal. Writes are fenced by the claim :meth:`start`
    made; reads are of this run."""

    @property
    def fence(self) -> Fence:
        """The claim: the run's id and this execution's epoch (after :meth:`start`)."""

    # -- the execution's life
    async def start(self) -> Start | None:
        """Claim the run and load where it starts; None if it is not ours to run."""

    async def heartbeat(self) -> bool | None:
        """Renew the claim: whether a cancel was asked; None once the run was let
        go. Raises LeaseLostError when the claim is gone."""

    async def close(self, ended: Ended | None) -> None:
        """Give up the claim (unless a write did) and hand on what ``ended`` freed."""

    # -- a step: its model reply, then its commit
    async def admit(self, run: Run, tokens: int, *, now: datetime | None) -> Admission:
        """May a child's model call take ``tokens`` of the budgets it shares?"""

    async def record_model_step(
        self, record: StepRecord, *, rolls_up: bool, soon: bool = False
    ) -> bool:
        """The journal write: the model's reply; False if one was recorded meanwhile.
        ``soon``: in flight, as ``commit_step``'s (True then; a reply found
        recorded by another execution raises the lost lease later)."""

    async def model_step(self, index: int) -> Step | None:
        """Step ``index``'s recorded model reply."""

    async def start_children(self, children: list[NewChild]) -> list[Run]:
        """Create the child runs a step's calls start, before its commit."""

    async def commit_step(self, commit: StepCommit, *, soon: bool = False) -> Ended | None:
        """Record the tool results with the checkpoint; waits (approvals, questions,
        children) or ends the run as ``commit`` says. ``soon``, for a step that
        neither waits nor ends the run: return at once, the commit in flight;
        every later operation but the heartbeat waits for it first and raises
        what it raised, so the next model call overlaps it."""

    # -- effects
    async def effects(self, call_ids: list[str]) -> dict[str, Effect]:
        """The effects journaled for these tool calls, by call id."""

    async def begin_effect(
        self, key: str, tool: str, input: Any, *, rerun_started: bool, version: str | None = None
    ) -> EffectBegin:
        """May the effect run? Journaled ``started`` under the agent's
        ``version`` if so. One an earlier execution left ``started`` runs
        again only if ``rerun_started`` and under the same version."""

    async def finish_effect(
        self, key: str, *, output: Any = None, error: str | None = None
    ) -> Effect:
        """Record its outcome: completed with ``output``, or failed with ``error``."""

    async def mark_unknown(self, key: str) -> Effect:
        """Flag an effect whose outcome nobody recorded for a person."""

    async def withdraw_effect(self, key: str) -> bool:
        """Take back a start whose call never went out."""

    # -- the run leaves `running`
    async def end(self, outcome: Outcome) -> Ended:
        """End the run, or pause it (``waiting``, ``interrupted``)."""

    async def defer_retry(self, wait: RetryWait, error: RunError | None = None) -> Ended:
        """Sleep until the failed step's next attempt, or fail with ``error``."""

    async def park(self, key: str, at: datetime) -> Ended:
        """Back to the queue until ``at``: the model call waits for limit ``key``."""

    async def defer_missing_agent(self, grace_seconds: float) -> Run | None:
        """Give the run back for a worker that knows its agent; None once too late."""

    async def record_version(self, version: str, change: dict[str, Any] | None) -> None:
        """The run runs on agent ``version`` now: its first, or a move to it
        (``change``: what changed, its version event)."""

    # -- reads of this run
    async def run(self) -> Run:
        """The run as stored now."""

    async def thread_start(self, thread: str) -> ThreadStart | None:
        """Where the thread's previous run ended."""

    async def mcp_listing(self) -> dict[str, Any] | None:
        """The MCP tools its model was last offered."""

    async def approval(self, approval_id: str) -> Approval:
        """One of its approvals or questions."""

    async def standing_approvals(self) -> list[StandingApproval]:
        """The tools approved for the rest of the run."""

    async def children(self) -> list[Run]:
        """Its child runs."""

    async def attempts(self) -> list[RunAttempt]:
        """Its earlier attempts (retries)."""
