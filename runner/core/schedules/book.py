"""The schedules of a deployment (``engine.schedules``), and their firing by
``tick()``.

A schedule is a row in Postgres, made and changed at run time; beat only runs
``tick()``, which fires what is due (store/pg/schedules.py says why a
scheduled time starts one run at most). A firing's run is a run like any
other: its trigger is ``source="schedule"``, ``trigger=<the schedule's
name>``, its id derived from the schedule and the scheduled time, its payload,
thread and keys the schedule's (``keys["scheduled_at"]`` says which time it is
for, unless the schedule sets that key itself).
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import logging
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from runner.core import appdb
from runner.core.agent import Registry
from runner.core.errors import InvalidInput, RunwrightError
from runner.core.schedules.times import (
    When,
    check_jitter,
    check_name,
    first_time,
    plan,
    seconds,
    trigger_id,
    unmade,
)
from runner.core.settings import Settings
from store.models import Firing, NewRun, Overlap, Schedule, TriggerEnvelope
from store.pg.schedules import SET_ASIDE_FOR, Fired, FiringPlan
from store.postgres import PostgresStore
from store.validate import check_new_run, check_priority

log = logging.getLogger(__name__)

DEFAULT_CATCHUP_SECONDS = 300.0
SCHEDULED_AT_KEY = "scheduled_at"
_UNSET: Any = object()
MAX_FIRINGS_LISTED = 1000


class ScheduleDeps(Protocol):
    """What the schedules need of the engine: the engine's ``Deps``
    (runner/core/engine/deps.py) is one, handed in by ``Engine.schedules`` and
    ``tick()``; schedules sit below the engine and do not import it."""

    @property
    def store(self) -> PostgresStore: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def settings(self) -> Settings: ...

    def send(self, run_ids: Iterable[str]) -> None: ...

    def cancel(self, run_id: str, *, by: str | None = None) -> object: ...


def _overlap(value: object) -> Overlap:
    try:
        return Overlap(str(value))
    except ValueError:
        known = ", ".join(o.value for o in Overlap)
        raise InvalidInput(f"overlap must be one of {known}, not {value!r}") from None


def _keys(keys: object) -> dict[str, str]:
    if keys is None:
        return {}
    if not isinstance(keys, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in keys.items()
    ):
        raise InvalidInput("a schedule's keys are a mapping of text to text")
    return dict(keys)


class Schedules:
    """``engine.schedules``: make, change and look at schedules (docs/triggers.md)."""

    def __init__(self, deps: ScheduleDeps) -> None:
        self.deps = deps

    # ------------------------------------------------------------ managing

    def create(
        self,
        name: str,
        agent: str,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        timezone: str = "UTC",
        payload: Any = None,
        thread: str | None = None,
        keys: Mapping[str, str] | None = None,
        overlap: Overlap | str = Overlap.SKIP,
        catchup_window: float | timedelta = DEFAULT_CATCHUP_SECONDS,
        jitter: float | timedelta = 0.0,
        paused: bool = False,
        priority: int = 0,
    ) -> Schedule:
        """A new schedule of ``agent``: by ``cron`` (five fields, read in the
        IANA ``timezone``) or ``every`` seconds. ``overlap`` says what a firing
        does while an earlier one's run has not ended (``skip``,
        ``buffer_one``, ``allow_all``, ``cancel_other``); firings that
        ``tick()`` comes to later than ``catchup_window`` (beat was down) are
        recorded missed; ``jitter`` delays each firing by up to that long;
        ``priority`` (0 to 9) is its runs' (docs/flow-control.md). A bad
        expression, zone, interval or payload is one :class:`InvalidInput`, and
        nothing is stored."""
        now = datetime.now(UTC)
        draft = Schedule(
            name=check_name(name),
            agent=agent,
            cron=None,
            timezone="UTC",
            every_seconds=None,
            payload={} if payload is None else payload,
            thread=thread,
            keys=_keys(keys),
            overlap=_overlap(overlap),
            catchup_window_seconds=0.0,
            jitter_seconds=0.0,
            paused=bool(paused),
            priority=check_priority(priority),
            next_at=now,
            next_due_at=now,
            created_at=now,
            updated_at=now,
        )
        return self.deps.store.create_schedule(
            self._checked(draft, cron, timezone, every, catchup_window, jitter, now)
        )

    def get(self, name: str) -> Schedule:
        return self.deps.store.get_schedule(name)

    def list(self) -> list[Schedule]:
        return self.deps.store.list_schedules()

    def update(
        self,
        name: str,
        *,
        agent: str = _UNSET,
        cron: str | None = _UNSET,
        every: float | timedelta | None = _UNSET,
        timezone: str = _UNSET,
        payload: Any = _UNSET,
        thread: str | None = _UNSET,
        keys: Mapping[str, str] | None = _UNSET,
        overlap: Overlap | str = _UNSET,
        catchup_window: float | timedelta = _UNSET,
        jitter: float | timedelta = _UNSET,
        priority: int = _UNSET,
    ) -> Schedule:
        """Change what is given, keeping the rest. A change of its times (cron,
        interval, zone, jitter) moves the next firing to the first new time
        from now; giving ``cron`` replaces an interval and the other way round."""

        def change(current: Schedule) -> Schedule:
            now = datetime.now(UTC)
            spec = (cron, every, timezone, jitter)
            new_cron: object = current.cron
            new_every: object = current.every_seconds
            if cron is not _UNSET:
                new_cron, new_every = cron, None if cron is not None else new_every
            if every is not _UNSET:
                new_every, new_cron = every, None if every is not None else new_cron
            changed = dataclasses.replace(
                current,
                agent=current.agent if agent is _UNSET else agent,
                payload=current.payload if payload is _UNSET else payload,
                thread=current.thread if thread is _UNSET else thread,
                keys=current.keys if keys is _UNSET else _keys(keys),
                overlap=current.overlap if overlap is _UNSET else _overlap(overlap),
                priority=current.priority if priority is _UNSET else check_priority(priority),
            )
            checked = self._checked(
                changed,
                new_cron,
                current.timezone if timezone is _UNSET else timezone,
                new_every,
                current.catchup_window_seconds if catchup_window is _UNSET else catchup_window,
                current.jitter_seconds if jitter is _UNSET else jitter,
                now,
            )
            if all(part is _UNSET for part in spec):
                # Same times: the next firing stays where it was.
                checked = dataclasses.replace(
                    checked, next_at=current.next_at, next_due_at=current.next_due_at
                )
            return checked

        return self.deps.store.change_schedule(check_name(name), change)

    def pause(self, name: str) -> Schedule:
        """Stop firing it; a paused schedule's times pass unrecorded."""
        return self.deps.store.change_schedule(
            check_name(name), lambda s: dataclasses.replace(s, paused=True)
        )

    def resume(self, name: str) -> Schedule:
        """Fire it again, from its first time after now (the times that passed
        while it was paused are not caught up)."""

        def resumed(current: Schedule) -> Schedule:
            if not current.paused:
                return current
            at, due = first_time(
                When.of(current), current.name, current.jitter_seconds, datetime.now(UTC)
            )
            return dataclasses.replace(current, paused=False, next_at=at, next_due_at=due)

        return self.deps.store.change_schedule(check_name(name), resumed)

    def delete(self, name: str) -> None:
        """Delete it and its firings' records; the runs it started stay."""
        self.deps.store.delete_schedule(check_name(name))

    def trigger(self, name: str) -> Firing:
        """Start the schedule's run now, outside its times and whatever its
        overlap policy (a person asks for it); recorded as ``triggered``."""
        firing = self.deps.store.trigger_schedule(check_name(name), self.new_run)
        if firing.run_id is not None:
            self.deps.send([firing.run_id])
        return firing

    def firings(self, name: str, limit: int = 50) -> builtins.list[Firing]:
        """Its firings, newest first: each scheduled time, what became of it
        (``started``, ``skipped``, ``buffered``, ``missed``, ``triggered``),
        its run and why."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidInput(f"limit must be a whole number from 1 to {MAX_FIRINGS_LISTED}")
        return self.deps.store.firings(check_name(name), limit)

    def next_firings(
        self, name: str, after: datetime | None = None, count: int = 5
    ) -> builtins.list[datetime]:
        """Its next ``count`` scheduled times after ``after`` (default: now),
        in UTC, computed from its cron or interval: nothing is started."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
            raise InvalidInput("count must be a whole number from 1 to 1000")
        when = When.of(self.get(name))
        start = after if after is not None else datetime.now(UTC)
        if start.tzinfo is None:
            raise InvalidInput("after must be an aware datetime (with its time zone)")
        times = when.times(start)
        return [next(times) for _ in range(count)]

    # ----------------------------------------------------------- its runs

    def new_run(self, schedule: Schedule, scheduled_at: datetime) -> NewRun:
        """The run a firing starts: :class:`AgentNotFound` if this process
        lacks the agent, :class:`InvalidInput` if the run cannot be made (its
        trigger refused, as a start would refuse it; the agent's concurrency
        key failing on it)."""
        spec = self.deps.registry.get(schedule.agent)
        keys = dict(schedule.keys)
        keys.setdefault(SCHEDULED_AT_KEY, scheduled_at.astimezone(UTC).isoformat())
        try:
            envelope = TriggerEnvelope(
                id=trigger_id(schedule.name, scheduled_at),
                source="schedule",
                trigger=schedule.name,
                payload=schedule.payload,
                keys=keys,
                thread=schedule.thread,
            )
        except ValueError as exc:  # the envelope's own checks (pydantic)
            raise InvalidInput(f"invalid schedule: {exc}") from None
        try:
            key = spec.key_for(envelope)
        except Exception as exc:  # the application's code, given this schedule's trigger
            raise InvalidInput(
                f"the concurrency key of agent {spec.name!r} raised {type(exc).__name__}: {exc}"
            ) from None
        new = NewRun(
            agent=spec.name,
            trigger=envelope,
            concurrency_key=key,
            tenant=spec.tenant_for(envelope),
            priority=schedule.priority,
        )
        check_new_run(new, self.deps.store.max_payload_bytes)
        return new

    def _checked(
        self,
        draft: Schedule,
        cron: object,
        timezone: object,
        every: object,
        catchup_window: object,
        jitter: object,
        now: datetime,
    ) -> Schedule:
        """``draft`` with its times checked and its next time set; its agent
        and what its runs would carry checked as a start would."""
        when = When.checked(cron, timezone, every)
        window = seconds(catchup_window, "catchup_window")
        if window < 0:
            raise InvalidInput("catchup_window must be 0 or more seconds")
        delay = check_jitter(when, jitter)
        at, due = first_time(when, draft.name, delay, now)
        schedule = dataclasses.replace(
            draft,
            cron=when.cron,
            timezone=when.timezone,
            every_seconds=when.every_seconds,
            catchup_window_seconds=window,
            jitter_seconds=delay,
            next_at=at,
            next_due_at=due,
        )
        self.new_run(schedule, at)  # AgentNotFound, or InvalidInput for a run it cannot make
        return schedule


