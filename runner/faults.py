"""Named fault points, placed right after each commit of an execution, and one
where an effect has run but its outcome is not yet written:
``after_journal`` after a step's journal write (the model's reply, before any
tool runs), ``after_effect_start`` once an effect's journal says it started (its
function has not run yet), ``after_effect_call`` once its function has returned
or raised, before the journal holds its outcome, ``after_effect_complete`` once
it does, ``after_children_start`` once a step's child runs are created
(runner/children.py), before its commit, and ``after_commit`` after the step's
commit (its tool results and checkpoint); docs/concepts.md, "Step" and "Effects".

Tests arm them to crash or stall the process exactly there, which is the
cheapest way to prove a recovery claim. Only code arms them: :func:`arm`, or
:func:`arm_from_spec` in a test's own subprocess (``tests/proc.py``), e.g.::

    "after_journal=kill"              # SIGKILL at the first hit
    "after_commit@3=stall"           # freeze at the third hit
    "after_effect_start=kill,after_commit@2=raise"

A production process never arms one: nothing here reads the environment.
Unarmed, a fault point costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from runner.errors import InvalidInput

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

    On purpose not a :class:`~runner.errors.RunwrightError`, nor any
    ``Exception``: it stands for the process dying at that point, so it must
    pass every ``except Exception`` (the tool-call, crash-settling and retry
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
