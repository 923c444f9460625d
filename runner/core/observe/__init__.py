"""Observing runs: what the engine reports, and who listens (docs/operations.md).

The engine core calls one :class:`Observer` (a fan-out of several) at the
points worth seeing: a run started, an execution, its steps, model and tool
calls, approvals, retries, an execution's end, takeovers and ticks. The methods that
wrap work are context managers, so a listener sees the duration and any
exception. What the engine hands them is defined here too (:class:`ModelCall`,
:class:`ToolCall`, :class:`TickReport`), so that a listener reads it without
importing the engine. Listeners: the log context and its lines (``runner/core/observe/logs.py``,
always on), OpenTelemetry traces (``otel.py``, extra ``runwright[otel]``) and
Prometheus metrics (``metrics.py``, extra ``runwright[metrics]``); the optional
ones are imported only when configured.
"""

from __future__ import annotations

import contextlib
import enum
import threading
from collections.abc import Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from runner.core.deprecation import retired
from store.models import Approval, Fence, NewApproval, RetryWait, Run, Usage


@dataclass
class ModelCall:
    """One model call, filled in by the step loop as the answer arrives."""

    model: str
    step: int
    usage: Usage | None = None
    finish_reason: str | None = None
    cost_usd: float | None = None
    # Content, read only by listeners that record it when asked to
    # (RUNWRIGHT_OTEL_CAPTURE_CONTENT): the messages sent and the answer.
    messages: Sequence[Any] = ()
    output: Any = None
    # The names of the tools the call offered the model.
    tools: Sequence[str] = ()


class ToolStatus(enum.StrEnum):
    """What became of a tool call: the ``status`` label of the tool metrics."""

    OK = "ok"
    ERROR = "error"  # the tool raised, or its journal says it failed
    DENIED = "denied"  # a person refused it: it never ran
    TIMEOUT = "timeout"  # abandoned by the execution's timeout
    CANCELLED = "cancelled"  # abandoned by a cancel, a drain or a lost lease
    UNKNOWN = "unknown"  # an effect of unknown outcome


@dataclass
class ToolCall:
    name: str
    call_id: str
    step: int
    effect: bool = False
    # Set when the tool's error went back to the model (the call did not raise).
    error: str | None = None
    # Content, for listeners that record it when asked to: the arguments and
    # what the model was told.
    arguments: Any = None
    result: str | None = None
    # How many times this execution called the tool's function for the call:
    # its attempts; 0 for an effect whose journal answered (it ran before).
    invocations: int = 0
    # The MCP server the tool is from (runner/core/mcp/), None for a Python tool.
    mcp_server: str | None = None
    # What became of the call (ToolStatus).
    status: ToolStatus = field(default_factory=lambda: ToolStatus.OK)


class FirstSeen:
    """What a process has told once (a model that reports no usage, a tool
    left out of a listing): :meth:`first` is True the first time it sees a
    key. Bounded: past ``limit`` keys it forgets them all and starts again,
    so a flood of keys costs memory no more than a repeated line."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self._seen: set[Hashable] = set()
        self._lock = threading.Lock()

    def first(self, key: Hashable) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) >= self.limit:
                self._seen.clear()
            self._seen.add(key)
            return True


@dataclass
class TickReport:
    """What one ``tick()`` did (``runner/core/engine/tick.py``): returned by
    ``Engine.tick`` and handed to the listeners. ``lapsed`` lists the runs
    whose claims had lapsed and were queued again, for another worker to take
    over (``recovered`` is its deprecated name)."""

    skipped: bool = False
    notified: int = 0
    notify_failed: int = 0
    expired: int = 0
    lapsed: list[str] = field(default_factory=list)
    reenqueued: list[str] = field(default_factory=list)
    key_heads: list[str] = field(default_factory=list)
    # Parents whose children had all ended with no resume (a wake-up lost).
    resumed: list[str] = field(default_factory=list)
    # Schedules' firings recorded (started, skipped, buffered, missed), and
    # the runs they started (runner/core/schedules/).
    firings: int = 0
    fired: list[str] = field(default_factory=list)
    # Approvals a job could not handle (logged, left for a later tick), and the
    # jobs that failed as a whole; the other jobs ran regardless.
    item_errors: int = 0
    failed_jobs: list[str] = field(default_factory=list)

    @property
    def recovered(self) -> list[str]:
        """Deprecated: :attr:`lapsed`."""
        retired("TickReport.recovered", "TickReport.lapsed")
        return self.lapsed

    @recovered.setter
    def recovered(self, runs: list[str]) -> None:
        retired("TickReport.recovered", "TickReport.lapsed")
        self.lapsed = runs


_NULL: AbstractContextManager[None] = nullcontext()


class Observer:
    """A listener. Every method does nothing here; override what you need."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "settled" in cls.__dict__ and cls.__module__ != __name__:
            retired(f"the observer hook {cls.__qualname__}.settled", "ended", stacklevel=3)

    def starting(self, agent: str, carrier: dict[str, str]) -> AbstractContextManager[None]:
        """Around ``Engine.start`` in the caller's process. ``carrier`` is
        stored with the run: a tracer writes its context there so that the
        executions, in other processes, join the caller's trace."""
        return _NULL

    def started(self, run: Run) -> None:
        """Inside :meth:`starting`: the run it started (or found, for a
        trigger id already used)."""

    def execution(self, run: Run, fence: Fence, worker: str) -> AbstractContextManager[None]:
        """Around one execution of ``run`` (claimed with ``fence``)."""
        return _NULL

    def step(self, run: Run, index: int) -> AbstractContextManager[None]:
        return _NULL

    def model_call(self, run: Run, call: ModelCall) -> AbstractContextManager[None]:
        return _NULL

    def tool_call(self, run: Run, call: ToolCall) -> AbstractContextManager[None]:
        return _NULL

    def approvals_requested(self, run: Run, approvals: Sequence[NewApproval]) -> None:
        return None

    def approval_decided(self, run: Run, approval: Approval) -> None:
        """In the deciding process (a web request, the CLI, tick's expiry)."""
        return None

    def retry_scheduled(self, run: Run, wait: RetryWait) -> None:
        return None

    def parked(self, run: Run, key: str, reason: str) -> None:
        """The run's model call waits for limit ``key`` (``reason``: which part
        of it, runner/core/limits/limiter.py's Reason): parked until ``run.retry_at``."""
        return None

    def throttled(self, model: str) -> None:
        """A provider answered a call to ``model`` with a 429."""
        return None

    def limit_admitted(self, model: str, tokens: int, waited: float) -> None:
        """A call to ``model`` took its limit, reserving ``tokens``, after
        waiting ``waited`` seconds in place (its run's time parked aside)."""
        return None

    def limit_used(self, model: str, tokens: int) -> None:
        """That call ended having used ``tokens`` (0: it failed or was cancelled)."""
        return None

    def ended(self, run: Run, seconds: float) -> None:
        """An execution ended after ``seconds``: it moved the run out of
        ``running`` (to a final status, ``waiting``, ``interrupted``, or
        ``queued`` for a retry), or a decision or a cancel ended the run."""
        if type(self).settled is not Observer.settled:
            self.settled(run, seconds)

    def settled(self, run: Run, seconds: float) -> None:
        """Deprecated: :meth:`ended`, which calls it on an observer that
        still defines it (with a DeprecationWarning when the class is made)."""
        return None

    def taken_over(self, run: Run, previous_epoch: int) -> None:
        """This execution took the run over from a dead (or stalled) one."""
        return None

    def lease_lost(self, run_id: str, epoch: int, current_epoch: int | None) -> None:
        """This execution (``epoch``) lost the run to ``current_epoch``."""
        return None

    def effect_unknown(self, run: Run, tool: str) -> None:
        """An execution found an effect of ``run`` started by one that died:
        its outcome is unknown, and the run needs a person."""

    def tick(self, report: TickReport, seconds: float) -> None:
        return None

    def notification_failed(self, agent: str) -> None:
        return None


