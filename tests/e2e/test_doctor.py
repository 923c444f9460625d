"""``runwright doctor`` against real services and a real worker (issue 13,
acceptance 4): exit 0 on a healthy set-up, and for each broken thing a non-zero
exit with a FAIL on the line that names it, and no other line failing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from celery import Celery

from runner.core.coordination.leases import Leases
from store.local import LocalRedis, free_port
from store.revision import HEAD
from tests.e2e.clirun import rw
from tests.e2e.cluster import Cluster, wait_until
from tests.services import Services

CHECKS = [
    "configuration",
    "signing key",
    "postgres",
    "schema",
    "redis",
    "celery app",
    "broker",
    "result backend",
    "routes",
    "task options",
    "beat",
    "workers",
    "consumers",
    "agents served",
    "tools",
    "agents",
    "model limits",
]
# The checks of Runwright's own Celery app, whose preset stops on an invalid
# configuration: skipped when the configuration check failed.
APP_CHECKS = ["celery app", "broker", "result backend", "routes", "task options", "consumers"]


@dataclass
class Setup:
    cluster: Cluster
    redis: LocalRedis
    leases: Leases

    def env(self, **changes: str | None) -> dict[str, str]:
        """The workers' environment, as doctor should be run with, but checking
        beat against 30 s intervals (the worker's are 1 s, for its watchdog);
        None unsets a variable."""
        env = self.cluster.env(RUNWRIGHT_TICK_SECONDS="30")
        for key, value in changes.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env


@pytest.fixture(scope="module")
def setup(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """One migrated database, one Redis (leases in db 0, the broker in db 1)
    and one real worker, whose beacon doctor looks for; no beat."""
    workdir = tmp_path_factory.mktemp("doctor")
    redis_server = LocalRedis(workdir / "redis", free_port())
    redis_server.start()
    name = services.new_database()
    cluster = Cluster(
        database_url=services.database_url(name),
        redis_url=redis_server.url(0),
        broker_url=redis_server.url(1),
        workdir=workdir,
    )
    leases = Leases.from_url(cluster.redis_url)
    try:
        cluster.worker("doc")
        yield Setup(cluster, redis_server, leases)
    finally:
        leases.redis.close()
        cluster.stop()
        redis_server.kill()
        services.drop_database(name)


def doctor(env: dict[str, str]) -> tuple[int, dict[str, str]]:
    """Doctor's exit status and its lines by check: ``ok ...``, ``FAIL ...`` or
    ``skipped: ...``."""
    done = rw(env, "doctor", ok=False)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == len(CHECKS) + 1, done.stdout  # and the summary
    found = {}
    for line in lines[:-1]:
        name, state = line[:14].strip(), line[15:].strip()
        found[name] = state
    assert list(found) == CHECKS, done.stdout
    return done.returncode, found


def not_ok(lines: dict[str, str]) -> dict[str, str]:
    return {name: state for name, state in lines.items() if not state.startswith("ok")}


def test_a_healthy_set_up_passes_every_check(setup: Setup) -> None:
    env = setup.env()
    rw(env, "tick")  # what beat would send
    code, lines = doctor(env)
    assert code == 0 and not_ok(lines) == {}, lines
    assert lines["schema"] == f"ok    at revision {HEAD}"
    assert lines["beat"].startswith("ok    tick() last ran ")
    assert lines["workers"].startswith("ok    1 seen: doc@")
    assert (
        lines["celery app"] == "ok    tasks: the Celery app 'runwright', with Runwright installed"
    )
    assert (
        lines["broker"]
        == f"ok    {setup.cluster.broker_url}, the broker of the Celery app 'runwright'"
    )
    assert lines["routes"] == "ok    runwright.execute and runwright.tick go to queue 'runwright'"
    assert lines["consumers"].startswith("ok    1 worker(s) take queue 'runwright': doc@")
    assert lines["agents served"] == "ok    no agent has open or recent runs"
    assert lines["model limits"] == "ok    no provider answered 429 in the last day"
    assert lines["agents"].startswith("ok    ") and "from tests.agents" in lines["agents"]
    assert "test-secret" not in str(lines)  # a key is named by its id, never shown


def test_beat_stopped_fails_the_beat_line(setup: Setup) -> None:
    setup.leases.mark_tick(time.time() - 600)  # the last tick, ten minutes ago
    code, lines = doctor(setup.env())
    assert code == 1
    assert not_ok(lines) == {
        "beat": "FAIL  tick() last ran 10 min ago, more than 3 intervals of 30 s: is celery "
        "beat running? Without it, runs whose worker died are not taken over, notifications "
        "are not sent again and approvals do not expire"
    }


def test_a_missing_signing_key_fails_configuration_and_the_key(setup: Setup) -> None:
    setup.leases.mark_tick(time.time())
    code, lines = doctor(setup.env(RUNWRIGHT_SECRET_KEY=None))
    assert code == 1
    failed = not_ok(lines)
    assert set(failed) == {"configuration", "signing key", *APP_CHECKS}, lines
    for name in APP_CHECKS:
        assert failed[name].startswith("skipped: "), lines
    assert failed["configuration"].startswith("FAIL  RUNWRIGHT_SECRET_KEY is not set")
    assert failed["signing key"].startswith("FAIL  RUNWRIGHT_SECRET_KEY is not set")


@pytest.mark.parametrize(
    "key", ["k1:too-short", "too-short", "k1:" + "s" * 40 + ",k1:" + "t" * 40, "k 1:" + "s" * 40]
)
def test_a_bad_signing_key_fails_the_key_line_alone(setup: Setup, key: str) -> None:
    setup.leases.mark_tick(time.time())
    code, lines = doctor(setup.env(RUNWRIGHT_SECRET_KEY=key))
    assert code == 1
    failed = not_ok(lines)
    assert list(failed) == ["signing key"], lines
    assert failed["signing key"].startswith("FAIL  RUNWRIGHT_SECRET_KEY")
    assert "too-short" not in failed["signing key"] and "sss" not in failed["signing key"]


def test_an_unmigrated_database_fails_the_schema_line(setup: Setup, services: Services) -> None:
    setup.leases.mark_tick(time.time())
    empty = services.new_database(empty=True)
    try:
        code, lines = doctor(setup.env(RUNWRIGHT_DATABASE_URL=services.database_url(empty)))
    finally:
        services.drop_database(empty)
    assert code == 1
    assert not_ok(lines) == {
        "schema": (
            "FAIL  the database has no Runwright schema; run `runwright migrate` to create it"
        ),
        "agents served": "skipped: the schema is not this code's",
        "tools": "skipped: the schema is not this code's",
    }


def test_redis_down_fails_the_redis_line_once_refused(setup: Setup) -> None:
    """Redis at a port where nothing listens (the broker too, by default):
    the refusal is the answer, with no retries (the line says refused)."""
    nothing = f"redis://127.0.0.1:{free_port()}/0"
    code, lines = doctor(setup.env(RUNWRIGHT_REDIS_URL=nothing, RUNWRIGHT_BROKER_URL=None))
    assert code == 1
    assert not_ok(lines) == {
        "redis": lines["redis"],
        "broker": "skipped: the broker is the Redis server that is unreachable",
        "beat": "skipped: Redis is unreachable",
        "workers": "skipped: Redis is unreachable",
        "consumers": "skipped: the broker is unreachable",
        "agents served": "skipped: Redis is unreachable",
        "model limits": "skipped: Redis is unreachable",
    }
    assert lines["redis"].startswith("FAIL  ConnectionError: ") and "refused" in lines["redis"]


def test_a_broker_down_fails_the_broker_line(setup: Setup) -> None:
    setup.leases.mark_tick(time.time())
    nothing = f"redis://127.0.0.1:{free_port()}/1"
    code, lines = doctor(setup.env(RUNWRIGHT_BROKER_URL=nothing))
    assert code == 1
    assert list(not_ok(lines)) == ["broker", "consumers"], lines
    assert "refused" in lines["broker"] and nothing in lines["broker"]
    assert lines["consumers"] == "skipped: the broker is unreachable"


def test_postgres_down_fails_the_postgres_line(setup: Setup) -> None:
    setup.leases.mark_tick(time.time())
    nothing = f"postgresql://postgres:hunter2@127.0.0.1:{free_port()}/runwright"
    code, lines = doctor(setup.env(RUNWRIGHT_DATABASE_URL=nothing))
    assert code == 1
    assert not_ok(lines) == {
        "postgres": lines["postgres"],
        "schema": "skipped: Postgres is unreachable",
        "agents served": "skipped: Postgres is unreachable",
        "tools": "skipped: Postgres is unreachable",
    }
    assert lines["postgres"].startswith("FAIL  OperationalError: ")
    assert "hunter2" not in lines["postgres"]


def test_no_worker_fails_the_workers_line(setup: Setup) -> None:
    """A Redis database no worker has ever written to, where tick() just ran."""
    fresh = setup.redis.url(2)
    rw(setup.env(RUNWRIGHT_REDIS_URL=fresh), "tick")
    code, lines = doctor(setup.env(RUNWRIGHT_REDIS_URL=fresh))
    assert code == 1
    assert list(not_ok(lines)) == ["workers", "agents served"], lines
    assert lines["workers"].startswith("FAIL  no worker has been seen lately")
    assert lines["agents served"] == "skipped: no live worker to ask"


def test_unreadable_settings_fail_once_and_skip_the_rest(setup: Setup) -> None:
    code, lines = doctor(setup.env(RUNWRIGHT_TICK_SECONDS="often"))
    assert code == 1
    assert lines["configuration"] == "FAIL  RUNWRIGHT_TICK_SECONDS must be a number, not 'often'"
    assert {state for name, state in lines.items() if name != "configuration"} == {
        "skipped: the configuration cannot be read"
    }


def test_a_missing_agent_module_fails_the_agents_line(setup: Setup) -> None:
    setup.leases.mark_tick(time.time())
    code, lines = doctor(setup.env(RUNWRIGHT_AGENTS="tests.agents,no_such_agents_module"))
    assert code == 1
    assert list(not_ok(lines)) == ["agents"], lines
    assert "cannot import agent module 'no_such_agents_module'" in lines["agents"]


def test_an_agent_module_that_exits_on_import_fails_the_agents_line(
    setup: Setup, tmp_path: Path
) -> None:
    (tmp_path / "exiting_agents.py").write_text("raise SystemExit('not in this process')\n")
    setup.leases.mark_tick(time.time())
    env = setup.env(RUNWRIGHT_AGENTS="tests.agents,exiting_agents")
    env["PYTHONPATH"] = f"{env['PYTHONPATH']}:{tmp_path}"
    code, lines = doctor(env)
    assert code == 1
    assert not_ok(lines) == {
        "agents": "FAIL  agent module 'exiting_agents' fails on import: "
        "SystemExit: not in this process"
    }


def restart_redis(setup: Setup) -> None:
    """Kill the set-up's Redis and start it again: it keeps nothing on disk, so
    its mark of the last tick is gone; wait until the worker is seen again,
    and answers on the broker (the same Redis) again."""
    setup.redis.kill()
    setup.redis.start()
    assert setup.leases.last_tick() is None
    wait_until(setup.leases.workers, 30, "the worker's beacon after the restart")
    wait_until(lambda: answers_on_the_broker(setup), 30, "the worker on the broker")


def answers_on_the_broker(setup: Setup) -> bool:
    client = Celery("doctor-test", broker=setup.cluster.broker_url)
    try:
        return bool(client.control.inspect(timeout=1).ping())
    except Exception:  # the broker's connection, closed by a restart
        return False
    finally:
        client.close()


def test_after_a_redis_restart_beat_is_judged_by_the_mark_postgres_keeps(
    setup: Setup, services: Services
) -> None:
    """Issue 32: Redis loses its mark of the last tick when it restarts; doctor
    then reads the one Postgres keeps, and says "never" only when neither has
    one (a fresh database), "unknown" when Postgres cannot be read."""
    fresh = services.new_database()
    env = setup.env(RUNWRIGHT_DATABASE_URL=services.database_url(fresh))
    try:
        restart_redis(setup)
        code, lines = doctor(env)  # tick() truly never ran on this database
        assert code == 1 and list(not_ok(lines)) == ["beat"], lines
        assert lines["beat"].startswith("FAIL  tick() has never run")
        assert "is celery beat running?" in lines["beat"]

        rw(env, "tick")
        restart_redis(setup)
        code, lines = doctor(env)
        assert code == 0 and not_ok(lines) == {}, lines
        assert lines["beat"].startswith("ok    tick() last ran ")

        nothing = f"postgresql://postgres@127.0.0.1:{free_port()}/runwright"
        code, lines = doctor(setup.env(RUNWRIGHT_DATABASE_URL=nothing))
        assert lines["beat"] == (
            "FAIL  when tick() last ran is unknown: Redis has no mark of it (a restart loses "
            "it) and Postgres, which keeps one too, is unreachable"
        )
    finally:
        services.drop_database(fresh)
