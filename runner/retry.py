"""Retry policies and durable backoff (DESIGN §10).

A :class:`RetryPolicy` says how often and how patiently a failing call is tried
again: an exponential backoff from ``initial_backoff`` by ``multiplier`` up to
``max_backoff``, for at most ``max_attempts`` attempts and ``max_elapsed``
seconds since the first failure. A provider's ``Retry-After`` is a floor on
the next delay, never shortened.

Model calls use it twice. Within one execution, the short in-call retries
(``model_retries``) ride out blips. When those are spent, the run does not fail
and does not hold a worker thread: it goes back to ``queued`` with a not-before
time, and the policy decides when (and whether) the next execution tries
again. Tools use it in-process (``@tool(retries=...)``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from runner.errors import InvalidInput, ModelError
from store.config import Settings
from store.models import RetryWait

# Whether an error is worth another attempt; None means the caller's default
# (for model calls: 429, 5xx, connection errors and timeouts).
Transient = Callable[[BaseException], bool]


@dataclass(frozen=True)
class RetryPolicy:
    """How a failing call is retried. ``max_attempts`` counts every attempt,
    the first included; ``None`` for ``max_attempts`` or ``max_elapsed`` means
    no such limit (keep one of them)."""

    initial_backoff: float = 1.0
    multiplier: float = 2.0
    max_backoff: float = 60.0
    max_attempts: int | None = 20
    max_elapsed: float | None = 1800.0
    transient: Transient | None = None

    def __post_init__(self) -> None:
        if self.initial_backoff < 0:
            raise InvalidInput("RetryPolicy.initial_backoff must be 0 or more")
        if self.multiplier < 1:
            raise InvalidInput("RetryPolicy.multiplier must be at least 1")
        if self.max_backoff < self.initial_backoff:
            raise InvalidInput("RetryPolicy.max_backoff must be at least initial_backoff")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise InvalidInput("RetryPolicy.max_attempts must be at least 1")
        if self.max_elapsed is not None and self.max_elapsed <= 0:
            raise InvalidInput("RetryPolicy.max_elapsed must be positive")
        if self.max_attempts is None and self.max_elapsed is None:
            raise InvalidInput("a RetryPolicy needs max_attempts or max_elapsed (or both)")

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryPolicy:
        """The project-wide default (``RUNWRIGHT_RETRY_*``)."""
        return cls(
            initial_backoff=settings.retry_initial_seconds,
            multiplier=settings.retry_multiplier,
            max_backoff=max(settings.retry_max_backoff_seconds, settings.retry_initial_seconds),
            max_attempts=settings.retry_max_attempts,
            max_elapsed=settings.retry_max_elapsed_seconds,
        )

    @classmethod
    def attempts(cls, retries: int, *, backoff: float = 0.5) -> RetryPolicy:
        """``retries`` more attempts after the first, ``backoff`` seconds apart
        at first (what ``@tool(retries=n)`` means)."""
        if retries < 0:
            raise InvalidInput("retries must be 0 or more")
        return cls(
            initial_backoff=backoff,
            max_backoff=max(backoff, 30.0),
            max_attempts=retries + 1,
            max_elapsed=None,
        )

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1 for the
        first): the backoff with jitter in its upper half, and never less than
        the provider's ``retry_after``."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        wait = base * (0.5 + random.random() / 2)
        if retry_after is not None and retry_after > wait:
            wait = retry_after
        return wait

    def next_delay(
        self, attempt: int, elapsed: float, retry_after: float | None = None
    ) -> float | None:
        """After failed attempt ``attempt``, ``elapsed`` seconds since the first
        failure: the delay before the next attempt, or None if the policy is
        exhausted (no attempts left, or the next one would start too late)."""
        if self.max_attempts is not None and attempt >= self.max_attempts:
            return None
        wait = self.delay(attempt, retry_after)
        if self.max_elapsed is not None and elapsed + wait > self.max_elapsed:
            return None
        return wait

    def describe(self) -> str:
        limits = []
        if self.max_attempts is not None:
            limits.append(f"{self.max_attempts} attempts")
        if self.max_elapsed is not None:
            limits.append(f"{self.max_elapsed:g} s")
        return " or ".join(limits)


def next_wait(
    policy: RetryPolicy,
    previous: RetryWait | None,
    error: ModelError,
    now: datetime,
) -> RetryWait:
    """The run's retry state after a model step failed with ``error``:
    ``at`` is when the next attempt may start, or None if there is none (the
    error is not transient, or the policy is exhausted)."""
    attempts = (previous.attempts if previous is not None else 0) + 1
    since = previous.since if previous is not None else now
    delay = None
    if error.transient:
        elapsed = max(0.0, (now - since).total_seconds())
        delay = policy.next_delay(attempts, elapsed, error.retry_after)
    at = None if delay is None else now + timedelta(seconds=delay)
    return RetryWait(attempts=attempts, since=since, error=error.message, at=at)


def gave_up(policy: RetryPolicy, wait: RetryWait, error: ModelError) -> str:
    """Why a run failed ``model_error``: the error, and the attempts if it was transient."""
    if not error.transient:
        return error.message
    return (
        f"{error.message}; gave up after {wait.attempts} attempt(s) of the step "
        f"(the retry policy allows {policy.describe()})"
    )
