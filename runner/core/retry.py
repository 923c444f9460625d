"""Retry policies and durable backoff (docs/concepts.md, "Model failures").

A :class:`RetryPolicy` says how often and how patiently a failing call is tried
again: an exponential backoff from ``initial_backoff`` by ``multiplier`` up to
``max_backoff``, for at most ``max_attempts`` attempts and ``max_elapsed``
seconds since the first failure. A provider's ``Retry-After`` is a floor on
the next delay, never shortened, up to a cap
(``RUNWRIGHT_MAX_RETRY_AFTER_SECONDS``, default a day): a provider asking for
more waits the cap, if the policy allows waiting that long. A wait that would
end past ``max_elapsed`` fails the run ``model_error`` instead, saying so.

Model calls use it twice. Within one execution, the short in-call retries
(``in_call_retries``, ``in_call_backoff``) ride out blips. When those are
spent, the run does not fail and does not hold a worker thread: it goes
back to ``queued`` with a not-before time, and the policy decides when (and
whether) the next execution tries again. Tools use it in-process (``@tool(retries=...)``).

What pause a provider asked for is read here too (:func:`retry_after`), from
the headers of the error litellm raised, so that the rules of waiting live in
one module; ``runner.core.model`` calls it.
"""

from __future__ import annotations

import email.utils
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from runner.core.errors import InvalidInput
from runner.core.settings import Settings
from store.models import RetryWait

# Whether an error is worth another attempt; None means the caller's default
# (for model calls: 429, 5xx, connection errors and timeouts).
Transient = Callable[[BaseException], bool]
# The longest backoff a policy may name: a retry time stays a date Postgres
# and Python can hold (and a person can wait for).
MAX_BACKOFF_SECONDS = 366 * 86400.0
CAP_SETTING = "RUNWRIGHT_MAX_RETRY_AFTER_SECONDS"


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
    # A model call's retries within one execution, before the run waits in
    # the queue, and the first pause between them; None: the engine's
    # (RUNWRIGHT_MODEL_RETRIES, RUNWRIGHT_MODEL_BACKOFF_SECONDS).
    in_call_retries: int | None = None
    in_call_backoff: float | None = None

    def __post_init__(self) -> None:
        if self.in_call_retries is not None and (
            isinstance(self.in_call_retries, bool)
            or not isinstance(self.in_call_retries, int)
            or self.in_call_retries < 0
        ):
            raise InvalidInput("RetryPolicy.in_call_retries must be a whole number, 0 or more")
        if self.in_call_backoff is not None and not (
            isinstance(self.in_call_backoff, int | float)
            and not isinstance(self.in_call_backoff, bool)
            and math.isfinite(self.in_call_backoff)
            and self.in_call_backoff >= 0
        ):
            raise InvalidInput("RetryPolicy.in_call_backoff must be a number of seconds, 0 or more")
        for name in ("initial_backoff", "multiplier", "max_backoff", "max_elapsed"):
            value = getattr(self, name)
            if value is not None and not (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and math.isfinite(value)
            ):
                raise InvalidInput(f"RetryPolicy.{name} must be a finite number, not {value!r}")
        if self.max_backoff > MAX_BACKOFF_SECONDS:
            raise InvalidInput(
                f"RetryPolicy.max_backoff must be at most {MAX_BACKOFF_SECONDS:.0f} s (366 days)"
            )
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
        try:
            grown = self.initial_backoff * self.multiplier ** (attempt - 1)
        except OverflowError:  # a thousand attempts in: long past max_backoff
            grown = self.max_backoff
        base = min(self.max_backoff, grown)
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


# ------------------------------------------------------- the provider's ask


def retry_after(exc: BaseException) -> float | None:
    """The pause in seconds a provider asked for with its answer, if it asked
    for one in a form HTTP allows: ``retry-after-ms`` (not a standard; some
    providers send it) when it is a finite number of milliseconds, 0 or more;
    else ``Retry-After`` (:func:`parse_retry_after`). A header that says
    anything else is no ask at all. The figure may be huge (``inf`` for more
    seconds than a float holds): the retry policy caps it (runner/core/retry.py)."""
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
    if headers is None or not hasattr(headers, "get"):
        return None
    try:
        millis = headers.get("retry-after-ms")
        value = headers.get("retry-after")
    except Exception:  # a headers object of some other shape says nothing usable
        return None
    if isinstance(millis, str):
        try:
            number = float(millis.strip())
        except ValueError:
            number = math.nan
        if math.isfinite(number) and number >= 0:
            return number / 1000
    return parse_retry_after(value)


