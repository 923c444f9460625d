"""A cron schedule's jitter is shorter than the shortest gap between its times,
as an interval's is shorter than the interval (runner/core/schedules/times.py); a
cron expression has five fields. No services: the times are computed alone."""

from __future__ import annotations

from typing import Any

import pytest

from runner.core.errors import InvalidInput
from runner.core.schedules.times import MAX_JITTER_SECONDS, When, check_jitter

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0


def cron(expression: str, timezone: str = "UTC") -> When:
    return When.checked(expression, timezone, None)


@pytest.mark.parametrize(
    ("expression", "gap"),
    [
        ("0 9 * * 1-5", DAY),  # a day from Monday to Friday, three over the weekend
        ("*/15 * * * *", 15 * MINUTE),
        ("0,1 * * * *", MINUTE),  # 59 minutes, then 1
        ("* * * * *", MINUTE),
        ("0 * * * *", HOUR),
        ("0 0,23 * * *", HOUR),  # 23:00, then 00:00 the next day
        ("30 2 * * *", DAY),
        ("0 0 1 * *", 28 * DAY),  # February
        ("0 12 * * 1", 7 * DAY),
        # 23:00 on the 28th, then 00:00 on the 1st: an hour, in February of a
        # common year only.
        ("0 0,23 1,28 * *", HOUR),
        # The same on the 29th: an hour, in a leap year's February only.
        ("0 0,23 1,29 * *", HOUR),
        # The 29th of February or February's Mondays: an hour only when the
        # 29th is a Tuesday, once in 28 years (2000, 2028, 2056).
        ("0 0,23 29 2 1", HOUR),
        ("0 0 L * *", 28 * DAY),  # the last day of each month: 28 days to February's
    ],
)
def test_the_shortest_gap_of_a_cron_expression(expression: str, gap: float) -> None:
    assert cron(expression).shortest_gap() == gap
    # In any zone: the expression's own gaps, on a clock without daylight saving.
    assert cron(expression, "Europe/Berlin").shortest_gap() == gap


def test_an_interval_s_shortest_gap_is_the_interval() -> None:
    assert When.checked(None, "UTC", 90).shortest_gap() == 90.0


@pytest.mark.parametrize(
    ("expression", "refused", "accepted"),
    [
        ("0 9 * * 1-5", DAY, DAY - 1),
        ("*/15 * * * *", 15 * MINUTE, 15 * MINUTE - 1),
        ("0,1 * * * *", MINUTE, MINUTE - 1),
        ("* * * * *", MINUTE, 30.0),
        ("0 0,23 1,29 * *", HOUR, HOUR - 1),
    ],
)
def test_a_jitter_not_shorter_than_the_shortest_gap_is_refused(
    expression: str, refused: float, accepted: float
) -> None:
    when = cron(expression)
    with pytest.raises(InvalidInput, match="jitter must be shorter than the shortest gap"):
        check_jitter(when, refused)
    with pytest.raises(InvalidInput, match="jitter must be shorter than the shortest gap"):
        check_jitter(when, refused * 10 if refused * 10 <= MAX_JITTER_SECONDS else refused)
    assert check_jitter(when, accepted) == accepted
    assert check_jitter(when, 0) == 0.0


def test_a_sparse_expression_takes_any_jitter_up_to_the_bound() -> None:
    assert check_jitter(cron("0 0 1 * *"), MAX_JITTER_SECONDS) == MAX_JITTER_SECONDS
    with pytest.raises(InvalidInput, match="jitter must be from 0 to"):
        check_jitter(cron("0 0 1 * *"), MAX_JITTER_SECONDS + 1)


def test_an_interval_keeps_its_own_rule() -> None:
    with pytest.raises(InvalidInput, match="jitter must be shorter than the interval"):
        check_jitter(When.checked(None, "UTC", 60), 60)
    assert check_jitter(When.checked(None, "UTC", 60), 59.5) == 59.5


@pytest.mark.parametrize("value", [-1, float("nan"), "5", True])
def test_a_jitter_that_is_no_duration_is_refused(value: Any) -> None:
    with pytest.raises(InvalidInput, match="jitter"):
        check_jitter(cron("0 * * * *"), value)


@pytest.mark.parametrize(
    "expression",
    [
        "0 0 9 * * *",  # cronsim reads six fields as seconds first: 09:00:00 daily
        "*/10 * * * * *",  # every ten seconds
    ],
)
def test_a_six_field_expression_is_refused(expression: str) -> None:
    with pytest.raises(InvalidInput, match="Wrong number of fields: 6, where cron has five"):
        cron(expression)