class Observers(Observer):
    """Several listeners as one; a listener that raises is logged and skipped
    for that event, never allowed to break a run."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)

    @contextlib.contextmanager
    def _all(self, method: str, *args: Any) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for observer in self.observers:
                try:
                    stack.enter_context(getattr(observer, method)(*args))
                except Exception:
                    _complain(observer, method)
            yield

    def _each(self, method: str, *args: Any) -> None:
        for observer in self.observers:
            try:
                getattr(observer, method)(*args)
            except Exception:
                _complain(observer, method)

    def starting(self, agent: str, carrier: dict[str, str]) -> AbstractContextManager[None]:
        return self._all("starting", agent, carrier)

    def started(self, run: Run) -> None:
        self._each("started", run)

    def execution(self, run: Run, fence: Fence, worker: str) -> AbstractContextManager[None]:
        return self._all("execution", run, fence, worker)

    def step(self, run: Run, index: int) -> AbstractContextManager[None]:
        return self._all("step", run, index)

    def model_call(self, run: Run, call: ModelCall) -> AbstractContextManager[None]:
        return self._all("model_call", run, call)

    def tool_call(self, run: Run, call: ToolCall) -> AbstractContextManager[None]:
        return self._all("tool_call", run, call)

    def approvals_requested(self, run: Run, approvals: Sequence[NewApproval]) -> None:
        self._each("approvals_requested", run, approvals)

    def approval_decided(self, run: Run, approval: Approval) -> None:
        self._each("approval_decided", run, approval)

    def retry_scheduled(self, run: Run, wait: RetryWait) -> None:
        self._each("retry_scheduled", run, wait)

    def parked(self, run: Run, key: str, reason: str) -> None:
        self._each("parked", run, key, reason)

    def throttled(self, model: str) -> None:
        self._each("throttled", model)

    def limit_admitted(self, model: str, tokens: int, waited: float) -> None:
        self._each("limit_admitted", model, tokens, waited)

    def limit_used(self, model: str, tokens: int) -> None:
        self._each("limit_used", model, tokens)

    def ended(self, run: Run, seconds: float) -> None:
        self._each("ended", run, seconds)

    def settled(self, run: Run, seconds: float) -> None:
        """Deprecated: :meth:`ended`."""
        retired("Observers.settled", "Observers.ended")
        self.ended(run, seconds)

    def taken_over(self, run: Run, previous_epoch: int) -> None:
        self._each("taken_over", run, previous_epoch)

    def lease_lost(self, run_id: str, epoch: int, current_epoch: int | None) -> None:
        self._each("lease_lost", run_id, epoch, current_epoch)

    def effect_unknown(self, run: Run, tool: str) -> None:
        self._each("effect_unknown", run, tool)

    def tick(self, report: TickReport, seconds: float) -> None:
        self._each("tick", report, seconds)

    def notification_failed(self, agent: str) -> None:
        self._each("notification_failed", agent)


def _complain(observer: Observer, method: str) -> None:
    import logging

    logging.getLogger(__name__).exception(
        "observer %s failed in %s; the run goes on", type(observer).__name__, method
    )
