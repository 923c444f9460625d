"""A real Flower against a real worker: it sees runwright.execute, with basic auth,
and the task's arguments carry the run id and nothing secret. A failed run's
task is FAILURE and is not delivered again; ticks do not show up at all."""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

import tests.agents_failing  # noqa: F401  (the failing agent, known here too)
from runner import Engine
from store.models import RunStatus
from tests.agents import read_effect_log
from tests.e2e.cluster import Cluster, wait_until
from tests.e2e.flower import Flower, running_flower


def broker_holds(cluster: Cluster) -> int:
    """Messages in the broker's queues, plus those delivered but not acked."""
    client = redis.Redis.from_url(cluster.broker_url)
    try:
        queued = sum(client.llen(k) for k in client.scan_iter() if client.type(k) == b"list")
        return int(queued) + int(client.hlen("unacked"))
    finally:
        client.close()


def effects_of(cluster: Cluster, run_id: str) -> list[dict[str, Any]]:
    log = read_effect_log(str(cluster.workdir / "effects.jsonl"))
    return [e for e in log if e.get("run_id") == run_id]


@pytest.fixture
def flower(cluster: Cluster) -> Iterator[Flower]:
    with running_flower(cluster) as running:
        yield running


def test_flower_sees_execute_with_the_run_id_only(cluster: Cluster, flower: Flower) -> None:
    cluster.worker("w1")
    engine = cluster.engine()
    flower.follow(engine)  # it has asked the worker for task events
    run = engine.start("fleet", {"amount": 5})
    wait_until(
        lambda: engine.get_run(run.id).status is RunStatus.COMPLETED, 60, "the run to complete"
    )

    def execute_task() -> dict[str, Any] | None:
        # This run's execution: follow()'s probe runs have executions too, and
        # Flower may list one of theirs before this one's success reaches it.
        for task in flower.tasks("?taskname=runwright.execute").values():
            if run.id in str(task.get("args")) and task.get("state") == "SUCCESS":
                return task
        return None

    task = wait_until(execute_task, 30, "Flower to list runwright.execute", interval=0.5)
    assert task["args"] == repr([run.id])
    assert task["kwargs"] == "{}"
    assert task["worker"].startswith("w1@")
    # Nothing secret reaches the broker or Flower: not the signing key, not a
    # connection URL or its password.
    assert engine.settings.secret_key == "test:test-secret-for-runwright-tests-only"
    secrets = [
        engine.settings.secret_key,
        "test-secret",
        cluster.database_url,
        cluster.redis_url,
        cluster.broker_url,
        "postgresql://",
        "redis://",
        "password",
    ]
    secrets += [
        p for p in (urlsplit(u).password for u in (cluster.redis_url, cluster.database_url)) if p
    ]
    shown = json.dumps(task)
    for secret in secrets:
        assert secret not in task["args"], secret
        assert secret not in shown, secret


def test_flower_refuses_requests_without_auth(flower: Flower) -> None:
    for path in ("/api/tasks", "/api/workers", "/"):
        status, _ = flower.get(path, auth=False)
        assert status == 401, path
    bad = urllib.request.Request(flower.base + "/api/tasks")
    bad.add_header("Authorization", "Basic " + base64.b64encode(b"flower-user:wrong").decode())
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(bad, timeout=5)
    refused.value.close()
    assert refused.value.code == 401
    status, _ = flower.get("/api/tasks")
    assert status == 200


def test_a_failed_run_is_a_failed_task_delivered_once(cluster: Cluster, flower: Flower) -> None:
    cluster.overrides["RUNWRIGHT_AGENTS"] = "tests.agents,tests.agents_failing"
    worker = cluster.worker("w1")
    engine = cluster.engine()
    flower.follow(engine)
    failed = engine.start("refused")
    completed = engine.start("fleet", {"amount": 5})
    cancelled = engine.start("hang")
    wait_until(lambda: engine.get_run(cancelled.id).status is RunStatus.RUNNING, 30, "hang runs")
    assert engine.cancel(cancelled.id).action == "requested"
    for run, status in (
        (failed, RunStatus.FAILED),
        (completed, RunStatus.COMPLETED),
        (cancelled, RunStatus.CANCELLED),
    ):
        wait_until(lambda r=run: engine.get_run(r.id).ended, 60, f"{run.agent} to settle")
        assert engine.get_run(run.id).status is status
    error = engine.get_run(failed.id).error
    assert error is not None and error.code == "model_error"

    task = wait_until(lambda: flower.finished_execution(failed.id), 30, "the failed task")
    assert task["state"] == "FAILURE", task
    assert task["exception"].startswith("RunFailed('model_error', "), task["exception"]
    assert "AuthenticationError" in task["exception"]
    # Found by Flower's Failed filter.
    assert task["uuid"] in flower.tasks("?state=FAILURE")
    for run in (completed, cancelled):
        done = wait_until(lambda r=run: flower.finished_execution(r.id), 30, "a task")
        assert done["state"] == "SUCCESS", done

    # Acked, not delivered again: nothing is left in the broker, and the worker
    # received the failed run's message once.
    wait_until(lambda: broker_holds(cluster) == 0, 10, "the broker to hold nothing")
    log = worker.log()
    assert log.count(f"runwright.execute[{task['uuid']}] received") == 1
    assert len(flower.executions(failed.id)) == 1
    assert len(effects_of(cluster, failed.id)) == 1  # one execution, one step 1
    # Expected, so logged at INFO without a traceback.
    assert f"runwright.execute[{task['uuid']}] raised expected: RunFailed(" in log
    assert "raised unexpected" not in log and "Traceback" not in log


def test_ticks_stay_out_of_flower_and_the_log_unless_they_did_something(
    cluster: Cluster, flower: Flower
) -> None:
    worker = cluster.worker("w1")
    beat = cluster.beat()
    engine = cluster.engine()
    flower.follow(engine)
    # Started but never enqueued: only a tick finds it (it re-enqueues queued
    # runs after RUNWRIGHT_REENQUEUE_SECONDS).
    silent = Engine(engine.store, leases=engine.leases, settings=engine.settings)
    lost = silent.start("fleet", {"amount": 1, "lost": True})
    wait_until(
        lambda: engine.get_run(lost.id).status is RunStatus.COMPLETED, 30, "tick's re-enqueue"
    )

    sent = "Sending due task runwright-tick"
    wait_until(lambda: beat.log().count(sent) >= 5, 30, "beat to send five ticks")
    # Every tick sent so far has been executed and acked.
    ticks = beat.log().count(sent)
    wait_until(lambda: broker_holds(cluster) == 0, 10, "the worker to take every tick")
    # A run started now reaches Flower after the ticks' events would have.
    later = engine.start("fleet", {"amount": 2})
    wait_until(lambda: flower.finished_execution(later.id), 30, "Flower to list the later run")

    listed = flower.tasks()
    assert [t for t in listed.values() if t.get("name") == "runwright.tick"] == []
    # The run the tick re-enqueued is there, as any other.
    assert flower.finished_execution(lost.id) is not None
    # The worker log says what ticks did, once, and is silent about the rest.
    log = worker.log()
    assert re.findall(r"\btick: (.*)", log) == ["reenqueued 1"], (ticks, log[-3000:])
    assert "runwright.tick[" not in log
    # Only the ticks' lines are gone: Celery still logs the runs' tasks.
    assert re.search(r"runwright\.execute\[[-0-9a-f]+\] received", log)
