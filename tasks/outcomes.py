"""What the two tasks tell Celery and its log: a run that settles failed fails
its ``runwright.execute`` task (so Celery and Flower record FAILURE), and a
``runwright.tick`` is logged only when it did something. Kept apart from the
Celery app, so that it can be checked without one."""

from __future__ import annotations

import logging

from runner import Run, RunStatus
from runner.engine.engine import TickReport
from runner.errors import RunwrightError

log = logging.getLogger(__name__)

TICK = "runwright.tick"
EXECUTE = "runwright.execute"


class RunFailed(RunwrightError):
    """The run failed."""

    # Celery rebuilds a task's exception from its args: by pickling it (the
    # default reduce calls ``RunFailed(*args)``) and, for JSON result backends,
    # by calling ``RunFailed(*args)`` itself. So the args are exactly the
    # constructor's, two plain strings.
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.args = (code, message)

    @property
    def code(self) -> str:
        return str(self.args[0])

    @property
    def message(self) -> str:
        return str(self.args[1])

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def execute_result(run: Run | None) -> str | None:
    """The task's result for the run as its execution left it; a failed run
    raises :class:`RunFailed`. Every other outcome (completed, waiting, queued
    for a retry, cancelled, interrupted, not claimable) is a success."""
    if run is None:
        return None
    if run.status is RunStatus.FAILED:
        code, message = (run.error.code, run.error.message) if run.error else ("failed", "")
        raise RunFailed(code, message or "the run failed")
    return run.status.value


def tick_result(report: TickReport) -> dict[str, int]:
    """What a tick did, by job, logged in one INFO line if it did anything. A
    tick that did nothing, or was skipped because another held the lock, is
    all zeros and logs nothing."""
    counts = {
        "notified": report.notified,
        "notify_failed": report.notify_failed,
        "expired": report.expired,
        "recovered": len(report.recovered),
        "reenqueued": len(report.reenqueued),
        "started": len(report.key_heads),
        "item_errors": report.item_errors,
        "failed_jobs": len(report.failed_jobs),
    }
    done = [f"{name} {count}" for name, count in counts.items() if count]
    if done:
        log.info("tick: %s", ", ".join(done))
    return counts


class QuietTicks(logging.Filter):
    """Drops Celery's INFO lines about ticks ("received", "succeeded"), which
    it logs with the task's name in ``record.data``; their failures, at ERROR,
    pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        data = getattr(record, "data", None)
        return not (
            record.levelno <= logging.INFO and isinstance(data, dict) and data.get("name") == TICK
        )


class QuietHandBacks(logging.Filter):
    """Celery logs a rejected task at WARNING with the traceback of the
    ``Reject``. An execution that hands its message back during an outage
    (``tasks/app.py``) is expected: its line stays, without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        data = getattr(record, "data", None)
        if (
            isinstance(data, dict)
            and data.get("name") == EXECUTE
            and data.get("description") == "rejected"
        ):
            record.exc_info = None
            record.exc_text = None
        return True
