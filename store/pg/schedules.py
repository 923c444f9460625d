"""Schedules (runner/core/schedules/): stored, managed at run time, and fired by
``tick()`` exactly once per scheduled time.

A firing is one transaction: the schedule's row is locked (``FOR UPDATE SKIP
LOCKED``, so two ticks never fire one schedule at once), its due firings are
recorded (the key is the schedule and the scheduled time), their runs created
(a run's trigger id is derived from the same two, unique per agent), and the
schedule moved on to its next time. Whatever interleaving of ticks, beats and
crashes, a scheduled time starts at most one run. When to fire and what each
run's trigger is are the caller's to compute (the cron library is the
runner's); what an overlapping firing does is ``store.rules.overlap_action``.

One schedule's problem never delays another's firing: a tick takes the due
schedules of the agents its process loads only (those of other agents wait
for a tick that loads them, and take no room in its batch), and a schedule
whose firing raises is rolled back and set aside for a while, its scheduled
time kept, while the tick goes on to the next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from store.db import Tx, dumps
from store.errors import InvalidInput, ScheduleNotFound, StoreUnavailable
from store.models import Firing, FiringOutcome, NewRun, Schedule
from store.pg.base import PgBase
from store.pg.runs import insert_run
from store.rows import firing_from_row, schedule_from_row
from store.rules import OverlapAction, overlap_action
from store.sealing import Sealing
from store.statements import Statement
from store.validate import check_new_run

CREATE_SCHEDULE = Statement(
    "create_schedule",
    """
    INSERT INTO schedules (name, agent, cron, timezone, every_seconds, payload, thread, keys,
                           overlap, catchup_window_seconds, jitter_seconds, paused, next_at,
                           next_due_at, priority)
    VALUES (CAST(:name AS text), CAST(:agent AS text), CAST(:cron AS text),
            CAST(:timezone AS text), CAST(:every_seconds AS float8), CAST(:payload AS json),
            CAST(:thread AS text), CAST(:keys AS json), CAST(:overlap AS text),
            CAST(:catchup_window_seconds AS float8), CAST(:jitter_seconds AS float8),
            CAST(:paused AS bool), CAST(:next_at AS timestamptz),
            CAST(:next_due_at AS timestamptz), CAST(:priority AS smallint))
    ON CONFLICT (name) DO NOTHING
    RETURNING *
    """,
)

# Everything but the name and the creation time, as the caller recomputed it.
REPLACE_SCHEDULE = Statement(
    "replace_schedule",
    """
    UPDATE schedules
       SET (name, agent, cron, timezone, every_seconds, payload, thread, keys, overlap,
            catchup_window_seconds, jitter_seconds, paused, next_at, next_due_at, priority,
            updated_at)
         = (CAST(:name AS text), CAST(:agent AS text), CAST(:cron AS text),
            CAST(:timezone AS text), CAST(:every_seconds AS float8), CAST(:payload AS json),
            CAST(:thread AS text), CAST(:keys AS json), CAST(:overlap AS text),
            CAST(:catchup_window_seconds AS float8), CAST(:jitter_seconds AS float8),
            CAST(:paused AS bool), CAST(:next_at AS timestamptz),
            CAST(:next_due_at AS timestamptz), CAST(:priority AS smallint), now())
     WHERE name = CAST(:name AS text)
    RETURNING *
    """,
)

SCHEDULE = Statement("schedule", "SELECT * FROM schedules WHERE name = CAST(:name AS text)")

# The transaction's clock (or the caller's ``now``): one time for what a firing writes.
CLOCK = Statement("schedule_clock", "SELECT COALESCE(CAST(:now AS timestamptz), now()) AS now")

LOCK_SCHEDULE = Statement(
    "lock_schedule", "SELECT * FROM schedules WHERE name = CAST(:name AS text) FOR UPDATE"
)

SCHEDULES = Statement("schedules", "SELECT * FROM schedules ORDER BY name")

DELETE_SCHEDULE = Statement(
    "delete_schedule", "DELETE FROM schedules WHERE name = CAST(:name AS text) RETURNING name"
)

FIRINGS = Statement(
    "firings",
    """
    SELECT * FROM schedule_firings WHERE schedule = CAST(:name AS text)
     ORDER BY scheduled_at DESC LIMIT CAST(:limit AS int)
    """,
)

# The next schedule that is due, of an agent the caller loads (NULL: any),
# locked for this transaction; one another tick holds is skipped, as are those
# this tick already looked at.
NEXT_DUE = Statement(
    "next_due_schedule",
    """
    SELECT * FROM schedules
     WHERE NOT paused AND next_due_at <= COALESCE(CAST(:now AS timestamptz), now())
       AND name <> ALL(CAST(:seen AS text[]))
       AND (CAST(:agents AS text[]) IS NULL OR agent = ANY(CAST(:agents AS text[])))
     ORDER BY next_due_at LIMIT 1
       FOR UPDATE SKIP LOCKED
    """,
)

# The due schedules of the agents the caller does not load, by agent.
DUE_ELSEWHERE = Statement(
    "schedules_due_elsewhere",
    """
    SELECT agent, count(*) AS due FROM schedules
     WHERE NOT paused AND next_due_at <= COALESCE(CAST(:now AS timestamptz), now())
       AND agent <> ALL(CAST(:agents AS text[]))
     GROUP BY agent ORDER BY agent
    """,
)

# The schedules that are not paused, by agent.
BY_AGENT = Statement(
    "schedules_by_agent",
    "SELECT agent, count(*) AS schedules FROM schedules WHERE NOT paused GROUP BY agent",
)

# A schedule whose firing raised, looked at again later (unless a tick or a
# change moved it meanwhile); its scheduled time stays.
SET_ASIDE = Statement(
    "schedule_set_aside",
    """
    UPDATE schedules SET next_due_at = COALESCE(CAST(:now AS timestamptz), now())
        + make_interval(secs => CAST(:seconds AS float8))
     WHERE name = CAST(:name AS text) AND next_at = CAST(:next_at AS timestamptz)
       AND next_due_at = CAST(:next_due_at AS timestamptz)
    """,
)

# The runs of a schedule's firings that have not ended, oldest first.
OPEN_RUNS = Statement(
    "schedule_open_runs",
    """
    SELECT r.id FROM schedule_firings AS f JOIN runs AS r ON r.id = f.run_id
     WHERE f.schedule = CAST(:name AS text) AND NOT r.status IN ('completed', 'failed', 'cancelled')
     ORDER BY f.scheduled_at
    """,
)

BUFFERED = Statement(
    "schedule_buffered",
    """
    SELECT scheduled_at FROM schedule_firings
     WHERE schedule = CAST(:name AS text) AND outcome = 'buffered'
    """,
)

RECORD_FIRING = Statement(
    "record_firing",
    """
    INSERT INTO schedule_firings (schedule, scheduled_at, outcome, run_id, reason, fired_at)
    VALUES (CAST(:name AS text), CAST(:scheduled_at AS timestamptz), CAST(:outcome AS text),
            CAST(:run_id AS uuid), CAST(:reason AS text), now())
    ON CONFLICT DO NOTHING
    RETURNING *
    """,
)

MOVE_ON = Statement(
    "schedule_move_on",
    """
    UPDATE schedules SET next_at = CAST(:next_at AS timestamptz),
                         next_due_at = CAST(:next_due_at AS timestamptz), updated_at = now()
     WHERE name = CAST(:name AS text)
    """,
)

# A buffered firing of an agent the caller loads (NULL: any) whose schedule
# has no open run any more: the next to start (locked, so two ticks start it
# once).
READY_BUFFERED = Statement(
    "ready_buffered_firing",
    """
    SELECT f.* FROM schedule_firings AS f JOIN schedules AS s ON s.name = f.schedule
     WHERE f.outcome = 'buffered'
       AND (CAST(:agents AS text[]) IS NULL OR s.agent = ANY(CAST(:agents AS text[])))
       AND NOT EXISTS (
           SELECT 1 FROM schedule_firings AS o JOIN runs AS r ON r.id = o.run_id
            WHERE o.schedule = f.schedule AND NOT r.status IN ('completed', 'failed', 'cancelled'))
       AND f.schedule <> ALL(CAST(:seen AS text[]))
     ORDER BY f.scheduled_at LIMIT 1
       FOR UPDATE OF f SKIP LOCKED
    """,
)

START_BUFFERED = Statement(
    "start_buffered_firing",
    """
    UPDATE schedule_firings SET outcome = 'started',
           run_id = CAST(:run_id AS uuid), fired_at = now(), reason = NULL
     WHERE schedule = CAST(:name AS text) AND scheduled_at = CAST(:scheduled_at AS timestamptz)
    RETURNING *
    """,
)

# A buffered firing whose run cannot be made: recorded missed, with why.
MISS_BUFFERED = Statement(
    "miss_buffered_firing",
    """
    UPDATE schedule_firings SET outcome = 'missed',
           reason = CAST(:reason AS text), fired_at = now()
     WHERE schedule = CAST(:name AS text) AND scheduled_at = CAST(:scheduled_at AS timestamptz)
    RETURNING *
    """,
)


# How long a schedule whose firing raised is set aside: it takes a place in a
# tick's batch once a minute, not at every tick, and a passing fault costs its
# firing less than the default catch-up window.
SET_ASIDE_FOR = timedelta(seconds=60)


@dataclass(frozen=True)
class DueFiring:
    """A scheduled time the caller found due: the run it starts, or None when
    it is older than the catch-up window (recorded missed, with ``reason``)."""

    scheduled_at: datetime
    run: NewRun | None
    reason: str | None = None


@dataclass(frozen=True)
class FiringPlan:
    """A due schedule's firings, oldest first, and where it moves on to."""

    firings: Sequence[DueFiring]
    next_at: datetime
    next_due_at: datetime


