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
import itertools
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runner.core.errors import InvalidInput
from store.models import NewRun, Schedule
from store.pg.schedules import DueFiring, FiringPlan

MAX_CRON_CHARS = 200
MIN_EVERY_SECONDS = 1.0
MAX_EVERY_SECONDS = 366 * 86400.0
MAX_JITTER_SECONDS = 86400.0
_CRON_FIELDS = ("minute", "hour", "day of month", "month", "day of week")
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
            fields = cron.split()
            if len(fields) != len(_CRON_FIELDS):
                # cronsim would read six as seconds first: not the cron the docs describe.
                raise InvalidInput(
                    f"bad cron expression {cron!r}: Wrong number of fields: {len(fields)}, "
                    f"where cron has five ({', '.join(_CRON_FIELDS)})"
                )
            when = cls(" ".join(fields), zone.key, None)
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

    def shortest_gap(self) -> float:
        """The shortest time between two of its scheduled times, in seconds:
        the interval, or the cron expression's (:func:`cron_gap`)."""
        if self.every_seconds is not None:
            return self.every_seconds
        assert self.cron is not None
        return cron_gap(self.cron)

    def times(self, after: datetime) -> Iterator[datetime]:
        """The scheduled times after ``after``, in order, in UTC."""
        moment = after
        while True:
            moment = self.after(moment)
            yield moment


# The calendar's 28 years from 2001: every kind of year (its first weekday,
# leap or not) is among them, so every day-of-month, month and day-of-week
# pattern cron can match (L, W and # included) shows each way it falls there,
# the turn of each year too. (1901 to 2099 repeats every 28 years.)
_CALENDAR = (datetime(2001, 1, 1, tzinfo=UTC), datetime(2029, 1, 2, tzinfo=UTC))
_DAY = 86400.0


def cron_gap(cron: str) -> float:
    """The shortest gap, in seconds, between two times of a five-field cron
    expression (``math.inf`` if it matches one day only in 28 years).

    cron's minute and hour fields do not depend on the day, so every day the
    expression matches has the same times of day. A gap is either between
    two of them on one day, or from the last of one day to the first of the
    next day that matches; the second is shortest for the closest two
    matching days, which the calendar above holds. Both are counted on a
    clock without daylight saving (UTC): the expression's own gaps, the same
    in every zone. A clock change can shorten a gap or two a year by up to
    an hour, and a jitter within that hour of the gap can then make that one
    firing late (missed, past a short catch-up window); the rule leaves
    that out rather than read an expression differently by zone.

    cronsim iterates the times (the standard's library reads the fields),
    of one day, then of the days alone, each at midnight."""
    from cronsim import CronSim

    minute, hour, day, month, weekday = cron.split()
    start, end = _CALENDAR
    before = start - timedelta(minutes=1)  # cronsim gives the times after it
    clock: list[float] = []
    for at in CronSim(f"{minute} {hour} * * *", before):
        if at >= start + timedelta(days=1):
            break
        clock.append((at - start).total_seconds())
        if len(clock) > 1 and clock[-1] - clock[-2] == 60:
            return 60.0  # a minute apart: no cron expression has a shorter gap
    within = min((b - a for a, b in itertools.pairwise(clock)), default=math.inf)
    span = clock[-1] - clock[0]
    if within <= _DAY - span:
        return within  # no two days' times can be closer than this
    days = math.inf
    last: datetime | None = None
    for at in CronSim(f"0 0 {day} {month} {weekday}", before):
        if at > end:
            break
        if last is not None:
            days = min(days, (at - last).total_seconds())
            if days == _DAY:
                break  # two days in a row: none are closer
        last = at
    return min(within, days - span)


def _duration(value: float) -> str:
    for unit, size in (("day", _DAY), ("h", 3600.0), ("min", 60.0)):
        if value >= size and value % size == 0:
            count = int(value // size)
            return f"{count} {unit}" + ("s" if unit == "day" and count > 1 else "")
    return f"{value:g} s"


def check_jitter(when: When, value: object) -> float:
    """A schedule's jitter in seconds: from 0 to :data:`MAX_JITTER_SECONDS`,
    and shorter than the shortest gap between its times. A longer one would
    let a firing be due after the next scheduled time: firings bunch up, and
    those that wait past the catch-up window are missed."""
    delay = seconds(value, "jitter")
    if not 0 <= delay <= MAX_JITTER_SECONDS:
        raise InvalidInput(f"jitter must be from 0 to {MAX_JITTER_SECONDS:g} seconds")
    if delay == 0 or (when.cron is not None and delay < 60):
        return delay  # no cron expression has two times closer than a minute
    if when.every_seconds is not None:
        if delay >= when.every_seconds:
            raise InvalidInput("jitter must be shorter than the interval")
        return delay
    gap = when.shortest_gap()
    if delay >= gap:
        raise InvalidInput(
            f"jitter must be shorter than the shortest gap between the times of "
            f"{when.cron!r}, {_duration(gap)}, not {delay:g} s"
        )
    return delay


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


def unmade(error: InvalidInput) -> str:
    """Why a firing whose run cannot be made is recorded missed."""
    return f"missed: its run could not be made: {error.message}"


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
    recorded as one. A firing whose run ``build`` cannot make
    (:class:`InvalidInput`: a payload over the limit, the agent's concurrency
    key failing) is missed too, with why: retrying it would fail alike."""
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
            try:
                firings.append(DueFiring(at, build(schedule, at)))
            except InvalidInput as exc:
                firings.append(DueFiring(at, None, unmade(exc)))
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
