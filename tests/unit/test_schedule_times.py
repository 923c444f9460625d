"""When a schedule fires (runner/core/schedules/times.py), with fixed times: cron
in a time zone across daylight-saving nights, intervals, jitter, and which
due firings still run after tick() was away."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runner.core.errors import InvalidInput
from runner.core.schedules.times import When, check_name, jitter, plan, trigger_id
from store.models import NewRun, Overlap, Schedule, TriggerEnvelope

BERLIN_SPRING = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)  # the night of Sun 29 March
BERLIN_AUTUMN = datetime(2026, 10, 24, 12, 0, tzinfo=UTC)  # the night of Sun 25 October


def utc(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=UTC)  # type: ignore[misc]


def upcoming(when: When, after: datetime, count: int) -> list[datetime]:
    times = when.times(after)
    return [next(times) for _ in range(count)]


def test_a_fixed_time_in_the_skipped_hour_fires_when_the_clock_jumps() -> None:
    """02:30 does not exist in Berlin on 29 March 2026: it fires at 03:00 CEST
    (01:00 UTC), as Debian's cron does; the next days at 02:30 CEST."""
    when = When.checked("30 2 * * *", "Europe/Berlin", None)
    assert upcoming(when, BERLIN_SPRING, 3) == [
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 30, 0, 30),
        utc(2026, 3, 31, 0, 30),
    ]


def test_an_hourly_expression_has_no_two_oclock_in_march() -> None:
    when = When.checked("0 * * * *", "Europe/Berlin", None)
    night = [t for t in upcoming(when, BERLIN_SPRING, 16) if t.date() == utc(2026, 3, 29).date()]
    # 00:00, 01:00 CET, then 03:00 CEST: local 02:00 never happens.
    assert night[:4] == [
        utc(2026, 3, 29, 0, 0),
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 29, 2, 0),
        utc(2026, 3, 29, 3, 0),
    ]
    assert utc(2026, 3, 29, 1, 0).astimezone(when_zone(when)).hour == 3


def when_zone(when: When) -> Any:
    from zoneinfo import ZoneInfo

    return ZoneInfo(when.timezone)


def test_a_fixed_time_in_the_repeated_hour_fires_once_and_a_wildcard_hour_twice() -> None:
    """02:30 happens twice in Berlin on 25 October 2026: a fixed time fires
    the first time only (02:30 CEST, 00:30 UTC); ``0 * * * *`` fires at
    02:00 CEST and again at 02:00 CET."""
    fixed = When.checked("30 2 * * *", "Europe/Berlin", None)
    assert upcoming(fixed, BERLIN_AUTUMN, 2) == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    hourly = When.checked("0 * * * *", "Europe/Berlin", None)
    times = upcoming(hourly, utc(2026, 10, 24, 22, 30), 4)
    assert times == [
        utc(2026, 10, 24, 23, 0),  # 01:00 CEST
        utc(2026, 10, 25, 0, 0),  # 02:00 CEST
        utc(2026, 10, 25, 1, 0),  # 02:00 CET
        utc(2026, 10, 25, 2, 0),  # 03:00 CET
    ]


def test_an_interval_counts_from_the_epoch_and_ignores_the_zone() -> None:
    when = When.checked(None, "Europe/Berlin", 3600)
    assert upcoming(when, utc(2026, 3, 29, 0, 20, 5), 3) == [
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 29, 2, 0),
        utc(2026, 3, 29, 3, 0),
    ]
    assert When.checked(None, "UTC", 2).after(utc(2026, 1, 1, 0, 0, 1)) == utc(2026, 1, 1, 0, 0, 2)


@pytest.mark.parametrize(
    ("cron", "timezone", "every", "match"),
    [
        ("61 * * * *", "UTC", None, "bad cron expression '61 \\* \\* \\* \\*': Bad minute"),
        ("* * *", "UTC", None, "Wrong number of fields"),
        ("0 0 30 2 *", "UTC", None, "Bad day-of-month"),
        ("x" * 300, "UTC", None, "at most 200 characters"),
        ("0 * * * *", "Mars/Olympus", None, "unknown time zone 'Mars/Olympus'"),
        ("0 * * * *", "../../etc/passwd", None, "unknown time zone"),
        ("0 * * * *", "", None, "unknown time zone"),
        (None, "UTC", 0.5, "every must be from 1 s"),
        (None, "UTC", float("inf"), "every must be a number"),
        (None, "UTC", "5", "every must be a number"),
        ("0 * * * *", "UTC", 60, "not both or neither"),
        (None, "UTC", None, "not both or neither"),
    ],
)
def test_a_bad_expression_zone_or_interval_is_one_clear_error(
    cron: Any, timezone: Any, every: Any, match: str
) -> None:
    with pytest.raises(InvalidInput, match=match):
        When.checked(cron, timezone, every)


