"""``runwright doctor``: can this set-up run agents? One line per check.

Each check says ``ok`` (and what it found), ``FAIL`` (and why), or ``skipped``
when something it needs already failed, so one broken thing reads as one
failure, not as a cascade. Every check is bounded: the drivers get short
timeouts, and a check that still has no answer after :data:`CHECK_SECONDS` fails
with that. The command exits 0 only if every check passed.

It checks the environment it runs in: run it with the workers' settings.
With ``--json`` it prints the same checks as one JSON document instead
(runner/cli/as_json.py), with the same exit status.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import click

from runner.cli.terminal import inert
from runner.settings import Settings
from store.errors import ConfigurationError, RunwrightError

# What a driver may wait for a connection or an answer.
CONNECT_SECONDS = 2.0
# What one check may take in all (an agent module may be slow to import).
CHECK_SECONDS = 15.0
REASON_CHARS = 300
# Runs started this recently count as the agent's being in use, settled or not.
RECENT_SECONDS = 3600.0
NAME_WIDTH = 14


class Problem(RunwrightError):
    """The check found something wrong."""


@dataclass
class Found:
    """What the checks learn and later checks use."""

    settings: Settings | None = None  # from the environment (None: unreadable)
    services: Settings | None = None  # with the local stack's URLs, if it runs
    stack_down: str | None = None  # why the local stack's URLs are unknown
    postgres: Any = None  # an open psycopg2 connection
    redis: Any = None  # a redis.Redis that answered


def run_checks(echo: Callable[[str], None] = click.echo, *, as_json: bool = False) -> int:
    """Run every check, print a line for each (or, ``as_json``, one document
    of them all); the exit status (0: all passed)."""
    found = Found()
    doctor = Doctor(echo if not as_json else lambda line: None)
    # With --json, the document is alone on stdout: what an agent module
    # prints as it is imported goes to stderr.
    quiet = contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()
    try:
        with quiet:
            _run(doctor, found)
    finally:
        if found.postgres is not None:
            found.postgres.close()
        if found.redis is not None:
            found.redis.close()
    if as_json:
        from runner.cli.as_json import doctor_json, dumps

        echo(dumps(doctor_json(doctor.results, doctor.healthy)))
    else:
        echo(doctor.summary())
    return 0 if doctor.healthy else 1


def _run(doctor: Doctor, found: Found) -> None:
    doctor.check("configuration", lambda: _configuration(found))
    settings = found.settings
    if settings is None:
        for name in ("signing key", *SERVICE_CHECKS, "agents"):
            doctor.skip(name, "the configuration cannot be read")
        return
    _resolve(found, settings)
    if found.stack_down is not None:
        doctor.skip("signing key", "the local stack is not running")  # its key is in the stack
    else:
        doctor.check("signing key", lambda: _signing_key(found, settings))
    services = found.services
    if services is not None:
        _service_checks(doctor, found, services)
    elif found.stack_down is not None:
        doctor.fail("postgres", found.stack_down)
        for name in SERVICE_CHECKS[1:]:
            doctor.skip(name, "the local stack is not running")
    else:
        for name in SERVICE_CHECKS:
            doctor.skip(name, "only one of RUNWRIGHT_DATABASE_URL and RUNWRIGHT_REDIS_URL is set")
    doctor.check("agents", lambda: _agents(settings))


SERVICE_CHECKS = ("postgres", "schema", "redis", "broker", "beat", "workers", "agents served")


def _service_checks(doctor: Doctor, found: Found, services: Settings) -> None:
    schema_ok = False
    if doctor.check("postgres", lambda: _postgres(found, services)):
        schema_ok = doctor.check("schema", lambda: _schema(found))
    else:
        doctor.skip("schema", "Postgres is unreachable")
    redis_up = doctor.check("redis", lambda: _redis(found, services))
    if not redis_up and _same_server(services.broker, services.redis_url or ""):
        doctor.skip("broker", "the broker is the Redis server that is unreachable")
    else:
        doctor.check("broker", lambda: _broker(services))
    if redis_up:
        doctor.check("beat", lambda: _beat(found, services))
        workers_up = doctor.check("workers", lambda: _workers(found))
    else:
        doctor.skip("beat", "Redis is unreachable")
        doctor.skip("workers", "Redis is unreachable")
        workers_up = False
    if found.postgres is None:
        doctor.skip("agents served", "Postgres is unreachable")
    elif not schema_ok:
        doctor.skip("agents served", "the schema is not this code's")
    elif not redis_up:
        doctor.skip("agents served", "Redis is unreachable")
    elif not workers_up:
        doctor.skip("agents served", "no live worker to ask")
    else:
        doctor.check("agents served", lambda: _served(found))


class Doctor:
    """Prints the lines, keeps each check's result and counts what failed."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo = echo
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.results: list[tuple[str, str, str]] = []  # name, ok|FAIL|skipped, detail

    @property
    def healthy(self) -> bool:
        return self.failed == 0 and self.skipped == 0

    def check(self, name: str, probe: Callable[[], str]) -> bool:
        """Run ``probe`` (bounded); its result is the ``ok`` line's detail."""
        try:
            detail = _bounded(probe, CHECK_SECONDS)
        except Exception as exc:
            self.fail(name, _reason(exc))
            return False
        self.passed += 1
        self._line(name, "ok", detail)
        return True

    def fail(self, name: str, reason: str) -> None:
        self.failed += 1
        self._line(name, "FAIL", reason)

    def skip(self, name: str, why: str) -> None:
        self.skipped += 1
        self._line(name, "skipped", why)

    def summary(self) -> str:
        if self.healthy:
            return f"all {self.passed} checks passed"
        skipped = f", {self.skipped} skipped" if self.skipped else ""
        return f"{self.failed} failed{skipped}, {self.passed} passed"

    def _line(self, name: str, state: str, text: str) -> None:
        if len(text) > REASON_CHARS:
            text = text[: REASON_CHARS - 3] + "..."
        self.results.append((name, state, text))
        shown = "skipped:" if state == "skipped" else state
        self.echo(inert(f"{name:<{NAME_WIDTH}} {shown:<5} {text}".rstrip()))


