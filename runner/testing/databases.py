"""Databases for tests: a migrated template on a Postgres server, and a fresh
clone of it for each test (a clone is a file copy, tens of milliseconds).

The server is the one ``RUNWRIGHT_TEST_DATABASE_URL`` names, else
``RUNWRIGHT_DATABASE_URL``'s (the role needs CREATEDB), else the local stack's
embedded Postgres under ``RUNWRIGHT_HOME`` (default: ``.runwright`` in the
project), which is started if it is not running and stopped again by the last
test session that needed it (:class:`StackUse`).

Tests touch only what they made. Each database carries a comment naming its
session, and a session holds a Postgres advisory lock on that name while it
runs, so the databases of a session that was killed are recognised (the lock
is free) and dropped by the next one, and nothing else ever is. Runwright's
own suite (tests/services.py) and the pytest plugin both use this module.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TextIO, TypeVar

import psycopg2
from sqlalchemy.engine import make_url

from store.local import LocalStack
from store.migrate import upgrade

MARK = "runwright-tests session="
D = TypeVar("D", bound="Databases")
_DB_COUNTER = itertools.count(1)
_lock = threading.Lock()


class Databases:
    """The test databases of one session on one server."""

    def __init__(self, server_url: str, stack: StackUse | None = None) -> None:
        self.server_url = server_url  # a Postgres URL whose database is "postgres"
        self.stack = stack
        with _lock:  # a process may hold more than one session (the suite's and the kit's)
            self.template = f"rw_tmpl_{os.getpid()}_{next(_DB_COUNTER)}"
        self.session_key = secrets.randbits(62)
        self._made: set[str] = set()
        # Held until the session ends: while it is, the session's databases are in use.
        self._alive = self.admin()
        with self._alive.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (self.session_key,))

    def admin(self) -> psycopg2.extensions.connection:
        conn = psycopg2.connect(self.server_url.replace("postgresql+psycopg2", "postgresql"))
        conn.autocommit = True
        return conn

    def database_url(self, name: str) -> str:
        return str(make_url(self.server_url).set(database=name).render_as_string(False))

    def prepare(self) -> None:
        self._drop_stale()
        self._create(self.template)
        upgrade(self.database_url(self.template))

    def new_database(self, *, empty: bool = False) -> str:
        """A fresh database cloned from the migrated template (or with no schema
        at all); its name."""
        with _lock:
            name = f"rw_t_{os.getpid()}_{next(_DB_COUNTER)}"
        self._create(name, template=None if empty else self.template)
        return name

    def drop_database(self, name: str) -> None:
        if name not in self._made:
            raise ValueError(f"{name!r} was not made by this test session; it drops only its own")
        conn = self.admin()
        try:
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            conn.close()
        self._made.discard(name)

    def _create(self, name: str, template: str | None = None) -> None:
        conn = self.admin()
        try:
            with conn.cursor() as cur:
                clone = f' TEMPLATE "{template}"' if template else ""
                cur.execute(f'CREATE DATABASE "{name}"{clone}')
                self._made.add(name)
                cur.execute(f'COMMENT ON DATABASE "{name}" IS %s', (f"{MARK}{self.session_key}",))
        finally:
            conn.close()

    def _drop_stale(self) -> None:
        """Drop the databases of test sessions that died before their teardown.

        Only databases whose comment names a test session, and only when nobody
        holds that session's lock: a live session, on this machine or another
        one sharing the server, keeps its databases.
        """
        conn = self.admin()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT datname, shobj_description(oid, 'pg_database') FROM pg_database"
                    " WHERE datname LIKE 'rw\\_t\\_%' OR datname LIKE 'rw\\_tmpl\\_%'"
                )
                for name, comment in cur.fetchall():
                    key = _session_key(comment)
                    if key is None or key == self.session_key:
                        continue
                    cur.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                    row = cur.fetchone()
                    if not (row and row[0]):
                        continue  # that session is still running
                    try:
                        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                    finally:
                        cur.execute("SELECT pg_advisory_unlock(%s)", (key,))
        finally:
            conn.close()

    def close(self) -> None:
        """Drop what the session made and stop what it started, even if a step fails."""
        with contextlib.ExitStack() as later:  # runs the callbacks last to first
            if self.stack is not None:
                later.callback(self.stack.leave)
            later.callback(self._alive.close)
            for name in sorted(self._made):
                self.drop_database(name)


def _session_key(comment: str | None) -> int | None:
    if not comment or not comment.startswith(MARK):
        return None
    try:
        return int(comment[len(MARK) :])
    except ValueError:
        return None


def server_url(database_url: str) -> str:
    return str(make_url(database_url).set(database="postgres").render_as_string(False))


def open_databases(
    environ: Mapping[str, str],
    default_home: Path,
    *,
    on_shared: Callable[[Path], None] | None = None,
    cls: type[D],
) -> D:
    """The session's test databases, prepared: on the server the environment
    names, else on the local stack under ``RUNWRIGHT_HOME`` (default
    ``default_home``). :meth:`Databases.close` undoes everything it did."""
    database_url = environ.get("RUNWRIGHT_TEST_DATABASE_URL") or environ.get(
        "RUNWRIGHT_DATABASE_URL"
    )
    stack: StackUse | None = None
    with contextlib.ExitStack() as undo:
        if not database_url:
            home = Path(environ.get("RUNWRIGHT_HOME") or default_home).resolve()
            stack = StackUse(home, on_shared=on_shared)
            undo.callback(stack.leave)
            database_url = stack.enter()
        databases = cls(server_url(database_url), stack)
        undo.pop_all()  # from here on, databases.close() undoes it all
    try:
        databases.prepare()
    except BaseException:
        databases.close()
        raise
    return databases


class StackUse:
    """One test session's use of the local stack under ``home``.

    A session that finds a server of the stack stopped starts it and notes so in
    ``tests-started.json``; the last session to leave stops what the note names.
    A stack that was already running (``runwright local up``) is used and left
    running. Each session holds an exclusive lock on a file of its own while it
    runs, so a session killed before its teardown no longer counts.
    ``on_shared(home)`` is called when a session leaves the servers running for
    another one.
    """

    def __init__(self, home: Path, *, on_shared: Callable[[Path], None] | None = None) -> None:
        self.home = home
        self.stack = LocalStack(home)
        self.on_shared = on_shared
        self._sessions = home / "test-sessions"
        self._note = home / "tests-started.json"
        self._mine: TextIO | None = None

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "tests.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _started(self) -> list[str]:
        try:
            return list(json.loads(self._note.read_text()))
        except (FileNotFoundError, ValueError):
            return []

    def _others(self) -> list[Path]:
        """The files of the other sessions that are still running."""
        alive = []
        for path in sorted(self._sessions.glob("*")):
            if self._mine is not None and path == Path(self._mine.name):
                continue
            with open(path, "a") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    alive.append(path)
                    continue
            path.unlink(missing_ok=True)  # its session is gone
        return alive

    def enter(self) -> str:
        """Start the stack if needed; the URL of its database."""
        with self._guard():
            urls = self.stack.up()
            if self.stack.started:
                started = sorted({*self._started(), *self.stack.started})
                self._note.write_text(json.dumps(started))
            self._sessions.mkdir(exist_ok=True)
            path = self._sessions / f"{os.getpid()}-{secrets.token_hex(4)}"
            handle = open(path, "w")  # noqa: SIM115  (held until leave())
            fcntl.flock(handle, fcntl.LOCK_EX)
            self._mine = handle
        return urls.database_url

    def leave(self) -> None:
        """Stop the servers test sessions started, unless another session still uses them."""
        if self._mine is None:
            return
        with self._guard():
            path = Path(self._mine.name)
            self._mine.close()
            self._mine = None
            path.unlink(missing_ok=True)
            started = self._started()
            if not started:
                return
            if self._others():
                if self.on_shared is not None:
                    self.on_shared(self.home)  # still in use: not this session's leftovers
                return
            self.stack.down(started)
            self._note.unlink(missing_ok=True)
