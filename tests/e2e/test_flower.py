"""A real Flower against a real worker: it sees runwright.execute, with basic auth,
and the task's arguments carry the run id and nothing secret."""

from __future__ import annotations

import base64
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from store.local import free_port
from store.models import RunStatus
from tests.e2e.cluster import Cluster, Proc, wait_until

USER, PASSWORD = "flower-user", "flower-pass"


class Flower:
    def __init__(self, proc: Proc, port: int) -> None:
        self.proc = proc
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, *, auth: bool = True) -> tuple[int, bytes]:
        request = urllib.request.Request(self.base + path)
        if auth:
            token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read()

    def answers(self) -> bool:
        if self.proc.popen.poll() is not None:
            raise AssertionError(f"flower exited:\n{self.proc.log()[-3000:]}")
        try:
            return self.get("/healthcheck", auth=False) == (200, b"OK")
        except OSError:  # not listening yet
            return False

    def tasks(self) -> dict[str, dict[str, Any]]:
        status, body = self.get("/api/tasks")
        assert status == 200, (status, body[:500])
        tasks = json.loads(body)
        assert isinstance(tasks, dict)
        return tasks


@pytest.fixture
def flower(cluster: Cluster) -> Iterator[Flower]:
    port = free_port()
    proc = Proc(
        "flower",
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tasks",
            "flower",
            f"--port={port}",
            "--address=127.0.0.1",
            f"--basic-auth={USER}:{PASSWORD}",
        ],
        cluster.env(),
        cluster.workdir,
    )
    try:
        running = Flower(proc, port)
        wait_until(running.answers, 60, "Flower to answer on its port", interval=0.2)
        yield running
    finally:
        proc.stop()


def test_flower_sees_execute_with_the_run_id_only(cluster: Cluster, flower: Flower) -> None:
    cluster.worker("w1")
    engine = cluster.engine()
    run = engine.start("fleet", {"amount": 5})
    wait_until(
        lambda: engine.get_run(run.id).status is RunStatus.COMPLETED, 60, "the run to complete"
    )

    def execute_task() -> dict[str, Any] | None:
        for task in flower.tasks().values():
            if task.get("name") == "runwright.execute" and task.get("state") == "SUCCESS":
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
