"""``Retry-After`` values as RFC 9110 §10.2.3 reads them, and the retry
policy's arithmetic on what they ask (runner/core/retry.py): the values an
HTTP server cannot even send (digits of other scripts), and policies whose
numbers would overflow a date. The engine-level cases are
tests/integration/test_retry_after.py."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from runner.core.errors import ConfigurationError, InvalidInput, ModelError
from runner.core.retry import RetryPolicy, next_wait, parse_retry_after
from runner.core.settings import Settings


@pytest.mark.parametrize(
    "value",
    ["\u00b2", "\u0661\u0662", "\uff11\uff12", "1_000", "1e3", " ", "", "-0", "0.0", None, 12],
)
def test_only_ascii_digits_are_delay_seconds(value: object) -> None:
    assert parse_retry_after(value) is None


@pytest.mark.parametrize(("value", "seconds"), [("0", 0.0), ("120", 120.0), ("\t7 ", 7.0)])
def test_delay_seconds(value: str, seconds: float) -> None:
    assert parse_retry_after(value) == seconds


def test_more_digits_than_a_float_holds_is_more_than_any_cap() -> None:
    assert parse_retry_after("9" * 5000) == math.inf


def test_a_huge_ask_is_capped_before_any_date_is_made() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    policy = RetryPolicy(max_attempts=3, max_elapsed=None)
    for asked in (math.inf, 1e308, 99999999999.0):
        error = ModelError("429", transient=True, retry_after=asked)
        verdict = next_wait(policy, None, error, now, max_retry_after=600)
        assert verdict.gave_up is None and verdict.wait.at == now + timedelta(seconds=600)


def test_a_thousand_attempts_do_not_overflow_the_backoff() -> None:
    policy = RetryPolicy(initial_backoff=1, max_backoff=60, max_attempts=None, max_elapsed=1e9)
    assert 30 <= policy.delay(5000) <= 60


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_backoff": math.nan},
        {"multiplier": math.inf},
        {"max_backoff": math.inf},
        {"max_backoff": 1e12},
        {"max_elapsed": math.nan},
    ],
)
def test_a_policy_of_numbers_no_date_can_hold_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidInput):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize("raw", ["0", "1e9", "inf", "soon"])
def test_the_cap_setting_refuses_what_no_date_can_hold(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="RUNWRIGHT_MAX_RETRY_AFTER_SECONDS"):
        Settings.from_env({"RUNWRIGHT_MAX_RETRY_AFTER_SECONDS": raw})


def test_the_cap_setting() -> None:
    assert Settings.from_env({}).max_retry_after_seconds == 86400
    given = Settings.from_env({"RUNWRIGHT_MAX_RETRY_AFTER_SECONDS": "600"})
    assert given.max_retry_after_seconds == 600
    with pytest.raises(ConfigurationError, match="RUNWRIGHT_MAX_RETRY_AFTER_SECONDS"):
        Settings(max_retry_after_seconds=1e12)