def _bounded(probe: Callable[[], str], seconds: float) -> str:
    """``probe()``, or :class:`Problem` if it has not returned after ``seconds``.
    A probe that hangs is left behind on a daemon thread: the command ends anyway."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append((True, probe()))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=target, name="runwright-doctor", daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        raise Problem(f"no answer after {seconds:g} s")
    done, value = outcome[0]
    if done:
        return str(value)
    if isinstance(value, Exception):
        raise value
    # SystemExit or the like, from an agent module's import: a failed check,
    # not the end of the command.
    raise Problem(f"{type(value).__name__}: {value}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RunwrightError):
        return exc.message
    # Driver errors: their first line says what happened.
    text = " ".join(str(exc).split("\n", 1)[0].split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def _safe_url(url: str) -> str:
    """``url`` without its password."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rpartition("@")[2]
        user = f"{parts.username}:***@" if parts.username else ":***@"
        return urlunsplit(parts._replace(netloc=user + netloc))
    except ValueError:
        return "(a URL that does not parse)"


def _same_server(a: str, b: str) -> bool:
    try:
        one, two = urlsplit(a), urlsplit(b)
        return (one.hostname, one.port) == (two.hostname, two.port) and one.scheme.startswith(
            "redis"
        )
    except ValueError:
        return False


# ------------------------------------------------------------------ checks


def _configuration(found: Found) -> str:
    found.settings = Settings.from_env()
    found.settings.check()
    if found.settings.uses_local_stack:
        return f"the local stack under {found.settings.home}"
    return "RUNWRIGHT_DATABASE_URL and RUNWRIGHT_REDIS_URL"


def _resolve(found: Found, settings: Settings) -> None:
    """The services' URLs: the local stack's if none are set (never starting it)."""
    if settings.uses_local_stack:
        from runner.settings import resolve

        try:
            found.services = resolve(settings, start=False)
        except ConfigurationError as exc:
            found.stack_down = exc.message
    elif settings.database_url is not None and settings.redis_url is not None:
        found.services = settings


def _signing_key(found: Found, settings: Settings) -> str:
    from runner.approvals.approval_tokens import Tokens

    key = (found.services or settings).secret_key
    if not (key or "").strip():
        raise Problem(
            "RUNWRIGHT_SECRET_KEY is not set: every process must sign and check approval "
            "tokens with the same key"
        )
    tokens = Tokens.parse(key)
    return f"new approvals are signed with key {tokens.current_id!r}"


def _postgres(found: Found, services: Settings) -> str:
    import psycopg2

    from store.summary import libpq_url

    assert services.database_url is not None
    # No statement_timeout in the startup options: PgBouncer refuses those, and
    # the queries here are trivial (the check's own bound covers a stall).
    found.postgres = psycopg2.connect(
        libpq_url(services.database_url), connect_timeout=int(CONNECT_SECONDS)
    )
    found.postgres.autocommit = True
    with found.postgres.cursor() as cursor:
        cursor.execute("SELECT 1")
    return _safe_url(services.database_url)


def _schema(found: Found) -> str:
    from store.revision import HEAD, current_revision, require_revision

    with found.postgres.cursor() as cursor:

        def scalar(query: str) -> object:
            cursor.execute(query)
            row = cursor.fetchone()
            return None if row is None else row[0]

        require_revision(current_revision(scalar))
    return f"at revision {HEAD}"