@dataclass
class Fired:
    """What one round of firing recorded: the firings, the runs it created
    (to be sent), the earlier runs ``cancel_other`` asks to cancel, and the
    schedules whose firing raised (rolled back and set aside), with what."""

    firings: list[Firing] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    cancel: list[str] = field(default_factory=list)
    failed: list[tuple[str, Exception]] = field(default_factory=list)

    def add(self, other: Fired) -> None:
        self.firings += other.firings
        self.started += other.started
        self.cancel += [r for r in other.cancel if r not in self.cancel]
        self.failed += other.failed


# Given a due schedule and the time, its firings (None: not now, leave it due).
Plan = Callable[[Schedule, datetime], "FiringPlan | None"]
# A firing's run, built when it starts: text says why it cannot be made (the
# firing is recorded missed with it); None: not here, leave it for another tick.
Build = Callable[[Schedule, datetime], "NewRun | str | None"]


def _params(schedule: Schedule, sealing: Sealing) -> dict[str, Any]:
    return {
        "name": schedule.name,
        "agent": schedule.agent,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "every_seconds": schedule.every_seconds,
        "payload": dumps(sealing.seal(schedule.payload, "schedules", "payload", schedule.name)),
        "thread": schedule.thread,
        "keys": dumps(schedule.keys),
        "overlap": schedule.overlap.value,
        "catchup_window_seconds": schedule.catchup_window_seconds,
        "jitter_seconds": schedule.jitter_seconds,
        "paused": schedule.paused,
        "next_at": schedule.next_at,
        "next_due_at": schedule.next_due_at,
        "priority": schedule.priority,
    }


