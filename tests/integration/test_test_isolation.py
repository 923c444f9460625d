"""The test suite touches only what it owns and leaves nothing running.

Each test here runs a test session of its own (``isolation_probe.py``) in a
subprocess, on servers this test starts and stands in for a developer's, and
checks what that session left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import psycopg2
import pytest
import redis

from store.local import LocalPostgres, LocalRedis, LocalStack, free_port
from tests.leaks import TAG, Watch, snapshot
from tests.redis_dbs import RedisDatabases, UnsafeTestRedis
from tests.services import MARK, ROOT

PROBE = ROOT / "tests" / "integration" / "isolation_probe.py"


class Probe:
    """One run of the probe session (``select``: a test of it), and what it left running."""

    def __init__(self, tmp_path: Path, env: dict[str, str], select: str) -> None:
        self.log = tmp_path / f"probe-{secrets.token_hex(3)}.jsonl"
        self.log.touch()
        tag = f"probe-{secrets.token_hex(6)}"
        basetemp = (tmp_path / f"basetemp-{tag}").resolve()
        # Everything the session starts inherits the tag, and its folders are in basetemp.
        watch = Watch(token=tag, roots=[basetemp], before=snapshot(), descendants=False)
        self.done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                f"{PROBE}::{select}",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--basetemp={basetemp}",
            ],
            cwd=ROOT,
            env={
                **env,
                TAG: tag,
                "PROBE_LOG": str(self.log),
                "PYTHONPATH": str(ROOT),
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            },
            capture_output=True,
            text=True,
            timeout=100,
        )
        self.output = self.done.stdout + self.done.stderr
        self.left_running = watch.wait_for_leftovers(grace=5)

    def entries(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def assert_clean(self) -> None:
        assert self.done.returncode == 0, self.output[-4000:]
        assert not self.left_running, [p.cmdline() for p in self.left_running]


def _env(**overrides: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNWRIGHT_TEST_REDIS_URL"}
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@pytest.fixture
def developer_redis(tmp_path: Path) -> Iterator[LocalRedis]:
    """Stands in for the Redis a developer's RUNWRIGHT_REDIS_URL names."""
    server = LocalRedis(tmp_path / "developer-redis", free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside pytest's temporary root, for Postgres data.

    Run as root, Postgres runs as an unprivileged user and needs o+x on every
    parent of its data; each pytest session that starts on the machine resets
    its temporary root to 0700, which would pull the data from under a running
    server.
    """
    made = Path(tempfile.mkdtemp(prefix="rw-isolation-")).resolve()
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def developer_postgres(outside: Path) -> Iterator[LocalPostgres]:
    """Stands in for a Postgres server shared with others (RUNWRIGHT_DATABASE_URL)."""
    server = LocalPostgres(outside / "developer-postgres", free_port())
    server.start()
    yield server
    server.stop()


def _create(admin: Any, name: str, comment: str | None = None) -> None:
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
        if comment is not None:
            cur.execute(f'COMMENT ON DATABASE "{name}" IS %s', (comment,))


def _databases(admin: Any) -> set[str]:
    with admin.cursor() as cur:
        cur.execute("SELECT datname FROM pg_database")
        return {name for (name,) in cur.fetchall()}


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_the_suite_leaves_other_peoples_redis_and_postgres_data_alone(
    tmp_path: Path, developer_redis: LocalRedis, developer_postgres: LocalPostgres
) -> None:
    precious = f"precious:{secrets.token_hex(4)}"
    for db in range(16):
        client = redis.Redis.from_url(developer_redis.url(db))
        client.set(precious, f"data in db {db}")
        client.close()

    admin = psycopg2.connect(developer_postgres.url())
    admin.autocommit = True
    dead = _dead_pid()
    # Someone else's databases whose names look like the suite's (as another
    # machine's session would make on a shared server), and two that the suite
    # marked: one of a session that is gone, one of a session still running.
    foreign = [f"rw_t_{dead}_1", f"rw_tmpl_{dead}"]
    for name in foreign:
        _create(admin, name)
    _create(admin, f"rw_t_{dead}_2", comment=f"{MARK}1234567")
    with admin.cursor() as cur:
        cur.execute("SELECT pg_advisory_lock(7654321)")  # a session that is still running
    _create(admin, f"rw_t_{dead}_3", comment=f"{MARK}7654321")

    probe = Probe(
        tmp_path,
        _env(
            RUNWRIGHT_REDIS_URL=developer_redis.url(0),
            RUNWRIGHT_DATABASE_URL=developer_postgres.url(),
        ),
        "test_fill",
    )
    probe.assert_clean()

    for db in range(16):
        client = redis.Redis.from_url(developer_redis.url(db))
        assert client.get(precious) == f"data in db {db}".encode(), f"db {db} was emptied"
        client.close()
    used = {entry["redis"].rsplit("/", 1)[0] for entry in probe.entries()}
    assert len(probe.entries()) == 20
    assert f"redis://127.0.0.1:{developer_redis.port}" not in used

    left = _databases(admin)
    admin.close()
    # Kept: the foreign ones, and the suite's one whose session is still running.
    # Dropped: the suite's one of a session that is gone, and all the probe made.
    assert left == {"postgres", "template0", "template1", *foreign, f"rw_t_{dead}_3"}


def test_a_redis_given_to_the_tests_is_used_only_where_it_is_empty(
    tmp_path: Path, developer_redis: LocalRedis
) -> None:
    given = LocalRedis(tmp_path / "test-redis", free_port())
    given.start()
    try:
        someone = redis.Redis.from_url(given.url(2))
        someone.set("not-the-suites", "keep me")
        env = _env(
            RUNWRIGHT_TEST_REDIS_URL=given.url(0), RUNWRIGHT_REDIS_URL=developer_redis.url(0)
        )
        probe = Probe(tmp_path, env, "test_fill")
        probe.assert_clean()
        used = {entry["redis"] for entry in probe.entries()}
        assert {url.rsplit("/", 1)[0] for url in used} == {f"redis://127.0.0.1:{given.port}"}
        assert given.url(2) not in used
        assert someone.get("not-the-suites") == b"keep me"
        assert someone.dbsize() == 1
        # The session emptied the databases it claimed when it ended.
        for url in used:
            client = redis.Redis.from_url(url)
            assert client.dbsize() == 0
            client.close()
        someone.close()
    finally:
        given.stop()


def test_the_tests_redis_must_not_be_the_applications(tmp_path: Path) -> None:
    env = {
        "RUNWRIGHT_REDIS_URL": "redis://127.0.0.1:6399/0",
        "RUNWRIGHT_TEST_REDIS_URL": "redis://localhost:6399/4",
    }
    with pytest.raises(UnsafeTestRedis, match="same server as RUNWRIGHT_REDIS_URL"):
        RedisDatabases.for_tests(tmp_path, env)


@pytest.mark.timeout(300)
def test_the_local_stack_is_stopped_only_if_the_tests_started_it(
    tmp_path: Path, outside: Path
) -> None:
    home = outside / "home"
    stack = LocalStack(home)
    env = _env(RUNWRIGHT_DATABASE_URL=None, RUNWRIGHT_REDIS_URL=None, RUNWRIGHT_HOME=str(home))
    try:
        started_by_tests = Probe(tmp_path, env, "test_fill[3]")
        started_by_tests.assert_clean()
        status = stack.status()
        used = urlsplit(started_by_tests.entries()[0]["database"])
        assert used.port == urlsplit(status["database_url"]).port  # it ran on the stack
        assert (status["postgres"], status["redis"]) == ("stopped", "stopped")

        stack.up()  # `runwright local up`, before the tests
        already_up = Probe(tmp_path, env, "test_fill[3]")
        assert already_up.done.returncode == 0, already_up.output[-4000:]
        status = stack.status()
        assert (status["postgres"], status["redis"]) == ("running", "running")
    finally:
        stack.down()
    left = Watch(roots=[home.resolve()], descendants=False).leftovers()
    assert not [p.cmdline() for p in left]


def test_a_session_that_leaves_a_process_running_fails_and_ends_it(tmp_path: Path) -> None:
    probe = Probe(tmp_path, _env(), "test_leak")
    try:
        leaked = probe.entries()[0]["leaked"]
        assert probe.done.returncode == 1, probe.output[-4000:]
        assert "processes this test session left running" in probe.output
        for pid in leaked:
            assert f"pid {pid}: sleep 600" in probe.output
        assert not probe.left_running
    finally:
        # Only if the session did not end them: the two sleeps this test caused.
        for entry in probe.entries():
            for pid in entry.get("leaked", []):
                with contextlib.suppress(psutil.Error):
                    proc = psutil.Process(pid)
                    if proc.cmdline() == ["sleep", "600"]:
                        proc.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs Postgres as another user")
def test_postgres_stops_even_after_a_parent_folder_was_made_private(outside: Path) -> None:
    """What pytest does to its temporary root whenever a session starts on the machine."""
    parent = outside / "private"
    server = LocalPostgres(parent / "pg", free_port())
    server.start()
    pid = int((server.data / "postmaster.pid").read_text().splitlines()[0])
    try:
        parent.chmod(0o700)
        outside.chmod(0o700)
        server.stop()
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    finally:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
