"""When a schedule fires: its scheduled times, their jitter, and which of the
due ones still run after ``tick()`` was away (the catch-up window).

Cron expressions are read by ``cronsim``, which follows Debian's cron, daylight
saving included (docs/triggers.md): on a spring-forward night a time in the
skipped hour fires when the clock jumps (``30 2 * * *`` in Europe/Berlin fires
at 03:00 on the last Sunday of March), and on a fall-back night a fixed time
in the repeated hour fires once, the first time, while an expression with a
wildcard hour fires in both (``0 * * * *`` fires at 02:00 CEST and 02:00 CET).
An interval (``every``) counts from the Unix epoch, so ``every=3600`` fires on
the hour in UTC, whatever the time the schedule was made.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runner.errors import InvalidInput
from store.models import NewRun, Schedule
from store.pg.schedules import DueFiring, FiringPlan

MAX_CRON_CHARS = 200
MIN_EVERY_SECONDS = 1.0
MAX_EVERY_SECONDS = 366 * 86400.0
MAX_JITTER_SECONDS = 86400.0
# A name goes into trigger ids, URLs and the command line.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
# The most firings one tick() records for one schedule; a longer backlog is
# taken by the next ticks (each bounded), and missed firings past this many
# in a row are recorded as one.
MAX_FIRINGS_PER_TICK = 200
MAX_MISSED_ROWS = 100


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput(
            "a schedule's name is 1-100 letters, digits, '_', '.' or '-', starting with a "
            f"letter or digit, not {str(name)[:120]!r}"
        )
    return name


def check_timezone(name: object) -> ZoneInfo:
    """An IANA time zone (``Europe/Berlin``, ``UTC``)."""
    if not isinstance(name, str) or not name or len(name) > 64:
        raise InvalidInput(f"unknown time zone {str(name)[:80]!r}; use an IANA name like UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(
            f"unknown time zone {name!r}; use an IANA name like Europe/Berlin or UTC"
        ) from None


def seconds(value: object, what: str) -> float:
    """A duration given as seconds or a ``timedelta``."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{what} must be a number of seconds or a timedelta, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class When:
    """A schedule's times: a cron expression in a time zone, or an interval."""

    cron: str | None
    timezone: str
    every_seconds: float | None

    @classmethod
    def of(cls, schedule: Schedule) -> When:
        return cls(schedule.cron, schedule.timezone, schedule.every_seconds)

    @classmethod
    def checked(cls, cron: object, timezone: object, every: object) -> When:
        """One clear error (and nothing stored) for a bad expression, zone or interval."""
        if (cron is None) == (every is None):
            raise InvalidInput("give a schedule either cron=... or every=..., not both or neither")
        zone = check_timezone(timezone)
        if cron is not None:
            if not isinstance(cron, str) or not cron.strip() or len(cron) > MAX_CRON_CHARS:
                raise InvalidInput(
                    f"a cron expression is five fields of at most {MAX_CRON_CHARS} characters"
                )
            when = cls(" ".join(cron.split()), zone.key, None)
            when.after(datetime.now(UTC))  # raises for a bad or never-matching expression
            return when
        interval = seconds(every, "every")
        if not MIN_EVERY_SECONDS <= interval <= MAX_EVERY_SECONDS:
            raise InvalidInput(
                f"every must be from {MIN_EVERY_SECONDS:g} s to {MAX_EVERY_SECONDS:g} s (a year)"
            )
        return cls(None, zone.key, interval)

    def after(self, moment: datetime) -> datetime:
        """The first scheduled time strictly after ``moment``, in UTC."""
        if self.every_seconds is not None:
            every = self.every_seconds
            count = math.floor(moment.timestamp() / every) + 1
            return datetime.fromtimestamp(count * every, UTC)
        from cronsim import CronSim, CronSimError

        assert self.cron is not None
        local = moment.astimezone(ZoneInfo(self.timezone))
        try:
            found = next(CronSim(self.cron, local))
        except CronSimError as exc:
            raise InvalidInput(f"bad cron expression {self.cron!r}: {exc}") from None
        except StopIteration:
            raise InvalidInput(
                f"the cron expression {self.cron!r} matches no time in the next 50 years"
            ) from None
        return found.astimezone(UTC)

    def times(self, after: datetime) -> Iterator[datetime]:
        """The scheduled times after ``after``, in order, in UTC."""
        moment = after
        while True:
            moment = self.after(moment)
            yield moment


def jitter(name: str, scheduled_at: datetime, jitter_seconds: float) -> timedelta:
    """A firing's delay, from 0 up to ``jitter_seconds``: the same for a given
    schedule and time in every process, so that every tick agrees when it is due."""
    if jitter_seconds <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{name}|{scheduled_at.isoformat()}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return timedelta(seconds=fraction * jitter_seconds)


def trigger_id(name: str, scheduled_at: datetime) -> str:
    """A firing's run's trigger id: the schedule and its scheduled time, so
    that a firing started twice (two beats, a restarted tick) is one run."""
    return f"schedule:{name}:{scheduled_at.astimezone(UTC).isoformat()}"


def plan(
    schedule: Schedule,
    now: datetime,
    build: Callable[[Schedule, datetime], NewRun],
    *,
    window_floor: float,
) -> FiringPlan:
    """The firings of ``schedule`` due at ``now``, oldest first, and its next
    time. A firing older than the catch-up window (at least ``window_floor``
    seconds, so that tick()'s own period never makes one missed) is missed;
    after :data:`MAX_MISSED_ROWS` missed ones in a row the rest of the gap is
    recorded as one."""
    when = When.of(schedule)
    window = timedelta(seconds=max(schedule.catchup_window_seconds, window_floor))
    firings: list[DueFiring] = []
    missed = 0
    at = schedule.next_at

    def due(moment: datetime) -> datetime:
        return moment + jitter(schedule.name, moment, schedule.jitter_seconds)

    while due(at) <= now and len(firings) < MAX_FIRINGS_PER_TICK:
        late = now - due(at)
        if late <= window:
            firings.append(DueFiring(at, build(schedule, at)))
            at = when.after(at)
            continue
        missed += 1
        if missed <= MAX_MISSED_ROWS:
            why = (
                f"missed: tick() came {late.total_seconds():.0f} s after it, past the "
                f"catch-up window of {window.total_seconds():.0f} s"
            )
            firings.append(DueFiring(at, None, why))
            at = when.after(at)
            continue
        # The first time that may still be within the window (its jitter too).
        edge = now - window - timedelta(seconds=schedule.jitter_seconds, microseconds=1)
        resume = max(when.after(edge), when.after(at))
        why = (
            f"missed, with every later firing before {resume:%Y-%m-%d %H:%M:%S} UTC: tick() "
            f"did not run within the catch-up window of {window.total_seconds():.0f} s"
        )
        firings.append(DueFiring(at, None, why))
        at = resume
    return FiringPlan(firings, at, due(at))


def first_time(
    when: When, name: str, jitter_seconds: float, now: datetime
) -> tuple[datetime, datetime]:
    """A new (or resumed) schedule's next time after ``now``, and when it is due."""
    at = when.after(now)
    return at, at + jitter(name, at, jitter_seconds)
