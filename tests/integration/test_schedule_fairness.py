"""One schedule's problem never delays another's firing (docs/triggers.md):
due schedules of agents this process does not load are left for a tick() on a
worker that loads them, without taking the tick's batch, and said once (a
WARNING, a gauge, the command line); a schedule whose firing cannot start
its run records why and moves on; one whose firing raises is set aside
while the others fire.

Time is moved with ``engine.tick(now=...)``, as in test_schedules.py."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from runner import Agent, Engine
from runner.core.agent import Registry
from runner.core.coordination.leases import Leases
from runner.core.errors import InvalidInput
from runner.observe import metrics as m
from runner.testing import ScriptedModel, text
from store.models import FiringOutcome, RunStatus
from store.postgres import PostgresStore
from store.workers import WorkerInfo
from tests.helpers import snapshot, unique

BATCH = 500  # RUNWRIGHT_TICK_BATCH's default, which these tests keep


def made_agent(prefix: str = "served", **options: Any) -> Agent:
    name = unique(prefix)
    model = ScriptedModel(name, lambda request: text("done"))
    return Agent(name=name, model=model.model, **options)


@pytest.fixture
def served() -> Agent:
    return made_agent()


@pytest.fixture
def queued() -> list[str]:
    return []


@pytest.fixture
def engine(pg_store: PostgresStore, served: Agent, queued: list[str]) -> Iterator[Engine]:
    """A deployment that loads ``served`` and nothing else."""
    loaded = Registry()
    loaded.add(served)
    made = Engine(pg_store, enqueue=queued.append, registry=loaded)
    assert made.settings.tick_batch == BATCH
    yield made
    made.close()


def stranded(store: PostgresStore, agent: str, count: int, due: datetime) -> list[str]:
    """``count`` schedules of ``agent`` due before ``due``, as a deployment
    that loaded ``agent`` once made them (the rows ``engine.schedules.create``
    writes, inserted at once)."""
    names = [f"{agent}-{i}" for i in range(count)]
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                """
                INSERT INTO schedules (name, agent, every_seconds, payload, keys, next_at,
                                       next_due_at)
                SELECT :agent || '-' || i, :agent, 60, '{}', '{}',
                       CAST(:due AS timestamptz) - make_interval(secs => 3600 - i),
                       CAST(:due AS timestamptz) - make_interval(secs => 3600 - i)
                  FROM generate_series(0, :count - 1) AS i
                """
            ),
            {"agent": agent, "due": due, "count": count},
        )
    return names


def schedule_rows(store: PostgresStore, agent: str) -> list[tuple[Any, ...]]:
    with store.engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.text(
                    "SELECT name, next_at, next_due_at, updated_at FROM schedules"
                    " WHERE agent = :agent ORDER BY name"
                ),
                {"agent": agent},
            )
        ]


def firing_count(store: PostgresStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM schedule_firings")).scalar_one())


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "runner.core.schedules.book" and r.levelno >= logging.WARNING
    ]


def test_due_schedules_of_an_agent_not_loaded_here_do_not_starve_a_loaded_ones(
    engine: Engine, served: Agent, queued: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    made = engine.schedules.create("pulse", served.name, every=60)
    retired = unique("retired")
    stranded(engine.store, retired, BATCH + 1, made.next_at)
    before = schedule_rows(engine.store, retired)
    caplog.set_level(logging.INFO, logger="runner.core.schedules.book")

    report = engine.tick(now=made.next_at + timedelta(seconds=1))

    [firing] = engine.schedules.firings("pulse")
    assert firing.outcome is FiringOutcome.STARTED and report.fired == [firing.run_id]
    assert queued == report.fired  # sent
    assert engine.get_run(firing.run_id).status is RunStatus.QUEUED  # type: ignore[arg-type]
    # The others are left as they were, for a tick() on a worker that loads their agent.
    assert schedule_rows(engine.store, retired) == before
    assert firing_count(engine.store) == 1
    # Said once for the lot, naming the agent and how many: not a line per schedule.
    [said] = warnings(caplog)
    assert f"{BATCH + 1} due schedule(s) of agent(s) not loaded here: {retired} ({BATCH + 1})" in (
        said
    )
    assert not [r for r in caplog.records if f"{retired}-7" in r.getMessage()]
    # Not again at the next tick: once in a while, not once per tick.
    engine.tick(now=made.next_at + timedelta(seconds=2))
    assert len(warnings(caplog)) == 1


def test_buffered_firings_of_an_agent_not_loaded_here_do_not_starve_a_loaded_ones(
    engine: Engine, served: Agent, queued: list[str]
) -> None:
    made = engine.schedules.create("held", served.name, every=60, overlap="buffer_one")
    engine.tick(now=made.next_at)
    engine.tick(now=made.next_at + timedelta(seconds=60))
    first, second = sorted(engine.schedules.firings("held"), key=lambda f: f.scheduled_at)
    assert second.outcome is FiringOutcome.BUFFERED and first.run_id is not None
    retired = unique("retired")
    names = stranded(engine.store, retired, BATCH + 1, made.next_at + timedelta(days=1))
    # Each waits for its schedule's run, which settled long ago: all are ready,
    # and all older than the loaded one's.
    with engine.store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO schedule_firings (schedule, scheduled_at, outcome, reason)"
                " SELECT name, next_at - interval '1 day', 'buffered', 'waits'"
                "   FROM schedules WHERE name = ANY(:names)"
            ),
            {"names": names},
        )
    done = engine.execute(first.run_id)
    assert done is not None and done.status is RunStatus.COMPLETED

    report = engine.tick(now=made.next_at + timedelta(seconds=61))

    started = next(
        f for f in engine.schedules.firings("held") if f.scheduled_at == second.scheduled_at
    )
    assert started.outcome is FiringOutcome.STARTED and started.run_id in report.fired
    assert started.run_id in queued


def test_a_firing_whose_run_cannot_be_made_is_recorded_and_the_others_fire(
    pg_store: PostgresStore, engine: Engine, served: Agent
) -> None:
    """A payload over the deployment's limit (lowered since the schedule was
    made), and an agent whose concurrency key now wants a field the
    schedule's payload lacks: each firing is recorded missed with why, its
    schedule moves on, and the schedule due after them fires in the same tick."""
    keyed_v1 = made_agent("keyed")
    keyed_v2 = Agent(  # the same agent, as the next deploy defines it
        name=keyed_v1.name,
        model=keyed_v1.model,
        concurrency_key=lambda trigger: trigger.payload["tenant"],
        register=False,
    )
    earlier = Registry()
    for agent in (served, keyed_v1):
        earlier.add(agent)
    before = Engine(pg_store, enqueue=None, registry=earlier)
    try:
        heavy = before.schedules.create("heavy", served.name, every=60, payload={"x": "a" * 2000})
        keyed = before.schedules.create("keyed", keyed_v1.name, every=60)
    finally:
        before.close()
    made = engine.schedules.create("pulse", served.name, every=60)
    assert heavy.next_at == keyed.next_at == made.next_at
    with pg_store.engine.begin() as conn:  # the two come first
        conn.execute(
            sa.text(
                "UPDATE schedules SET next_due_at = next_due_at - interval '1 second'"
                " WHERE name IN ('heavy', 'keyed')"
            )
        )
    upgraded = Registry()
    for agent in (served, keyed_v2):
        upgraded.add(agent)
    lowered = PostgresStore(pg_store.engine, max_payload_bytes=1000)
    after = Engine(lowered, enqueue=None, registry=upgraded)
    try:
        report = after.tick(now=made.next_at + timedelta(seconds=1))
        [pulse] = after.schedules.firings("pulse")
        assert pulse.outcome is FiringOutcome.STARTED and report.fired == [pulse.run_id]
        [too_big] = after.schedules.firings("heavy")
        assert too_big.outcome is FiringOutcome.MISSED and too_big.run_id is None
        assert "its run could not be made" in (too_big.reason or "")
        assert "the limit is 1000" in (too_big.reason or "")
        [no_key] = after.schedules.firings("keyed")
        assert no_key.outcome is FiringOutcome.MISSED and "'tenant'" in (no_key.reason or "")
        for name in ("heavy", "keyed"):
            assert after.schedules.get(name).next_at == made.next_at + timedelta(seconds=60)
        assert report.failed_jobs == []
    finally:
        after.close()


def test_a_schedule_whose_firing_raises_is_set_aside_and_the_others_fire(
    engine: Engine, served: Agent, queued: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A stored expression this version cannot read: its firing raises before
    anything is written. It is set aside for a while (its scheduled time
    kept), said with a WARNING, and the tick fires the schedule due after it."""
    made = engine.schedules.create("pulse", served.name, every=60)
    broken = engine.schedules.create("broken", served.name, cron="* * * * *")
    with engine.store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE schedules SET cron = '0 0 31 2 *', next_at = :at, next_due_at = :at"
                " WHERE name = 'broken'"
            ),
            {"at": made.next_at - timedelta(minutes=1)},
        )
    assert broken.name == "broken"
    caplog.set_level(logging.INFO, logger="runner.core.schedules.book")
    now = made.next_at + timedelta(seconds=1)

    report = engine.tick(now=now)

    [pulse] = engine.schedules.firings("pulse")
    assert pulse.outcome is FiringOutcome.STARTED and queued == report.fired == [pulse.run_id]
    assert report.failed_jobs == []
    assert engine.schedules.firings("broken") == []
    aside = engine.schedules.get("broken")
    assert aside.next_at == made.next_at - timedelta(minutes=1)  # its time is kept
    assert aside.next_due_at > now  # looked at again later, not at every tick
    [said] = [w for w in warnings(caplog) if "broken" in w]
    assert "Bad day-of-month" in said
    assert engine.tick(now=now + timedelta(seconds=5)).failed_jobs == []
    assert [w for w in warnings(caplog) if "broken" in w] == [said]