def _redis(found: Found, services: Settings) -> str:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    assert services.redis_url is not None
    client = redis.Redis.from_url(
        services.redis_url,
        socket_timeout=CONNECT_SECONDS,
        socket_connect_timeout=CONNECT_SECONDS,
        retry_on_timeout=False,
        retry=Retry(NoBackoff(), 0),  # one attempt: a Redis that is down fails at once
    )
    try:
        client.ping()
    except Exception:
        client.close()
        raise
    found.redis = client
    return _safe_url(services.redis_url)


def _broker(services: Settings) -> str:
    from kombu import connection

    url = services.broker
    options = {"socket_timeout": CONNECT_SECONDS, "socket_connect_timeout": CONNECT_SECONDS}
    conn: Any = connection.Connection(  # type: ignore[no-untyped-call]
        url, connect_timeout=CONNECT_SECONDS, transport_options=options
    )
    with conn:
        conn.ensure_connection(max_retries=1, interval_start=0, timeout=CONNECT_SECONDS)
    return _safe_url(url)


def _beat(found: Found, services: Settings) -> str:
    from runner.engine.watchdog import STALE_INTERVALS, WITHOUT_BEAT, age_text
    from store.leases import Leases

    last = Leases(found.redis).last_tick()
    every = f"{services.tick_seconds:g} s"
    if last is None:
        # A Redis restart loses its mark; tick() keeps one in Postgres too.
        last = _stored_last_tick(found)
    if last is None:
        raise Problem(
            "tick() has never run (neither Redis nor Postgres has a mark of a tick): is "
            f"celery beat running? Without it, {WITHOUT_BEAT}"
        )
    age = time.time() - last
    if age > STALE_INTERVALS * services.tick_seconds:
        raise Problem(
            f"tick() last ran {age_text(age)} ago, more than {STALE_INTERVALS} intervals of "
            f"{every}: is celery beat running? Without it, {WITHOUT_BEAT}"
        )
    return f"tick() last ran {age_text(age)} ago (every {every})"


def _stored_last_tick(found: Found) -> float | None:
    """When tick() last finished by the mark Postgres keeps (epoch seconds);
    None if it has none. :class:`Problem` if it cannot be read: then whether
    tick() ever ran is unknown, and doctor says so rather than "never"."""
    from store.pg.maintenance import LAST_TICK

    unknown = "when tick() last ran is unknown: Redis has no mark of it (a restart loses it) and "
    if found.postgres is None:
        raise Problem(unknown + "Postgres, which keeps one too, is unreachable")
    try:
        with found.postgres.cursor() as cursor:
            cursor.execute(LAST_TICK.pyformat, {})
            row = cursor.fetchone()
    except Exception as exc:  # a driver error, e.g. a schema from before the mark
        raise Problem(unknown + f"Postgres's could not be read ({_reason(exc)})") from exc
    return None if row is None else float(row[0].timestamp())


def _workers(found: Found) -> str:
    from store.leases import Leases

    seen = Leases(found.redis).workers()
    if not seen:
        raise Problem(
            "no worker has been seen lately: start one (celery -A tasks worker) with these settings"
        )
    names = sorted(seen)
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return f"{len(names)} seen: {', '.join(names[:5])}{more}"


def _served(found: Found) -> str:
    """Every agent with runs not settled, or started within :data:`RECENT_SECONDS`,
    is loaded by a live worker (store/workers.py): else its runs wait for
    nobody (and fail after RUNWRIGHT_AGENT_GRACE_SECONDS)."""
    from store.leases import Leases
    from store.summary import agents_in_use
    from store.workers import unserved

    in_use = agents_in_use(found.postgres, int((time.time() - RECENT_SECONDS) * 1000))
    workers = Leases(found.redis).workers()
    missing = unserved(workers, [row["agent"] for row in in_use])
    if missing:
        waiting = {row["agent"]: row["waiting_for_worker"] for row in in_use}
        named = "; ".join(
            f"no live worker has agent {agent!r} ({waiting[agent]} run(s) wait for one)"
            for agent in missing
        )
        raise Problem(
            f"{named}: start a worker whose RUNWRIGHT_AGENTS names its module "
            "(runwright workers lists what each serves)"
        )
    if not in_use:
        return "no agent has open or recent runs"
    return f"each of the {len(in_use)} agent(s) with open or recent runs has a live worker"


def _agents(settings: Settings) -> str:
    from runner.agent import registry

    if not settings.agents:
        raise Problem("RUNWRIGHT_AGENTS is empty: workers would know no agent")
    for module in settings.agents:
        try:
            registry.load([module])
        except ConfigurationError:
            raise
        except (Exception, SystemExit) as exc:
            raise Problem(f"agent module {module!r} fails on import: {_reason(exc)}") from exc
    count = len(registry.names())
    return f"{count} agent(s) from {', '.join(settings.agents)}"
