"""Schedules on real Postgres (docs/triggers.md): made and changed at run time,
fired by tick() exactly once per scheduled time, whatever ticks run at once,
with their overlap policy and catch-up window; bad input writes nothing.

Time is moved with ``engine.tick(now=...)``: the store then measures what is
due against that time, as it would against its own clock."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from runner import Agent, Engine
from runner.core.errors import AgentNotFound, InvalidInput
from runner.testing import ScriptedModel, text
from store.errors import ScheduleNotFound
from store.models import FiringOutcome, Overlap, RunStatus
from store.postgres import PostgresStore
from tests.helpers import snapshot


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def agent() -> str:
    name = unique("sched")
    model = ScriptedModel(name, lambda request: text("done"))
    Agent(name=name, model=model.model)
    return name


@pytest.fixture
def queued() -> list[str]:
    return []


@pytest.fixture
def engine(pg_store: PostgresStore, queued: list[str]) -> Iterator[Engine]:
    # No Redis: nothing but Postgres keeps two ticks from firing one time twice.
    made = Engine(pg_store, enqueue=queued.append)
    yield made
    made.close()


def tables(engine: Engine) -> Any:
    with engine.store.engine.connect() as conn:
        return {
            name: [tuple(r) for r in conn.execute(sa.text(f"SELECT * FROM {name} ORDER BY 1, 2"))]
            for name in ("schedules", "schedule_firings")
        }


def runs_of(engine: Engine, name: str) -> list[Any]:
    return [r for r in engine.list_runs(limit=500) if r.trigger.trigger == name]


def test_a_schedule_is_made_read_changed_paused_and_deleted(engine: Engine, agent: str) -> None:
    book = engine.schedules
    made = book.create(
        "nightly",
        agent,
        cron="30 2 * * *",
        timezone="Europe/Berlin",
        payload={"report": "daily"},
        keys={"team": "ops"},
        overlap="buffer_one",
        catchup_window=timedelta(minutes=10),
        jitter=5,
    )
    assert (made.cron, made.timezone, made.every_seconds) == ("30 2 * * *", "Europe/Berlin", None)
    assert made.overlap is Overlap.BUFFER_ONE and made.catchup_window_seconds == 600
    assert made.next_at > datetime.now(UTC) and made.next_at.minute in (0, 30)
    assert timedelta(0) <= made.next_due_at - made.next_at <= timedelta(seconds=5)
    assert book.get("nightly") == made and [s.name for s in book.list()] == ["nightly"]
    assert book.next_firings("nightly", after=datetime(2026, 3, 28, 12, tzinfo=UTC), count=2) == [
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ]
    every = book.update("nightly", every=120, payload={"report": "hourly"})
    assert (every.cron, every.every_seconds, every.payload) == (None, 120.0, {"report": "hourly"})
    assert every.next_at.timestamp() % 120 == 0
    same = book.update("nightly", overlap="skip")
    assert same.next_at == every.next_at and same.overlap is Overlap.SKIP
    paused = book.pause("nightly")
    assert paused.paused
    resumed = book.resume("nightly")
    assert not resumed.paused and resumed.next_at > datetime.now(UTC)
    book.delete("nightly")
    assert book.list() == []
    with pytest.raises(ScheduleNotFound, match="no schedule named 'nightly'"):
        book.get("nightly")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"cron": "61 * * * *"}, InvalidInput, "Bad minute"),
        ({"cron": "0 * * * *", "timezone": "Atlantis/City"}, InvalidInput, "unknown time zone"),
        ({"every": 0}, InvalidInput, "every must be from 1 s"),
        ({"cron": "0 * * * *", "every": 60}, InvalidInput, "not both"),
        ({"every": 60, "overlap": "queue"}, InvalidInput, "overlap must be one of"),
        ({"every": 60, "jitter": 60}, InvalidInput, "shorter than the interval"),
        ({"every": 60, "catchup_window": -1}, InvalidInput, "0 or more seconds"),
        ({"every": 60, "payload": {"x": float("nan")}}, InvalidInput, "not JSON"),
        ({"every": 60, "keys": {"k": 1}}, InvalidInput, "mapping of text to text"),
        ({"every": 60, "agent": "nobody"}, AgentNotFound, "no agent named 'nobody'"),
        ({"every": 60, "name": "no spaces"}, InvalidInput, "a schedule's name is"),
    ],
)
def test_a_bad_schedule_is_one_clear_error_and_writes_nothing(
    engine: Engine, agent: str, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    engine.schedules.create("kept", agent, every=60)
    before = tables(engine), snapshot(engine.store)
    name = kwargs.pop("name", "new")
    with pytest.raises(error, match=match):
        engine.schedules.create(name, kwargs.pop("agent", agent), **kwargs)
    assert (tables(engine), snapshot(engine.store)) == before


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cron": "0 0 30 2 *"}, "Bad day-of-month"),
        ({"timezone": "Nowhere/Else"}, "unknown time zone"),
        ({"every": 10**9}, "every must be from 1 s"),
        ({"agent": "nobody"}, "no agent named 'nobody'"),
        ({"payload": {"b": b"bytes"}}, "bytes"),
    ],
)
def test_a_bad_change_is_one_clear_error_and_changes_nothing(
    engine: Engine, agent: str, kwargs: dict[str, Any], match: str
) -> None:
    engine.schedules.create("kept", agent, every=60)
    before = tables(engine)
    with pytest.raises((InvalidInput, AgentNotFound), match=match):
        engine.schedules.update("kept", **kwargs)
    assert tables(engine) == before


def test_a_name_is_taken_once(engine: Engine, agent: str) -> None:
    engine.schedules.create("once", agent, every=60)
    with pytest.raises(InvalidInput, match="a schedule named 'once' exists already"):
        engine.schedules.create("once", agent, every=30)
    assert engine.schedules.get("once").every_seconds == 60


def test_tick_fires_each_scheduled_time_once_with_its_trigger(
    engine: Engine, agent: str, queued: list[str]
) -> None:
    made = engine.schedules.create(
        "minutely", agent, every=60, payload={"n": 1}, keys={"team": "ops"}, thread="t1"
    )
    at = made.next_at
    assert engine.tick(now=at - timedelta(seconds=1)).firings == 0
    report = engine.tick(now=at + timedelta(seconds=1))
    assert report.firings == 1 and len(report.fired) == 1
    assert queued == report.fired  # sent to a worker
    assert engine.tick(now=at + timedelta(seconds=2)).firings == 0  # fired already
    [run] = runs_of(engine, "minutely")
    assert report.fired == [run.id] and run.status is RunStatus.QUEUED
    trigger = run.trigger
    assert (trigger.source, trigger.trigger, trigger.payload, trigger.thread) == (
        "schedule",
        "minutely",
        {"n": 1},
        "t1",
    )
    assert trigger.id == f"schedule:minutely:{at.isoformat()}"
    assert trigger.keys == {"team": "ops", "scheduled_at": at.isoformat()}
    [firing] = engine.schedules.firings("minutely")
    assert (firing.scheduled_at, firing.outcome, firing.run_id) == (
        at,
        FiringOutcome.STARTED,
        run.id,
    )
    assert engine.schedules.get("minutely").next_at == at + timedelta(seconds=60)


def test_a_tick_sends_the_run_of_a_firing_once(
    engine: Engine, agent: str, queued: list[str]
) -> None:
    """The firing's run is sent as it starts; the tick's re-enqueue of runs
    queued too long, measured against the same ``now``, does not send it
    again (a tick days ahead of the run's start did, before the schedules
    fired last)."""
    made = engine.schedules.create("weekly", agent, every=7 * 86400)
    report = engine.tick(now=made.next_at + timedelta(seconds=1))
    assert len(report.fired) == 1 and report.reenqueued == []
    assert queued == report.fired


def test_ticks_at_once_start_each_firing_once(pg_store: PostgresStore, agent: str) -> None:
    engines = [Engine(pg_store, enqueue=None) for _ in range(4)]
    try:
        made = engines[0].schedules.create("busy", agent, every=60, overlap="allow_all")
        now = made.next_at + timedelta(seconds=170)  # three firings due, within the window
        barrier = threading.Barrier(len(engines))

        def tick(engine: Engine) -> None:
            barrier.wait()
            engine.tick(now=now)

        threads = [threading.Thread(target=tick, args=(e,)) for e in engines]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        runs = runs_of(engines[0], "busy")
        assert len(runs) == 3
        assert len({r.trigger.id for r in runs}) == 3
        firings = engines[0].schedules.firings("busy")
        assert sorted(f.scheduled_at for f in firings) == [
            made.next_at + timedelta(seconds=60 * i) for i in range(3)
        ]
        assert {f.outcome for f in firings} == {FiringOutcome.STARTED}
    finally:
        for made_engine in engines:
            made_engine.close()


def caught_up(engine: Engine, agent: str, overlap: str) -> list[Any]:
    """Three firings missed while beat was down, all within a 10 minute
    window, and one older than it; tick() comes back."""
    made = engine.schedules.create(overlap, agent, every=60, overlap=overlap, catchup_window=600)
    # 14 times are due: the 3 oldest are more than 10 minutes late.
    engine.tick(now=made.next_at + timedelta(minutes=13))
    return sorted(engine.schedules.firings(overlap, limit=100), key=lambda f: f.scheduled_at)


@pytest.mark.parametrize(
    ("overlap", "outcomes"),
    [
        ("skip", ["started"] + ["skipped"] * 10),
        ("buffer_one", ["started", "buffered"] + ["skipped"] * 9),
        ("allow_all", ["started"] * 11),
        ("cancel_other", ["started"] * 11),
    ],
)
def test_after_beat_was_down_the_overlap_policy_decides_each_caught_up_firing(
    engine: Engine, agent: str, overlap: str, outcomes: list[str]
) -> None:
    firings = caught_up(engine, agent, overlap)
    # 14 scheduled times passed: the 3 oldest are past the window, missed.
    assert [f.outcome.value for f in firings[:3]] == ["missed"] * 3
    assert all("past the catch-up window of 600 s" in (f.reason or "") for f in firings[:3])
    assert [f.outcome.value for f in firings[3:]] == outcomes
    runs = {r.id: r for r in runs_of(engine, overlap)}
    assert len(runs) == outcomes.count("started")
    if overlap == "skip":
        assert "has not ended (overlap: skip)" in (firings[4].reason or "")
    if overlap == "cancel_other":
        statuses = [runs[f.run_id].status for f in firings[3:] if f.run_id]
        assert statuses == [RunStatus.CANCELLED] * 10 + [RunStatus.QUEUED]


def test_a_buffered_firing_starts_once_the_run_before_it_settles(
    engine: Engine, agent: str, queued: list[str]
) -> None:
    made = engine.schedules.create("buffered", agent, every=60, overlap="buffer_one")
    engine.tick(now=made.next_at)
    engine.tick(now=made.next_at + timedelta(seconds=60))
    first, second = sorted(engine.schedules.firings("buffered"), key=lambda f: f.scheduled_at)
    assert (first.outcome, second.outcome) == (FiringOutcome.STARTED, FiringOutcome.BUFFERED)
    engine.tick(now=made.next_at + timedelta(seconds=61))  # the first run still runs
    assert engine.schedules.firings("buffered")[0].outcome is FiringOutcome.BUFFERED
    assert first.run_id is not None
    done = engine.execute(first.run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    report = engine.tick(now=made.next_at + timedelta(seconds=62))
    started = next(
        f for f in engine.schedules.firings("buffered") if f.scheduled_at == second.scheduled_at
    )
    assert started.outcome is FiringOutcome.STARTED and started.run_id in report.fired
    run = engine.get_run(started.run_id)  # type: ignore[arg-type]
    assert run.trigger.id == f"schedule:buffered:{second.scheduled_at.isoformat()}"


def test_a_long_running_run_makes_skip_skip_and_say_so(engine: Engine, agent: str) -> None:
    made = engine.schedules.create("skipper", agent, every=60)
    engine.tick(now=made.next_at)
    [first] = engine.schedules.firings("skipper")
    engine.tick(now=made.next_at + timedelta(seconds=60))
    skipped = engine.schedules.firings("skipper")[0]
    assert skipped.outcome is FiringOutcome.SKIPPED and skipped.run_id is None
    assert skipped.reason == f"the schedule's run {first.run_id} has not ended (overlap: skip)"


def test_a_paused_schedule_lets_its_times_pass_and_resumes_from_now(
    engine: Engine, agent: str
) -> None:
    made = engine.schedules.create("sleepy", agent, every=60, paused=True)
    assert engine.tick(now=made.next_at + timedelta(minutes=5)).firings == 0
    assert engine.schedules.firings("sleepy") == []
    resumed = engine.schedules.resume("sleepy")
    assert resumed.next_at > datetime.now(UTC) - timedelta(seconds=1)


def test_trigger_starts_a_run_now_whatever_the_overlap(
    engine: Engine, agent: str, queued: list[str]
) -> None:
    made = engine.schedules.create("manual", agent, every=3600)
    engine.tick(now=made.next_at)
    firing = engine.schedules.trigger("manual")
    assert firing.outcome is FiringOutcome.TRIGGERED and firing.run_id is not None
    assert queued[-1] == firing.run_id
    assert len(runs_of(engine, "manual")) == 2
    with pytest.raises(ScheduleNotFound):
        engine.schedules.trigger("absent")


def test_deleting_a_schedule_keeps_its_runs(engine: Engine, agent: str) -> None:
    made = engine.schedules.create("gone", agent, every=60)
    engine.tick(now=made.next_at)
    engine.schedules.delete("gone")
    assert len(runs_of(engine, "gone")) == 1
    with pytest.raises(ScheduleNotFound):
        engine.schedules.firings("gone")
    with pytest.raises(ScheduleNotFound):
        engine.schedules.delete("gone")


def test_a_tick_without_the_agent_leaves_the_firing_to_another(
    pg_store: PostgresStore, agent: str
) -> None:
    from runner.core.agent import Registry

    with_agent = Engine(pg_store, enqueue=None)
    without = Engine(pg_store, enqueue=None, registry=Registry())
    try:
        made = with_agent.schedules.create("elsewhere", agent, every=60)
        assert without.tick(now=made.next_at).firings == 0
        assert with_agent.schedules.get("elsewhere").next_at == made.next_at  # still due
        assert with_agent.tick(now=made.next_at + timedelta(seconds=5)).firings == 1
    finally:
        with_agent.close()
        without.close()


def test_a_schedule_s_runs_take_its_priority_and_its_agent_s_tenant(engine: Engine) -> None:
    name = unique("sched-tenant")
    model = ScriptedModel(name, lambda request: text("done"))
    Agent(name=name, model=model.model, tenant=lambda trigger: trigger.keys.get("org"))
    made = engine.schedules.create("urgent", name, every=60, keys={"org": "acme"}, priority=8)
    assert made.priority == 8 and engine.schedules.get("urgent").priority == 8
    report = engine.tick(now=made.next_at + timedelta(seconds=1))
    [run] = runs_of(engine, "urgent")
    assert report.fired == [run.id] and (run.priority, run.tenant) == (8, "acme")
    assert engine.schedules.update("urgent", priority=2).priority == 2
    before = tables(engine)
    with pytest.raises(InvalidInput, match="priority"):
        engine.schedules.update("urgent", priority=10)
    with pytest.raises(InvalidInput, match="priority"):
        engine.schedules.create("too-urgent", name, every=60, priority=-1)
    assert tables(engine) == before
