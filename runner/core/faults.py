"""Named fault points, placed right after each commit of an execution, and one
where an effect has run but its outcome is not yet written:
``after_journal`` after a step's journal write (the model's reply, before any
tool runs), ``after_effect_start`` once an effect's journal says it started (its
function has not run yet), ``after_effect_call`` once its function has returned
or raised, before the journal holds its outcome, ``after_effect_complete`` once
it does, ``after_children_start`` once a step's child runs are created
(runner/core/children.py), before its commit, and ``after_commit`` after the step's
commit (its tool results and checkpoint); docs/concepts.md, "Step" and "Effects".

Tests arm them to crash or stall the process exactly there, which is the
cheapest way to prove a takeover claim. The points are hit by :class:`Faulted`,
which wraps an execution's journal (runner/core/journal.py) while one is armed, so
the engine itself carries none. Only code arms them: :func:`arm`, or
:func:`arm_from_spec` in a test's own subprocess (``tests/proc.py``), e.g.::

    "after_journal=kill"              # SIGKILL at the first hit
    "after_commit@3=stall"           # freeze at the third hit
    "after_effect_start=kill,after_commit@2=raise"

A production process never arms one: nothing here reads the environment.
Unarmed, no journal is wrapped: a fault point costs nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runner.core.errors import InvalidInput

if TYPE_CHECKING:
    from runner.core.journal import Journal, Start
    from store.models import (
        Admission,
        Approval,
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

AFTER_JOURNAL = "after_journal"
AFTER_EFFECT_START = "after_effect_start"
AFTER_EFFECT_CALL = "after_effect_call"
AFTER_EFFECT_COMPLETE = "after_effect_complete"
AFTER_COMMIT = "after_commit"
AFTER_CHILDREN_START = "after_children_start"
POINTS = (
    AFTER_JOURNAL,
    AFTER_EFFECT_START,
    AFTER_EFFECT_CALL,
    AFTER_EFFECT_COMPLETE,
    AFTER_COMMIT,
    AFTER_CHILDREN_START,
)
ACTIONS = ("kill", "stall", "raise")


class FaultInjected(BaseException):
    """Raised by a fault point armed with ``raise``: a crash that no handler
    mistakes for a tool error.

    On purpose not a :class:`~runner.core.errors.RunwrightError`, nor any
    ``Exception``: it stands for the process dying at that point, so it must
    pass every ``except Exception`` (the tool-call, crash-ending and retry
    handlers) the way a SIGKILL would, and leave the run as a dead process
    leaves it. The one exception class the project defines outside
    ``RunwrightError``."""


@dataclass
class _Armed:
    action: str | Callable[[str], None]
    at_hit: int = 1
    hits: int = 0


_armed: dict[str, _Armed] = {}
_lock = threading.Lock()


def arm(point: str, action: str | Callable[[str], None], *, at_hit: int = 1) -> None:
    if point not in POINTS:
        raise InvalidInput(f"unknown fault point {point!r}; known: {', '.join(POINTS)}")
    if isinstance(action, str) and action not in ACTIONS:
        raise InvalidInput(f"unknown fault action {action!r}; known: {', '.join(ACTIONS)}")
    with _lock:
        _armed[point] = _Armed(action, at_hit)


def disarm() -> None:
    with _lock:
        _armed.clear()


def arm_from_spec(spec: str) -> None:
    for item in filter(None, (part.strip() for part in spec.split(","))):
        point, _, action = item.partition("=")
        point, _, at = point.partition("@")
        arm(point, action or "kill", at_hit=int(at or 1))


def hit(point: str) -> None:
    """Mark that execution reached ``point``; act if it is armed."""
    armed = _armed.get(point)
    if armed is None:
        return
    with _lock:
        armed.hits += 1
        if armed.hits != armed.at_hit:
            return
    print(f"RUNWRIGHT_FAULT {point} pid={os.getpid()}", file=sys.stderr, flush=True)
    if callable(armed.action):
        armed.action(point)
    elif armed.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif armed.action == "stall":
        while True:
            time.sleep(3600)
    else:
        raise FaultInjected(point)


def wrap(journal: Journal) -> Journal:
    """``journal`` wrapped in :class:`Faulted` while a point is armed, else as
    it is: an execution that no test armed pays nothing."""
    return Faulted(journal) if _armed else journal


class Faulted:
    """A :class:`~runner.core.journal.Journal` that hits the fault points around
    the writes they follow: a crash armed there leaves the store exactly as a
    process dying right after (or, for ``after_effect_call``, right before)
    that write leaves it."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    @property
    def fence(self) -> Fence:
        return self.journal.fence

    async def start(self) -> Start | None:
        return await self.journal.start()

    async def heartbeat(self) -> bool | None:
        return await self.journal.heartbeat()

    async def close(self, ended: Ended | None) -> None:
        await self.journal.close(ended)

    async def admit(self, run: Run, tokens: int, *, now: datetime | None) -> Admission:
        return await self.journal.admit(run, tokens, now=now)

    async def model_step(self, index: int) -> Step | None:
        return await self.journal.model_step(index)

    async def effects(self, call_ids: list[str]) -> dict[str, Effect]:
        return await self.journal.effects(call_ids)

    async def withdraw_effect(self, key: str) -> bool:
        return await self.journal.withdraw_effect(key)

    async def end(self, outcome: Outcome) -> Ended:
        return await self.journal.end(outcome)

    async def defer_retry(self, wait: RetryWait, error: RunError | None = None) -> Ended:
        return await self.journal.defer_retry(wait, error)

    async def park(self, key: str, at: datetime) -> Ended:
        return await self.journal.park(key, at)

    async def defer_missing_agent(self, grace_seconds: float) -> Run | None:
        return await self.journal.defer_missing_agent(grace_seconds)

    async def record_version(self, version: str, change: dict[str, Any] | None) -> None:
        await self.journal.record_version(version, change)

    async def run(self) -> Run:
        return await self.journal.run()

    async def thread_start(self, thread: str) -> ThreadStart | None:
        return await self.journal.thread_start(thread)

    async def mcp_listing(self) -> dict[str, Any] | None:
        return await self.journal.mcp_listing()

    async def approval(self, approval_id: str) -> Approval:
        return await self.journal.approval(approval_id)

    async def standing_approvals(self) -> list[StandingApproval]:
        return await self.journal.standing_approvals()

    async def children(self) -> list[Run]:
        return await self.journal.children()

    async def attempts(self) -> list[RunAttempt]:
        return await self.journal.attempts()

    async def record_model_step(
        self, record: StepRecord, *, rolls_up: bool, soon: bool = False
    ) -> bool:
        # Waited for, ``soon`` or not, while a point is armed (see commit_step).
        recorded = await self.journal.record_model_step(record, rolls_up=rolls_up)
        hit(AFTER_JOURNAL)
        return recorded

    async def begin_effect(
        self, key: str, tool: str, input: Any, *, rerun_started: bool, version: str | None = None
    ) -> EffectBegin:
        begin = await self.journal.begin_effect(
            key, tool, input, rerun_started=rerun_started, version=version
        )
        hit(AFTER_EFFECT_START)
        return begin

    async def finish_effect(
        self, key: str, *, output: Any = None, error: str | None = None
    ) -> Effect:
        hit(AFTER_EFFECT_CALL)
        effect = await self.journal.finish_effect(key, output=output, error=error)
        hit(AFTER_EFFECT_COMPLETE)
        return effect

    async def mark_unknown(self, key: str) -> Effect:
        hit(AFTER_EFFECT_CALL)
        return await self.journal.mark_unknown(key)

    async def start_children(self, children: list[NewChild]) -> list[Run]:
        started = await self.journal.start_children(children)
        hit(AFTER_CHILDREN_START)
        return started

    async def commit_step(self, commit: StepCommit, *, soon: bool = False) -> Ended | None:
        # While a point is armed the commit is waited for, ``soon`` or not: a
        # crash after it leaves the store as a process dying right after that write.
        ended = await self.journal.commit_step(commit)
        hit(AFTER_COMMIT)
        return ended