class PgSchedules(PgBase):
    def create_schedule(self, schedule: Schedule) -> Schedule:
        """Store a new schedule; :class:`InvalidInput` if the name is taken."""
        row = self.db.first(CREATE_SCHEDULE, _params(schedule, self.sealing))
        if row is None:
            raise InvalidInput(f"a schedule named {schedule.name!r} exists already")
        return schedule_from_row(row, sealing=self.sealing)

    def get_schedule(self, name: str) -> Schedule:
        row = self.db.first(SCHEDULE, {"name": name})
        if row is None:
            raise ScheduleNotFound(f"no schedule named {name!r}")
        return schedule_from_row(row, sealing=self.sealing)

    def list_schedules(self) -> list[Schedule]:
        return [schedule_from_row(row, sealing=self.sealing) for row in self.db.rows(SCHEDULES, {})]

    def change_schedule(self, name: str, change: Callable[[Schedule], Schedule]) -> Schedule:
        """Replace the schedule with ``change(current)`` (the caller recomputes
        its next time), the row locked meanwhile so that a tick firing it
        waits; the name stays."""
        with self.db.tx() as tx:
            row = tx.first(LOCK_SCHEDULE, {"name": name})
            if row is None:
                raise ScheduleNotFound(f"no schedule named {name!r}")
            changed = change(schedule_from_row(row, sealing=self.sealing))
            if changed.name != name:
                raise InvalidInput("a schedule's name cannot change; create another")
            updated = tx.first(REPLACE_SCHEDULE, _params(changed, self.sealing))
            assert updated is not None  # locked above
            return schedule_from_row(updated, sealing=self.sealing)

    def delete_schedule(self, name: str) -> None:
        """Delete the schedule and its firings' records (their runs stay)."""
        if self.db.first(DELETE_SCHEDULE, {"name": name}) is None:
            raise ScheduleNotFound(f"no schedule named {name!r}")

    def firings(self, name: str, limit: int = 50) -> list[Firing]:
        """The schedule's firings, newest first."""
        self.get_schedule(name)  # ScheduleNotFound
        rows = self.db.rows(FIRINGS, {"name": name, "limit": limit})
        return [firing_from_row(row) for row in rows]

    def fire_due_schedules(
        self,
        plan: Plan,
        *,
        limit: int,
        agents: Sequence[str] | None = None,
        set_aside: timedelta = SET_ASIDE_FOR,
        now: datetime | None = None,
    ) -> Fired:
        """Fire up to ``limit`` due schedules of ``agents`` (None: of every
        agent), one transaction each. One whose firing raises is rolled back
        and looked at again ``set_aside`` later (its scheduled time kept),
        and listed in ``failed``."""
        fired = Fired()
        seen: list[str] = []
        while len(seen) < limit:
            schedule: Schedule | None = None
            mine = Fired()  # this schedule's, kept only once its transaction commits
            try:
                with self.db.tx() as tx:
                    row = tx.first(NEXT_DUE, {"seen": seen, "agents": _names(agents), "now": now})
                    if row is None:
                        break
                    schedule = schedule_from_row(row, sealing=self.sealing)
                    seen.append(schedule.name)
                    chosen = plan(schedule, _clock(tx, now))
                    if chosen is None:
                        continue  # not now: another tick fires it
                    for due in chosen.firings:
                        self._fire(tx, schedule, due, mine)
                    tx.execute(
                        MOVE_ON,
                        {
                            "name": schedule.name,
                            "next_at": chosen.next_at,
                            "next_due_at": chosen.next_due_at,
                        },
                    )
            except StoreUnavailable:
                raise  # every schedule's problem: the tick's job fails, and the next tries
            except Exception as exc:
                if schedule is None:
                    raise  # the query for the next one failed, not a schedule
                fired.failed.append((schedule.name, exc))
                self.db.execute(
                    SET_ASIDE,
                    {
                        "name": schedule.name,
                        "next_at": schedule.next_at,
                        "next_due_at": schedule.next_due_at,
                        "seconds": set_aside.total_seconds(),
                        "now": now,
                    },
                )
                continue
            fired.add(mine)
        for run_id in fired.started:
            self._committed(run_id)
        return fired

    def due_elsewhere(self, agents: Sequence[str], now: datetime | None = None) -> dict[str, int]:
        """How many due schedules each agent not in ``agents`` has."""
        rows = self.db.rows(DUE_ELSEWHERE, {"agents": list(agents), "now": now})
        return {row["agent"]: int(row["due"]) for row in rows}

    def schedules_by_agent(self) -> dict[str, int]:
        """How many schedules that are not paused each agent has."""
        return {row["agent"]: int(row["schedules"]) for row in self.db.rows(BY_AGENT, {})}

    def _fire(self, tx: Tx, schedule: Schedule, due: DueFiring, fired: Fired) -> None:
        if due.run is None:
            self._record(
                tx, schedule, due.scheduled_at, FiringOutcome.MISSED, None, due.reason, fired
            )
            return
        open_runs = [str(r["id"]) for r in tx.rows(OPEN_RUNS, {"name": schedule.name})]
        buffered = tx.first(BUFFERED, {"name": schedule.name}) is not None
        action = overlap_action(schedule.overlap, bool(open_runs), buffered)
        if action is OverlapAction.SKIP:
            why = (
                "a firing already waits for the schedule's run to end"
                if buffered
                else f"the schedule's run {open_runs[0]} has not ended (overlap: skip)"
            )
            self._record(tx, schedule, due.scheduled_at, FiringOutcome.SKIPPED, None, why, fired)
            return
        if action is OverlapAction.BUFFER:
            why = f"waits for the schedule's run {open_runs[0]} to end (overlap: buffer_one)"
            self._record(tx, schedule, due.scheduled_at, FiringOutcome.BUFFERED, None, why, fired)
            return
        if action is OverlapAction.CANCEL_AND_START:
            fired.cancel += [r for r in open_runs if r not in fired.cancel]
        self._start(tx, schedule, due.scheduled_at, due.run, FiringOutcome.STARTED, fired)

    def _start(
        self,
        tx: Tx,
        schedule: Schedule,
        scheduled_at: datetime,
        new: NewRun,
        outcome: FiringOutcome,
        fired: Fired,
    ) -> None:
        """The firing's run (created, or the one its trigger id already
        names), recorded with it."""
        check_new_run(new, self.max_payload_bytes)
        run, created = insert_run(tx, new, self.sealing)
        if self._record(tx, schedule, scheduled_at, outcome, run.id, None, fired) and created:
            fired.started.append(run.id)

    @staticmethod
    def _record(
        tx: Tx,
        schedule: Schedule,
        scheduled_at: datetime,
        outcome: FiringOutcome,
        run_id: str | None,
        reason: str | None,
        fired: Fired,
    ) -> bool:
        row = tx.first(
            RECORD_FIRING,
            {
                "name": schedule.name,
                "scheduled_at": scheduled_at,
                "outcome": outcome.value,
                "run_id": run_id,
                "reason": reason,
            },
        )
        if row is None:
            return False  # recorded already: this scheduled time fired
        fired.firings.append(firing_from_row(row))
        return True

    def start_buffered(
        self, build: Build, *, limit: int, agents: Sequence[str] | None = None
    ) -> Fired:
        """Start the buffered firings of ``agents`` (None: of every agent)
        whose schedule's run has ended, one per schedule and transaction.
        One whose run cannot be made is recorded missed; one whose start
        raises is rolled back, listed in ``failed``, and tried again by a
        later tick."""
        fired = Fired()
        seen: list[str] = []
        while len(seen) < limit:
            name: str | None = None
            mine = Fired()
            try:
                with self.db.tx() as tx:
                    row = tx.first(READY_BUFFERED, {"seen": seen, "agents": _names(agents)})
                    if row is None:
                        break
                    name, scheduled_at = row["schedule"], row["scheduled_at"]
                    seen.append(name)
                    schedule = schedule_from_row(
                        _one(tx.first(LOCK_SCHEDULE, {"name": name})), sealing=self.sealing
                    )
                    new = build(schedule, scheduled_at)
                    if new is None:
                        continue
                    at = {"name": name, "scheduled_at": scheduled_at}
                    if isinstance(new, str):
                        missed = tx.first(MISS_BUFFERED, {**at, "reason": new})
                        mine.firings.append(firing_from_row(_one(missed)))
                    else:
                        check_new_run(new, self.max_payload_bytes)
                        run, created = insert_run(tx, new, self.sealing)
                        started = tx.first(START_BUFFERED, {**at, "run_id": run.id})
                        mine.firings.append(firing_from_row(_one(started)))
                        if created:
                            mine.started.append(run.id)
            except StoreUnavailable:
                raise
            except Exception as exc:
                if name is None:
                    raise
                fired.failed.append((name, exc))
                continue
            fired.add(mine)
        for run_id in fired.started:
            self._committed(run_id)
        return fired

    def trigger_schedule(self, name: str, build: Build) -> Firing:
        """Start the schedule's run now, outside its times and whatever its
        overlap (a person asked for it), recorded as ``triggered``."""
        fired = Fired()
        with self.db.tx() as tx:
            row = tx.first(LOCK_SCHEDULE, {"name": name})
            if row is None:
                raise ScheduleNotFound(f"no schedule named {name!r}")
            schedule = schedule_from_row(row, sealing=self.sealing)
            at = _clock(tx, None)
            new = build(schedule, at)
            if new is None:
                raise InvalidInput(f"schedule {name!r} cannot start its agent here")
            if isinstance(new, str):
                raise InvalidInput(f"schedule {name!r}: {new}")
            self._start(tx, schedule, at, new, FiringOutcome.TRIGGERED, fired)
        for run_id in fired.started:
            self._committed(run_id)
        [firing] = fired.firings
        return firing


def _names(agents: Sequence[str] | None) -> list[str] | None:
    return None if agents is None else list(agents)


def _clock(tx: Tx, now: datetime | None) -> datetime:
    at = _one(tx.first(CLOCK, {"now": now}))["now"]
    assert isinstance(at, datetime)
    return at


def _one(row: dict[str, Any] | None) -> dict[str, Any]:
    assert row is not None  # locked or written earlier in this transaction
    return row
