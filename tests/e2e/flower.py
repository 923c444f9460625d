"""A real Flower for end-to-end tests: started against a cluster's broker,
read through its HTTP API with basic auth."""

from __future__ import annotations

import base64
import contextlib
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from runner import Engine
from store.local import free_port
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

    def tasks(self, query: str = "") -> dict[str, dict[str, Any]]:
        status, body = self.get("/api/tasks" + query)
        assert status == 200, (status, body[:500])
        tasks = json.loads(body)
        assert isinstance(tasks, dict)
        return tasks

    def executions(self, run_id: str) -> list[dict[str, Any]]:
        """Flower's runwright.execute tasks of one run."""
        return [
            task
            for task in self.tasks("?taskname=runwright.execute").values()
            if task.get("args") == repr([run_id])
        ]

    def follow(self, engine: Engine) -> None:
        """Wait until Flower records the workers' task events. A worker sends
        them once Flower has asked (every few seconds), and those sent before
        it has bound its queue are lost to it, so probe with runs until one
        shows (an agent of ``tests.agents``)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            probe = engine.start("steady", {"steps": 1, "latency": 0.0, "probe": time.time()})
            try:
                wait_until(lambda p=probe.id: self.finished_execution(p), 5, "Flower", 0.5)
                return
            except AssertionError:
                continue
        raise AssertionError("Flower did not follow the workers' task events within 60 s")

    def finished_execution(self, run_id: str) -> dict[str, Any] | None:
        done = [t for t in self.executions(run_id) if t.get("state") in ("SUCCESS", "FAILURE")]
        return done[0] if done else None


@contextlib.contextmanager
def running_flower(cluster: Cluster) -> Iterator[Flower]:
    """Flower on a free port, answering, until the block ends."""
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
