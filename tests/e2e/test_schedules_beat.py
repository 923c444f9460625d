"""Schedules on real ``celery beat`` and workers (issue 30's acceptance): an
every-2-seconds schedule fires about five times in ten seconds; two beats at
once still start each firing once; beat stopped over three firings catches
them up under the schedule's overlap policy on restart; and ``skip`` skips
while a long run goes on, saying so. Real Postgres, Redis, beat and workers;
the agents are tests/agents_triggers.py."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

import tests.agents_triggers  # noqa: F401  (this process makes the schedules)
from store.models import FiringOutcome, RunStatus
from tests.e2e.cluster import Cluster, wait_until

AGENTS = "tests.agents,tests.agents_triggers"


def started_runs(cluster: Cluster, schedule: str) -> list[Any]:
    return [r for r in cluster.engine().list_runs(limit=500) if r.trigger.trigger == schedule]


@pytest.mark.timeout(180)
def test_an_every_two_seconds_schedule_fires_about_five_times_in_ten_seconds_under_two_beats(
    cluster: Cluster,
) -> None:
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=4)
    engine = cluster.engine()
    cluster.beat("beat-a")
    cluster.beat("beat-b")  # a second beat, on another "host"
    made = engine.schedules.create("pulse", "triggered_quick", every=2, overlap="allow_all")
    began = made.next_at
    time.sleep(10 + (began.timestamp() - time.time()))
    engine.schedules.pause("pulse")  # what is read below then stays as it is
    start, end = began.timestamp(), began.timestamp() + 10
    window = [
        f
        for f in engine.schedules.firings("pulse", limit=100)
        if start <= f.scheduled_at.timestamp() < end
    ]
    assert 4 <= len(window) <= 6, window
    # Each scheduled time once, each with a run of its own, completed.
    firings = engine.schedules.firings("pulse", limit=100)
    assert len({f.scheduled_at for f in firings}) == len(firings)
    assert all(f.outcome is FiringOutcome.STARTED for f in firings)
    runs = started_runs(cluster, "pulse")
    assert Counter(r.trigger.id for r in runs).most_common(1)[0][1] == 1
    assert {f.run_id for f in firings} == {r.id for r in runs}
    wait_until(
        lambda: all(
            engine.get_run(f.run_id).status is RunStatus.COMPLETED for f in firings if f.run_id
        ),
        30,
        "the pulses' runs to complete",
    )


@pytest.mark.timeout(180)
def test_beat_down_over_three_firings_catches_up_under_the_overlap_policy(
    cluster: Cluster,
) -> None:
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=4)
    engine = cluster.engine()
    made = engine.schedules.create("catchup", "triggered_quick", every=2, catchup_window=60)
    # No beat yet: three scheduled times pass with nobody to fire them.
    missed = [made.next_at.timestamp() + 2 * i for i in range(3)]
    time.sleep(max(0.0, missed[-1] - time.time()) + 0.5)
    assert engine.schedules.firings("catchup") == []
    cluster.beat()
    firings = wait_until(
        lambda: len(found := engine.schedules.firings("catchup", limit=100)) >= 3 and found,
        30,
        "beat to catch the three firings up",
    )
    first_three = sorted(firings, key=lambda f: f.scheduled_at)[:3]
    assert [f.scheduled_at.timestamp() for f in first_three] == missed
    # overlap "skip": caught up in one tick, the first starts and the two
    # behind it find its run not settled yet.
    assert [f.outcome for f in first_three] == [
        FiringOutcome.STARTED,
        FiringOutcome.SKIPPED,
        FiringOutcome.SKIPPED,
    ]
    assert all("has not ended (overlap: skip)" in (f.reason or "") for f in first_three[1:])


@pytest.mark.timeout(180)
def test_skip_with_a_long_running_run_skips_and_records_why(cluster: Cluster) -> None:
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=4)
    cluster.beat()
    engine = cluster.engine()
    engine.schedules.create("slowpoke", "triggered_slow", every=2)
    firings = wait_until(
        lambda: len(found := engine.schedules.firings("slowpoke", limit=100)) >= 3 and found,
        40,
        "three firings",
    )
    ordered = sorted(firings, key=lambda f: f.scheduled_at)
    first, later = ordered[0], ordered[1:3]
    assert first.outcome is FiringOutcome.STARTED
    assert [f.outcome for f in later] == [FiringOutcome.SKIPPED] * 2
    assert all(f"run {first.run_id} has not ended" in (f.reason or "") for f in later)
    assert engine.get_run(first.run_id).status is RunStatus.RUNNING  # type: ignore[arg-type]