# ------------------------------------------------------------------ firing


# How often one process says that due schedules wait for agents it does not
# load (the same agents; others are said at once).
UNLOADED_SAID_EVERY_SECONDS = 300.0
_unloaded_said: tuple[frozenset[str], float] | None = None


def fire(deps: ScheduleDeps, now: datetime | None = None) -> Fired:
    """What tick() does for schedules: fire the due ones of the agents this
    process loads (their runs sent, the earlier runs ``cancel_other`` names
    cancelled) and start the buffered firings whose schedule's run has
    ended. The due schedules of other agents are left for a tick() on a
    worker that loads them, and said in one WARNING now and then."""
    book = Schedules(deps)
    # Each run's concurrency key is the application's code, called in tick's
    # thread: one unit of work on its databases (runner/core/appdb.py).
    new_run = functools.partial(appdb.call, book.new_run)
    floor = 2 * deps.settings.tick_seconds
    loaded = deps.registry.names()

    def planned(schedule: Schedule, at: datetime) -> FiringPlan:
        return plan(schedule, at, new_run, window_floor=floor)

    def built(schedule: Schedule, at: datetime) -> NewRun | str:
        try:
            return new_run(schedule, at)
        except InvalidInput as exc:
            return unmade(exc)

    batch = deps.settings.tick_batch
    fired = deps.store.fire_due_schedules(planned, agents=loaded, limit=batch, now=now)
    fired.add(deps.store.start_buffered(built, agents=loaded, limit=batch))
    for run_id in fired.cancel:
        deps.cancel(run_id, by="schedule (overlap: cancel_other)")
    deps.send(fired.started)
    for name, exc in fired.failed:
        log.warning(
            "schedule %s: its firing failed and is tried again in %.0f s (its scheduled time "
            "is kept; past its catch-up window it is missed): %s",
            name,
            SET_ASIDE_FOR.total_seconds(),
            exc,
            exc_info=None if isinstance(exc, RunwrightError) else exc,
        )
    _say_unloaded(deps.store.due_elsewhere(loaded, now=now))
    return fired


def _say_unloaded(due: Mapping[str, int]) -> None:
    """One WARNING for the due schedules of agents this process does not load:
    again for the same agents only every :data:`UNLOADED_SAID_EVERY_SECONDS`."""
    global _unloaded_said
    if not due:
        return
    agents, now = frozenset(due), time.monotonic()
    said = _unloaded_said
    if said is not None and said[0] == agents and now - said[1] < UNLOADED_SAID_EVERY_SECONDS:
        return
    _unloaded_said = (agents, now)
    named = sorted(due)
    listed = ", ".join(f"{agent} ({due[agent]})" for agent in named[:10])
    if len(named) > 10:
        listed += f" and {len(named) - 10} more agent(s)"
    log.warning(
        "%d due schedule(s) of agent(s) not loaded here: %s. Each is left for a tick() on a "
        "worker that loads its agent; if none does, its firings are missed past the "
        "catch-up window (runwright schedule list names them)",
        sum(due.values()),
        listed,
    )