def test_a_cron_jitter_not_shorter_than_its_gap_is_refused_and_writes_nothing(
    engine: Engine, served: Agent
) -> None:
    engine.schedules.create("kept", served.name, cron="*/15 * * * *", jitter=60)
    before = schedule_rows(engine.store, served.name), snapshot(engine.store)
    with pytest.raises(InvalidInput, match="jitter must be shorter than the shortest gap"):
        engine.schedules.create("minutely", served.name, cron="* * * * *", jitter=60)
    with pytest.raises(InvalidInput, match="jitter must be shorter than the shortest gap"):
        engine.schedules.update("kept", jitter=900)
    with pytest.raises(InvalidInput, match="Wrong number of fields: 6"):
        engine.schedules.create("seconds", served.name, cron="*/10 * * * * *")
    assert (schedule_rows(engine.store, served.name), snapshot(engine.store)) == before


def test_the_gauge_counts_the_schedules_no_live_worker_serves(
    pg_store: PostgresStore, engine: Engine, served: Agent, leases: Leases
) -> None:
    engine.schedules.create("pulse", served.name, every=60)
    retired = unique("retired")
    stranded(engine.store, retired, 3, engine.schedules.get("pulse").next_at)
    engine.schedules.create("quiet", served.name, every=60, paused=True)
    leases.mark_worker(
        WorkerInfo(f"w-{uuid.uuid4().hex[:6]}", seen_at=time.time(), agents=(served.name,)), 60
    )
    registry = CollectorRegistry()
    registry.register(
        m.UnservedSchedulesCollector(pg_store.schedules_by_agent, leases.workers, cache_seconds=0)
    )

    def gauge(agent: str) -> float | None:
        return registry.get_sample_value("runwright_schedules_unserved", {"agent": agent})

    assert gauge(retired) == 3
    assert gauge(served.name) is None  # served: not counted
    # Once a worker loads it, the gauge drops it.
    leases.mark_worker(WorkerInfo("late", seen_at=time.time(), agents=(served.name, retired)), 60)
    assert gauge(retired) is None