# RFC 9110 §10.2.3: delay-seconds = 1*DIGIT, ASCII digits (str.isdigit and
# int() take other scripts' digits too).
_DELAY_SECONDS = re.compile(r"[0-9]+")
# An HTTP-date is 29 characters; anything much longer is not one.
_MAX_DATE_CHARS = 64


def parse_retry_after(value: object) -> float | None:
    """A ``Retry-After`` value in seconds from now, as RFC 9110 §10.2.3 has
    it: ``delay-seconds`` (digits only), or an HTTP-date in any of its three
    forms (a date past is 0). None for anything else: a sign, a fraction, an
    exponent, ``inf``, ``nan``, words."""
    if not isinstance(value, str):
        return None
    text = value.strip(" \t")  # the field's optional whitespace
    if _DELAY_SECONDS.fullmatch(text):
        return float(text)  # past 309 digits, inf: more than any cap
    if len(text) > _MAX_DATE_CHARS:
        return None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # asctime dates carry no zone; HTTP dates are GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@dataclass(frozen=True)
class Verdict:
    """What a failed model step leads to: the run's retry state (``wait.at``
    is when the next attempt may start, None if there is none) and, when
    there is none, the message the run fails ``model_error`` with."""

    wait: RetryWait
    gave_up: str | None = None


class StepFailure(Protocol):
    """A step that could not run, retried by the run's policy: a model
    provider's failure (:class:`~runner.core.errors.ModelError`) or an MCP server that cannot be
    reached (:class:`~runner.core.errors.MCPUnavailable`)."""

    @property
    def message(self) -> str: ...
    @property
    def code(self) -> str: ...
    @property
    def transient(self) -> bool: ...
    @property
    def retry_after(self) -> float | None: ...


def next_wait(
    policy: RetryPolicy,
    previous: RetryWait | None,
    error: StepFailure,
    now: datetime,
    *,
    max_retry_after: float,
) -> Verdict:
    """The run's retry state after a step failed with ``error``. A
    provider's pause above ``max_retry_after`` seconds counts as that many."""
    attempts = (previous.attempts if previous is not None else 0) + 1
    since = previous.since if previous is not None else now
    if not error.transient:
        wait = RetryWait(attempts=attempts, since=since, error=error.message, at=None)
        return Verdict(wait, error.message)
    elapsed = max(0.0, (now - since).total_seconds())
    asked = error.retry_after
    floor = None if asked is None else min(asked, max_retry_after)
    delay = policy.next_delay(attempts, elapsed, floor)
    at = None if delay is None else now + timedelta(seconds=delay)
    wait = RetryWait(attempts=attempts, since=since, error=error.message, at=at)
    if at is not None:
        return Verdict(wait)
    why = f"the retry policy allows {policy.describe()}"
    out_of_attempts = policy.max_attempts is not None and attempts >= policy.max_attempts
    if floor is not None and not out_of_attempts and policy.max_elapsed is not None:
        # max_elapsed ended it: say so when the provider's pause is why.
        limit = f"past the retry policy's max_elapsed of {policy.max_elapsed:g} s"
        if elapsed >= 1:
            limit += f" ({elapsed:.0f} s since the step first failed)"
        if elapsed + floor > policy.max_elapsed:
            why = f"the provider asked to wait {_seconds(floor)} s, {limit}"
            if asked is not None and asked > floor:
                why = (
                    f"the provider asked to wait {_seconds(asked)} s, more than "
                    f"{CAP_SETTING}={_seconds(floor)}; {_seconds(floor)} s is {limit}"
                )
    message = f"{error.message}; gave up after {attempts} attempt(s) of the step ({why})"
    return Verdict(wait, message)


def _seconds(value: float) -> str:
    """A provider's pause for a message: its seconds, or its order when huge."""
    if value >= 1e15:  # 30 million years; inf for more digits than a float holds
        return "more than 10^15"
    return f"{value:.0f}" if value == int(value) else f"{value:g}"
