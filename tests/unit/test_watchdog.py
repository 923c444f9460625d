"""The beat watchdog (runner/core/engine/watchdog.py): one WARNING per stretch without
tick(), an INFO when ticks come back, Redis outages ridden out; and the worker
beacon it writes. A fake clock and fake beacons, except where it runs for real."""

from __future__ import annotations

import logging

import pytest

from runner.core.engine.watchdog import BEACON_PERIODS, Watchdog, age_text, period
from store.errors import StoreUnavailable
from store.workers import WorkerInfo

TICK = 5.0  # seconds: the watchdog looks every 2.5 s, tick() is overdue after 15 s


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Beacons:
    """Leases' beacons in memory; ``down`` makes them fail like a Redis outage."""

    def __init__(self, last: float | None = None) -> None:
        self.last = last
        self.down = False
        self.marks: list[tuple[str, float, float]] = []

    def mark_worker(self, info: WorkerInfo, ttl_seconds: float) -> None:
        if self.down:
            raise StoreUnavailable("Redis is unavailable: Connection refused")
        self.marks.append((info.name, info.seen_at, ttl_seconds))

    def last_tick(self) -> float | None:
        if self.down:
            raise StoreUnavailable("Redis is unavailable: Connection refused")
        return self.last


def looks(dog: Watchdog, clock: Clock, seconds: float) -> None:
    """What the thread would do over ``seconds``: a look every period."""
    end = clock.now + seconds
    while clock.now + dog.period <= end:
        clock.now += dog.period
        dog.check()


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "runner.core.engine.watchdog" and r.levelno == logging.WARNING
    ]


def infos(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "runner.core.engine.watchdog" and r.levelno == logging.INFO
    ]


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_no_tick_ever_warns_once_after_three_intervals(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "runner.core.engine.watchdog")
    asked: list[float] = []

    def stored() -> float | None:
        asked.append(clock.now)
        return None  # the store has no mark either

    dog = Watchdog(Beacons(), WorkerInfo("w1@host"), TICK, stored_last_tick=stored, clock=clock)
    dog.check()
    looks(dog, clock, 3 * TICK)  # exactly three intervals: not yet overdue
    assert warnings(caplog) == [] and asked == []
    looks(dog, clock, dog.period)
    [line] = warnings(caplog)
    assert (
        "tick() has never run (neither Redis nor Postgres has a mark of a tick; this worker "
        "has been up 18 s), more than 3 intervals of 5 s" in line
    )
    assert "Is celery beat running?" in line
    assert "runs whose worker died are not taken over" in line
    assert "notifications are not sent again" in line and "approvals do not expire" in line
    looks(dog, clock, 600)  # still no tick: no second warning, and the store asked once
    assert len(warnings(caplog)) == 1 and len(asked) == 1


def test_one_warning_per_stretch_and_an_info_when_ticks_resume(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "runner.core.engine.watchdog")
    beacons = Beacons(last=clock.now)
    dog = Watchdog(beacons, WorkerInfo("w1@host"), TICK, clock=clock)
    for _ in range(20):  # beat ticks every interval: all quiet
        looks(dog, clock, TICK)
        beacons.last = clock.now
    assert warnings(caplog) == [] and infos(caplog) == []

    looks(dog, clock, 3 * TICK + dog.period)  # beat stops
    [first] = warnings(caplog)
    assert "tick() last ran 18 s ago, more than 3 intervals of 5 s" in first
    looks(dog, clock, 120)
    assert len(warnings(caplog)) == 1

    beacons.last = clock.now  # beat is back
    looks(dog, clock, dog.period)
    assert infos(caplog) == ["tick() runs again (last 2.5 s ago)"]
    looks(dog, clock, TICK)  # within the allowance: nothing more
    assert len(warnings(caplog)) == 1 and len(infos(caplog)) == 1

    looks(dog, clock, 3 * TICK + dog.period)  # stops again: a new stretch, a new warning
    assert len(warnings(caplog)) == 2


