"""The beat watchdog in a real worker (issue 13): with no celery beat, the
worker's log says so within about three tick intervals, once; it notes when
ticks come back, and warns again when they stop again."""

from __future__ import annotations

import re
import time

from runner.core.coordination.leases import Leases
from tests.e2e.cluster import Cluster, wait_until
from tests.e2e.test_redis_restart import broker_server

NEVER = "tick() has never run"
OVERDUE = "tick() last ran"
BACK = "tick() runs again"


def test_a_worker_without_beat_warns_once_then_notes_beat_coming_and_going(
    cluster: Cluster,
) -> None:
    # RUNWRIGHT_TICK_SECONDS is 1 in the cluster: overdue after 3 s without a tick.
    worker = cluster.worker("lonely")
    # The watchdog runs from the worker's start: it warns with no task ever sent.
    worker.wait_for(NEVER, timeout=60)
    line = next(li for li in worker.log().splitlines() if NEVER in li)
    assert "WARNING" in line and "Is celery beat running?" in line
    assert "runs whose worker died are not taken over" in line

    leases = Leases.from_url(cluster.redis_url)
    try:
        seen = wait_until(leases.workers, 10, "the worker's beacon")
        assert [name.split("@")[0] for name in seen] == ["lonely"]

        beat = cluster.beat()
        worker.wait_for(BACK, timeout=30)
        assert worker.log().count(NEVER) == 1  # one warning for the whole stretch
        assert leases.last_tick() is not None

        beat.stop()
        worker.wait_for(OVERDUE, timeout=30)
        log = worker.log()
        assert log.count(NEVER) == 1 and log.count(OVERDUE) == 1 and log.count(BACK) == 1
    finally:
        leases.redis.close()


def test_after_a_redis_restart_a_worker_says_when_tick_last_ran_not_never(
    cluster: Cluster,
) -> None:
    """Issue 32: Redis keeps its mark of the last tick only in memory, so a
    restart loses it. A worker then reads the mark tick() keeps in Postgres
    and warns that tick() last ran so long ago, never that it has never run;
    on a fresh set-up, where tick() truly never ran, it still says so."""
    # Ticks every 2 s: overdue after 6 s, room to stop beat and kill Redis first.
    cluster.overrides["RUNWRIGHT_TICK_SECONDS"] = "2"
    worker = cluster.worker("restarted")
    worker.wait_for(NEVER, timeout=30)  # the fresh set-up: true, and said
    began = time.time()
    beat = cluster.beat()
    worker.wait_for(BACK, timeout=30)

    beat.stop()
    server = broker_server(cluster)
    server.kill()  # with it goes Redis's mark of the last tick
    assert OVERDUE not in worker.log()  # the stretch without ticks begins only now
    restarted_at = len(worker.log())
    time.sleep(1.0)
    server.start()
    worker.wait_for("Redis is reachable again", timeout=30)
    leases = Leases.from_url(cluster.redis_url)
    try:
        assert leases.last_tick() is None  # Redis lost the mark
    finally:
        leases.redis.close()

    worker.wait_for(OVERDUE, timeout=30)
    after = worker.log()[restarted_at:]
    assert NEVER not in after and worker.log().count(NEVER) == 1
    line = next(li for li in after.splitlines() if OVERDUE in li)
    assert "WARNING" in line and "Is celery beat running?" in line
    # The age is that of a tick beat sent, not the worker's uptime.
    age = re.search(r"tick\(\) last ran ([\d.]+) s ago", line)
    assert age is not None, line
    assert float(age.group(1)) < time.time() - began
