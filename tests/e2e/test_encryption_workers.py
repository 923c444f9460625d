"""Key rotation while real ``celery worker`` processes run (docs/security.md,
"Rotating a key"): runs written under the old key, a deploy that puts the
new key first in the ring, ``runwright keys rotate`` while the workers take
a batch of new runs; every run completes, every value ends under the new
key, and with the old key removed every run reads as it did."""

from __future__ import annotations

import json
import signal

from runner.core.keyring import new_key
from store.models import RunStatus
from tests.e2e.clirun import rw
from tests.e2e.cluster import Cluster, wait_until
from tests.marked_runs import everything

OLD, NEW = f"old:{new_key()}", f"new:{new_key()}"
RUNS_BEFORE = 6
RUNS_DURING = 24


def _status(cluster: Cluster, ring: str) -> dict[str | None, int]:
    done = rw(cluster.env(RUNWRIGHT_ENCRYPTION_KEYS=ring), "keys", "status", "--json")
    counts: dict[str | None, int] = {}
    for line in done.stdout.splitlines():
        entry = json.loads(line)
        counts[entry["key"]] = counts.get(entry["key"], 0) + entry["values"]
    return counts


def test_rotation_while_workers_run_ends_under_the_new_key_and_no_run_fails(
    cluster: Cluster,
) -> None:
    cluster.overrides.update(RUNWRIGHT_ENCRYPTION_KEYS=OLD, RUNWRIGHT_TEST_MODEL_LATENCY="0.2")
    worker = cluster.worker("w1", concurrency=4)
    engine = cluster.engine()
    before = [engine.start("fleet", {"amount": 10 + i}).id for i in range(RUNS_BEFORE)]
    wait_until(
        lambda: all(engine.get_run(r).status.ended for r in before), 90, "the first runs to end"
    )
    assert set(_status(cluster, OLD)) == {"old"}
    read_before = {run_id: everything(engine, run_id) for run_id in before}
    engine.close()

    # The deploy: the new key first, the old one still there to open old rows.
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    ring = f"{NEW},{OLD}"
    cluster.overrides.update(RUNWRIGHT_ENCRYPTION_KEYS=ring)
    cluster.worker("w2", concurrency=4)
    engine = cluster.engine()
    during = [engine.start("fleet", {"amount": 20 + i}).id for i in range(RUNS_DURING)]
    wait_until(
        lambda: any(engine.get_run(r).status is RunStatus.RUNNING for r in during),
        60,
        "a run to be running when the rotation starts",
    )
    going = sum(not engine.get_run(r).status.ended for r in during)
    assert going > 0  # the rotation races the workers, or it would prove nothing
    rotation = rw(cluster.env(), "keys", "rotate", "--batch", "5", ok=False)
    assert rotation.returncode == 0, rotation.stdout + rotation.stderr
    assert "every value is under it" in rotation.stdout
    wait_until(lambda: all(engine.get_run(r).status.ended for r in during), 120, "every run to end")
    statuses = {engine.get_run(r).status for r in [*before, *during]}
    assert statuses == {RunStatus.COMPLETED}
    assert set(_status(cluster, ring)) == {"new"}
    engine.close()

    # The old key removed: every run reads as it did.
    cluster.overrides.update(RUNWRIGHT_ENCRYPTION_KEYS=NEW)
    engine = cluster.engine()
    try:
        assert {r: everything(engine, r) for r in before} == read_before
        for run_id in during:
            assert engine.get_run(run_id).output == "done"
            assert len(engine.steps(run_id)) >= 5
    finally:
        engine.close()