@pytest.mark.parametrize("name", ["", "-x", "a b", "x" * 101, "naïve", "a/b", None])
def test_a_schedule_name_is_plain(name: Any) -> None:
    with pytest.raises(InvalidInput, match="a schedule's name is"):
        check_name(name)


def test_jitter_is_the_same_everywhere_and_within_its_bound() -> None:
    at = utc(2026, 1, 1, 9, 0)
    delays = {jitter("nightly", at + timedelta(hours=h), 30) for h in range(50)}
    assert all(timedelta(0) <= d <= timedelta(seconds=30) for d in delays)
    assert len(delays) > 40  # spread, not one value
    assert jitter("nightly", at, 30) == jitter("nightly", at, 30)
    assert jitter("nightly", at, 0) == timedelta(0)


def test_a_firings_trigger_id_is_its_schedule_and_time() -> None:
    assert (
        trigger_id("nightly", utc(2026, 1, 1, 9, 0)) == "schedule:nightly:2026-01-01T09:00:00+00:00"
    )


def schedule(**fields: Any) -> Schedule:
    base: dict[str, Any] = {
        "name": "s",
        "agent": "a",
        "cron": None,
        "timezone": "UTC",
        "every_seconds": 60.0,
        "payload": {},
        "thread": None,
        "keys": {},
        "overlap": Overlap.SKIP,
        "catchup_window_seconds": 300.0,
        "jitter_seconds": 0.0,
        "paused": False,
        "next_at": utc(2026, 1, 1, 9, 0),
        "next_due_at": utc(2026, 1, 1, 9, 0),
        "created_at": utc(2026, 1, 1),
        "updated_at": utc(2026, 1, 1),
    }
    return Schedule(**{**base, **fields})


def build(s: Schedule, at: datetime) -> NewRun:
    return NewRun(agent=s.agent, trigger=TriggerEnvelope(id=trigger_id(s.name, at)))


def test_firings_within_the_catch_up_window_run_and_older_ones_are_missed() -> None:
    # tick() comes back at 09:10 after missing 09:00 .. 09:10: the window is 5 min.
    planned = plan(schedule(), utc(2026, 1, 1, 9, 10), build, window_floor=10)
    outcomes = [(f.scheduled_at.minute, f.run is not None) for f in planned.firings]
    assert outcomes == [(m, m >= 5) for m in range(0, 11)]
    assert all("past the catch-up window of 300 s" in (f.reason or "") for f in planned.firings[:5])
    assert planned.next_at == utc(2026, 1, 1, 9, 11)


def test_a_long_outage_records_its_missed_firings_in_bounded_rows() -> None:
    # Ten days away from an every-minute schedule: 100 rows, one for the rest
    # of the gap, then the window's firings.
    planned = plan(schedule(), utc(2026, 1, 11, 9, 0), build, window_floor=10)
    missed = [f for f in planned.firings if f.run is None]
    ran = [f for f in planned.firings if f.run is not None]
    assert len(missed) == 101 and "with every later firing before" in (missed[-1].reason or "")
    assert [f.scheduled_at for f in ran] == [
        utc(2026, 1, 11, 8, 55) + timedelta(minutes=i) for i in range(6)
    ]
    assert planned.next_at == utc(2026, 1, 11, 9, 1)


def test_a_firing_waits_for_its_jitter() -> None:
    s = schedule(jitter_seconds=30.0)
    delay = jitter("s", s.next_at, 30.0)
    early = plan(s, s.next_at + delay - timedelta(seconds=0.5), build, window_floor=10)
    assert early.firings == [] and early.next_due_at == s.next_at + delay
    due = plan(s, s.next_at + delay, build, window_floor=10)
    assert [f.scheduled_at for f in due.firings] == [s.next_at]