def test_a_worker_that_just_started_gives_beat_its_full_allowance(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Beat may be starting alongside the worker: the last tick being hours
    old says nothing until this worker has waited three intervals itself."""
    caplog.set_level(logging.INFO, "runner.core.engine.watchdog")
    dog = Watchdog(Beacons(last=clock.now - 7200), WorkerInfo("w1@host"), TICK, clock=clock)
    dog.check()
    looks(dog, clock, 3 * TICK)
    assert warnings(caplog) == []
    looks(dog, clock, dog.period)
    [line] = warnings(caplog)
    assert "tick() last ran 2 h ago" in line


def test_a_redis_outage_is_logged_once_and_the_watchdog_carries_on(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "runner.core.engine.watchdog")
    beacons = Beacons(last=clock.now)
    dog = Watchdog(beacons, WorkerInfo("w1@host"), TICK, clock=clock)
    beacons.down = True
    looks(dog, clock, 60)
    [line] = warnings(caplog)
    assert "cannot reach Redis" in line and "Connection refused" in line
    beacons.down = False
    looks(dog, clock, dog.period)
    assert infos(caplog) == ["watchdog: Redis is reachable again"]
    # Back with Redis, the check works again: the last tick is a minute old.
    assert len(warnings(caplog)) == 2
    assert "tick() last ran 62 s ago" in warnings(caplog)[1]


def test_without_a_mark_in_redis_the_stores_mark_says_when_tick_last_ran(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 32: a Redis restart loses Redis's mark. The store's mark answers,
    asked only once the worker has waited its allowance, and only until it warns."""
    caplog.set_level(logging.INFO, "runner.core.engine.watchdog")
    asked: list[float] = []
    ticked = clock.now - 40

    def stored() -> float | None:
        asked.append(clock.now)
        return ticked

    dog = Watchdog(Beacons(), WorkerInfo("w1@host"), TICK, stored_last_tick=stored, clock=clock)
    looks(dog, clock, 3 * TICK)
    assert asked == []  # the worker's own start bounds the wait until now
    looks(dog, clock, dog.period)
    [line] = warnings(caplog)
    assert "tick() last ran 58 s ago, more than 3 intervals of 5 s" in line
    assert "never" not in line
    looks(dog, clock, 600)
    assert len(asked) == 1 and len(warnings(caplog)) == 1


def test_when_neither_redis_nor_the_store_can_say_the_warning_says_unknown(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "runner.core.engine.watchdog")

    def stored() -> float | None:
        raise StoreUnavailable("the database is unavailable: connection refused")

    dog = Watchdog(Beacons(), WorkerInfo("w1@host"), TICK, stored_last_tick=stored, clock=clock)
    looks(dog, clock, 3 * TICK + dog.period)
    [line] = warnings(caplog)
    assert line.startswith(
        "when tick() last ran is unknown: Redis has no mark of it (a restart loses it) and "
        "the mark Postgres keeps could not be read (the database is unavailable: connection "
        "refused) (this worker has been up 18 s)"
    )
    assert "never" not in line

    caplog.clear()
    alone = Watchdog(Beacons(), WorkerInfo("w2@host"), TICK, clock=clock)  # no store to ask
    looks(alone, clock, 3 * TICK + alone.period)
    [line] = warnings(caplog)
    assert "when tick() last ran is unknown" in line and "never" not in line


def test_every_look_marks_the_worker_alive_for_a_few_periods(clock: Clock) -> None:
    beacons = Beacons(last=clock.now)
    dog = Watchdog(beacons, WorkerInfo("w1@host"), TICK, clock=clock)
    looks(dog, clock, 3 * dog.period)
    assert [m[0] for m in beacons.marks] == ["w1@host"] * 3
    assert [m[1] for m in beacons.marks] == sorted({m[1] for m in beacons.marks})
    assert {m[2] for m in beacons.marks} == {BEACON_PERIODS * dog.period}


@pytest.mark.parametrize(
    ("tick", "expected"), [(0.1, 0.25), (1.0, 0.5), (5.0, 2.5), (20.0, 10.0), (600.0, 10.0)]
)
def test_the_period_is_a_fraction_of_the_interval_within_bounds(
    tick: float, expected: float
) -> None:
    assert period(tick) == expected


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-1, "0.0 s"), (0.84, "0.8 s"), (12.4, "12 s"), (119, "119 s"), (300, "5 min"), (7300, "2 h")],
)
def test_ages_read_like_a_person_would_say_them(seconds: float, text: str) -> None:
    assert age_text(seconds) == text
