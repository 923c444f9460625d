"""Real ``celery worker`` and ``celery beat`` subprocesses for acceptance tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery

import tests.agents  # noqa: F401  (the agents the workers run, known here too)
from runner import Engine, Run
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings, key_ring
from store.postgres import PostgresStore
from tests.services import ROOT


class Proc:
    """A subprocess whose output goes to a log file we can wait on."""

    def __init__(
        self,
        name: str,
        args: list[str],
        env: dict[str, str],
        logdir: Path,
        cwd: Path = ROOT,
    ) -> None:
        self.name = name
        self.log_path = logdir / f"{name}.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115  (closed in stop())
        self.popen = subprocess.Popen(
            args,
            env=env,
            cwd=cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.popen.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited ({self.popen.returncode}):\n{self.log()[-3000:]}"
                )
            time.sleep(0.1)
        raise AssertionError(
            f"{self.name}: {text!r} did not appear in {timeout}s:\n{self.log()[-3000:]}"
        )

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def stop(self) -> None:
        if self.popen.poll() is None:
            for sig, grace in ((signal.SIGCONT, 0), (signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                try:
                    os.killpg(self.pid, sig)
                except ProcessLookupError:
                    break
                if grace:
                    try:
                        self.popen.wait(grace)
                        break
                    except subprocess.TimeoutExpired:
                        continue
        self._log.close()


@dataclass
class Cluster:
    """Workers and beat against one database, one lease Redis and one broker."""

    database_url: str
    redis_url: str
    broker_url: str
    workdir: Path
    overrides: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    queue: str = "runwright"
    # Where this process's engine reaches the database, when not where the
    # workers do (behind a proxy that a test cuts, say).
    engine_database_url: str | None = None

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            **os.environ,
            "RUNWRIGHT_DATABASE_URL": self.database_url,
            "RUNWRIGHT_REDIS_URL": self.redis_url,
            "RUNWRIGHT_BROKER_URL": self.broker_url,
            "RUNWRIGHT_AGENTS": "tests.agents",
            "RUNWRIGHT_SECRET_KEY": "test:test-secret-for-runwright-tests-only",
            "RUNWRIGHT_LEASE_TTL_SECONDS": "2",
            "RUNWRIGHT_TICK_SECONDS": "1",
            "RUNWRIGHT_REENQUEUE_SECONDS": "3",
            "RUNWRIGHT_DRAIN_SECONDS": "5",
            "RUNWRIGHT_HOME": str(self.workdir),
            "RUNWRIGHT_QUEUE": self.queue,
            "RUNWRIGHT_SCRIPTED_JOURNAL": str(self.workdir / "journal.jsonl"),
            "RUNWRIGHT_TEST_EFFECT_LOG": str(self.workdir / "effects.jsonl"),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
        env.update(self.overrides)
        env.update(extra)
        return env

    def worker(self, name: str, *, concurrency: int = 16, wait: bool = True, **env: str) -> Proc:
        proc = Proc(
            name,
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tasks",
                "worker",
                "-l",
                "INFO",
                "-n",
                f"{name}@%h",
                "-c",
                str(concurrency),
                "--without-gossip",
                "--without-mingle",
            ],
            self.env(**env),
            self.workdir,
        )
        self.procs.append(proc)
        if wait:
            proc.wait_for(" ready.", timeout=90)
        return proc

    def beat(self, name: str = "beat", **env: str) -> Proc:
        """A ``celery beat``; ``name`` keeps two of them apart (each has its own
        schedule file, as two hosts would)."""
        proc = Proc(
            name,
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tasks",
                "beat",
                "-l",
                "INFO",
                "-s",
                str(self.workdir / f"{name}-schedule"),
            ],
            self.env(**env),
            self.workdir,
        )
        self.procs.append(proc)
        proc.wait_for("beat: Starting", timeout=60)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()

    def engine(self) -> Engine:
        """An engine in the test process that enqueues through the broker, as a
        web app would."""
        client = Celery("runwright-test-client", broker=self.broker_url)
        client.conf.task_default_queue = self.queue

        def enqueue(run_id: str) -> None:
            client.send_task("runwright.execute", args=[run_id])

        settings = Settings.from_env(self.env())
        return Engine(
            PostgresStore.from_url(
                self.engine_database_url or self.database_url, cipher=key_ring(settings)
            ),
            leases=Leases.from_url(self.redis_url),
            enqueue=enqueue,
            settings=settings,
        )


_COMPLETED = re.compile(
    r"runwright\.execute\[[^\]]*\] succeeded in [^:]*: 'completed' \[run=([^\]\s]+)\]"
)


def completed_by(worker: Proc) -> set[str]:
    """The runs that an execution on ``worker`` completed, from its log."""
    return set(_COMPLETED.findall(worker.log()))


def wait_until(
    predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def settled(cluster: Cluster, run_id: str, timeout: float = 90) -> Run:
    """The run once it settles (an AssertionError after ``timeout`` seconds)."""
    engine = cluster.engine()
    found: Run = wait_until(
        lambda: (r := engine.get_run(run_id)).status.ended and r,
        timeout,
        f"run {run_id} to settle",
        interval=0.2,
    )
    return found
