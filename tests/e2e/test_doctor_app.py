"""``runwright doctor -A proj`` checks the project's own Celery app, the one
that called ``runner.celery.install(app)`` (issue 49, item 3): its broker (not
``RUNWRIGHT_BROKER_URL``), where it routes Runwright's tasks, and whether a
worker takes Runwright's queue; with a Redis broker and a RabbitMQ one. And a
worker of that app started without Runwright's queue says so in its log.
Real ``celery worker`` subprocesses of the apps in tests/celery_app_*.py."""

from __future__ import annotations

import json
import os
import socket
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from kombu import Connection

from store.local import free_port
from tests.e2e.clirun import rw
from tests.e2e.cluster import Proc
from tests.services import Services

RABBITMQ_URL = os.environ.get("RUNWRIGHT_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")


def _reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), 1):
            return True
    except OSError:
        return False


def doctor(env: dict[str, str], *args: str) -> tuple[int, dict[str, str], str]:
    """Doctor's exit status, its lines by check (``ok ...``, ``FAIL ...`` or
    ``skipped: ...``) and its whole output."""
    done = rw(env, "doctor", *args, ok=False)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    found = {}
    for line in done.stdout.strip().splitlines()[:-1]:
        found[line[:14].strip()] = line[15:].strip()
    return done.returncode, found, done.stdout + done.stderr


@pytest.mark.parametrize("named_by", ["-A", "RUNWRIGHT_CELERY_APP"])
@pytest.mark.parametrize(
    ("kind", "url", "shown"),
    [
        ("redis", "redis://:hunter2@127.0.0.1:{port}/0", "redis://:***@127.0.0.1:{port}/0"),
        (
            "rabbitmq",
            "amqp://guest:hunter2@127.0.0.1:{port}//",
            "amqp://guest:***@127.0.0.1:{port}//",
        ),
    ],
)
def test_doctor_a_fails_the_broker_line_when_the_apps_broker_is_closed(
    kind: str, url: str, shown: str, named_by: str, cli_env: dict[str, str]
) -> None:
    """RUNWRIGHT_BROKER_URL is a Redis that answers; the app's broker is a
    port where nothing listens. The old doctor checked the former and passed.
    The app is named by -A, or by the setting when -A is not given."""
    port = free_port()
    env = {**cli_env, "PROJECT_BROKER_URL": url.format(port=port)}
    app = f"tests.celery_app_{kind}"
    if named_by == "-A":
        code, lines, out = doctor(env, "-A", app)
    else:
        code, lines, out = doctor({**env, "RUNWRIGHT_CELERY_APP": app})
    assert code == 1, out
    assert "broker" in lines, out
    assert lines["broker"].startswith("FAIL  "), lines["broker"]
    assert shown.format(port=port) in lines["broker"], lines["broker"]
    assert "hunter2" not in out
    assert lines["celery app"].startswith("ok    tests.celery_app_"), lines["celery app"]
    assert lines["consumers"] == "skipped: the broker is unreachable", lines


@dataclass
class Project:
    """The environment of a project's processes on one broker, with a queue
    for Runwright and a default queue for its own tasks, both its own."""

    kind: str
    env: dict[str, str]
    queue: str
    own_queue: str
    workdir: Path

    @property
    def app(self) -> str:
        return f"tests.celery_app_{self.kind}"

    def worker(self, name: str, *args: str) -> Proc:
        command = [sys.executable, "-m", "celery", "-A", self.app, "worker", "-l", "INFO"]
        command += ["-n", f"{name}@%h", "-P", "threads", "-c", "2"]
        command += ["--without-gossip", "--without-mingle", *args]
        return Proc(name, command, self.env, self.workdir)


@pytest.fixture(params=["redis", "rabbitmq"])
def project(
    request: pytest.FixtureRequest, cli_env: dict[str, str], services: Services, tmp_path: Path
) -> Iterator[Project]:
    kind = request.param
    if kind == "rabbitmq" and not _reachable(RABBITMQ_URL):
        pytest.skip(f"no RabbitMQ at {RABBITMQ_URL} (CI provides one)")
    broker = RABBITMQ_URL if kind == "rabbitmq" else services.redis_url()
    token = uuid.uuid4().hex[:8]
    queue, own_queue = f"runwright-doctor-{token}", f"project-doctor-{token}"
    env = {
        **cli_env,
        "PROJECT_BROKER_URL": broker,
        "PROJECT_QUEUE": own_queue,
        "RUNWRIGHT_QUEUE": queue,
        "PYTHONUNBUFFERED": "1",
    }
    yield Project(kind, env, queue, own_queue, tmp_path)
    if kind == "rabbitmq":
        with Connection(RABBITMQ_URL) as conn:
            for name in (queue, own_queue):
                conn.default_channel.queue_delete(name)


def doctor_until(project: Project, worker: str) -> tuple[int, dict[str, str], str]:
    """``doctor -A``, again (three times at most) while its consumers line does
    not name ``worker``: a worker that misses the one second Celery's inspect
    waits (a busy machine) is not what these tests are about."""
    for _ in range(3):
        code, lines, out = doctor(project.env, "-A", project.app)
        if worker in lines.get("consumers", ""):
            break
    return code, lines, out


def test_a_worker_without_runwrights_queue_warns_and_doctor_finds_no_consumer(
    project: Project,
) -> None:
    # Named to come first among the workers that answer (on a shared node, others may).
    plain = project.worker("a-plain")  # consumes its app's default queue only
    workers = [plain]
    try:
        plain.wait_for(" ready.", timeout=90)
        log = plain.log()
        assert "WARNING" in log and f"Runwright's queue {project.queue!r}" in log, log[-3000:]
        assert f"-Q {project.own_queue},{project.queue}" in log, log[-3000:]

        code, lines, out = doctor_until(project, "a-plain@")
        assert code == 1
        assert lines["broker"].startswith("ok    "), out
        assert lines["routes"] == (
            f"ok    runwright.execute and runwright.tick go to queue {project.queue!r}"
        ), out
        consumers = lines["consumers"]
        assert consumers.startswith(f"FAIL  no worker takes queue {project.queue!r}"), out
        assert "a-plain@" in consumers and project.own_queue in consumers, consumers
        assert f"celery -A {project.app} worker -Q {project.queue}" in consumers, consumers

        agents = project.worker("a-agents", "-Q", project.queue, "--prefetch-multiplier", "1")
        workers.append(agents)
        agents.wait_for(" ready.", timeout=90)
        assert f"Runwright's queue {project.queue!r}" not in agents.log(), agents.log()[-3000:]
        code, lines, out = doctor_until(project, "a-agents@")
        consumers = lines["consumers"]
        assert consumers.startswith(f"ok    1 worker(s) take queue {project.queue!r}: a-agents@"), (
            out
        )
        assert "a-plain@" not in consumers
    finally:
        for proc in reversed(workers):
            proc.stop()


@pytest.mark.parametrize(("kind", "url", "advised"), [
    ("redis", "redis://127.0.0.1:1/0", True),
    ("rabbitmq", "amqp://guest:guest@127.0.0.1:1//", False),
])  # fmt: skip
def test_worker_shape_a_names_the_app_and_its_queue_and_judges_its_broker(
    kind: str, url: str, advised: bool, cli_env: dict[str, str]
) -> None:
    """The advice against a Redis broker follows the app's broker, not
    RUNWRIGHT_BROKER_URL (here the other kind); nothing is connected to."""
    other = "amqp://guest:guest@127.0.0.1:1//" if kind == "redis" else "redis://127.0.0.1:1/1"
    env = {**cli_env, "PROJECT_BROKER_URL": url, "RUNWRIGHT_BROKER_URL": other}
    env["RUNWRIGHT_QUEUE"] = "agents-only"
    app = f"tests.celery_app_{kind}"
    args = ["--cores", "2", "--latency", "1", "--cpu-ms-per-step", "3"]
    out = rw(env, "worker-shape", "-A", app, *args).stdout
    assert f"celery multi start 2 -A {app} -l INFO -Q agents-only -P threads -c 251" in out, out
    assert ("Note: with Redis as the broker" in out) is advised, out
    shown = json.loads(rw(env, "worker-shape", "-A", app, *args, "--json").stdout)
    assert (shown["broker_advice"] is not None) is advised
