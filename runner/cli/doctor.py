"""``runwright doctor``: can this set-up run agents? One line per check.

Each check says ``ok`` (and what it found), ``FAIL`` (and why), or ``skipped``
when something it needs already failed, so one broken thing reads as one
failure, not as a cascade. Every check is bounded: the drivers get short
timeouts, and a check that still has no answer after :data:`CHECK_SECONDS` fails
with that. The command exits 0 only if every check passed.

It checks the environment it runs in: run it with the workers' settings.
The Celery app it checks is the one ``-A`` names, found as ``celery -A`` finds
it (a module, ``module:attribute``, or a package with a ``celery`` module), or
Runwright's own (``tasks``): its broker, result backend, the routes and
options of Runwright's tasks, and which workers take Runwright's queue.
With ``--json`` it prints the same checks as one JSON document instead
(runner/cli/as_json.py), with the same exit status.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import click

from runner import version
from runner.cli.terminal import inert
from runner.core.settings import Settings
from store.errors import ConfigurationError, RunwrightError

# What a driver may wait for a connection or an answer.
CONNECT_SECONDS = 2.0
# What one check may take in all (an agent module may be slow to import).
CHECK_SECONDS = 15.0
# What Celery's inspect waits for the workers' replies.
INSPECT_SECONDS = 1.0
# A line's bound. What the checks compose fits in it whole (of the agents no
# worker has and the failing tools, the most pressing are named and the rest
# counted); only a driver's message may be cut.
REASON_CHARS = 500
# Runs started this recently count as the agent's being in use, ended or not.
RECENT_SECONDS = 3600.0
NAME_WIDTH = 14
# Runwright's own Celery app, checked unless -A names another.
DEFAULT_APP = "tasks"
# A tool is reported when it failed in more than half of its calls within the
# window, if it was called this often (fewer calls say little).
TOOL_WINDOW = timedelta(hours=1)
TOOL_WINDOW_TEXT = "the last hour"
TOOL_MIN_CALLS = 5
# Of the agents no live worker has, or the failing tools, at most this many
# are named (the others are counted): the most pressing first.
NAMED = 3


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
    app_name: str = DEFAULT_APP  # as -A names it
    app: Any = None  # the Celery app, once loaded
    installed: bool = False  # whether the app installed Runwright
    config_ok: bool = False  # whether the configuration check passed


def run_checks(
    echo: Callable[[str], None] = click.echo, *, as_json: bool = False, app: str | None = None
) -> int:
    """Run every check, print a line for each (or, ``as_json``, one document
    of them all); the exit status (0: all passed). ``app`` names the Celery
    app as ``celery -A`` does (default: Runwright's own)."""
    found = Found(app_name=app or DEFAULT_APP)
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

        echo(dumps(doctor_json(doctor.results, doctor.healthy, version())))
    else:
        echo(f"{doctor.summary()} (runwright {version() or 'from a source tree'})")
    return 0 if doctor.healthy else 1


def _run(doctor: Doctor, found: Found) -> None:
    found.config_ok = doctor.check("configuration", lambda: _configuration(found))
    settings = found.settings
    if settings is None:
        for name in ("signing key", *SERVICE_CHECKS, "agents", "model limits"):
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
    # After the agents: their modules declare limits in code.
    if found.redis is not None:
        doctor.check("model limits", lambda: _model_limits(found, settings))
    elif services is not None:
        doctor.skip("model limits", "Redis is unreachable")
    else:
        doctor.skip("model limits", "Redis is not known")


# The checks of the Celery app that follow its own ("celery app").
APP_CHECKS = ("broker", "result backend", "routes", "task options")
SERVICE_CHECKS = (
    "postgres",
    "schema",
    "redis",
    "celery app",
    *APP_CHECKS,
    "beat",
    "workers",
    "consumers",
    "agents served",
    "tools",
)


def _service_checks(doctor: Doctor, found: Found, services: Settings) -> None:
    schema_ok = False
    if doctor.check("postgres", lambda: _postgres(found, services)):
        schema_ok = doctor.check("schema", lambda: _schema(found))
    else:
        doctor.skip("schema", "Postgres is unreachable")
    redis_up = doctor.check("redis", lambda: _redis(found, services))
    broker_up = _app_checks(doctor, found, services, redis_up)
    if redis_up:
        doctor.check("beat", lambda: _beat(found, services))
        workers_up = doctor.check("workers", lambda: _workers(found, services))
    else:
        doctor.skip("beat", "Redis is unreachable")
        doctor.skip("workers", "Redis is unreachable")
        workers_up = False
    if found.app is None:
        doctor.skip("consumers", "the Celery app cannot be loaded")
    elif not found.installed:
        doctor.skip("consumers", "Runwright is not installed on the Celery app")
    elif not broker_up:
        doctor.skip("consumers", "the broker is unreachable")
    else:
        doctor.check("consumers", lambda: _consumers(found, services))
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
    if found.postgres is None:
        doctor.skip("tools", "Postgres is unreachable")
    elif not schema_ok:
        doctor.skip("tools", "the schema is not this code's")
    else:
        doctor.check("tools", lambda: _tools(found))


def _app_checks(doctor: Doctor, found: Found, services: Settings, redis_up: bool) -> bool:
    """The Celery app's checks; whether its broker answered."""
    if not found.config_ok and found.app_name == DEFAULT_APP:
        # Runwright's preset (celeryconfig.py) stops on what failed already.
        doctor.skip("celery app", "the configuration is not valid, and Runwright's app needs it")
    else:
        doctor.check("celery app", lambda: _celery_app(found))
    app = found.app
    if app is None:
        for name in APP_CHECKS:
            doctor.skip(name, "the Celery app cannot be loaded")
        return False
    url = _broker_url(app)
    if not redis_up and _same_server(url, services.redis_url or ""):
        doctor.skip("broker", "the broker is the Redis server that is unreachable")
        broker_up = False
    else:
        broker_up = doctor.check("broker", lambda: _broker(app))
    doctor.check("result backend", lambda: _result_backend(app))
    if found.installed:
        doctor.check("routes", lambda: _routes(app, services.queue))
        doctor.check("task options", lambda: _task_options(app))
    else:
        doctor.skip("routes", "Runwright is not installed on the Celery app")
        doctor.skip("task options", "Runwright is not installed on the Celery app")
    return broker_up


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


def _safe_urls(url: object) -> str:
    """A broker's URL, or its failover list (``;``-separated or a list),
    without passwords."""
    items = url if isinstance(url, list | tuple) else str(url).split(";")
    return ";".join(_safe_url(str(item).strip()) for item in items)


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
        from runner.core.settings import resolve

        try:
            found.services = resolve(settings, start=False)
        except ConfigurationError as exc:
            found.stack_down = exc.message
    elif settings.database_url is not None and settings.redis_url is not None:
        found.services = settings


def _signing_key(found: Found, settings: Settings) -> str:
    from runner.core.approvals.approval_tokens import Tokens

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


def _redis_client(url: str) -> Any:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(
        url,
        socket_timeout=CONNECT_SECONDS,
        socket_connect_timeout=CONNECT_SECONDS,
        retry_on_timeout=False,
        retry=Retry(NoBackoff(), 0),  # one attempt: a Redis that is down fails at once
    )


def _redis(found: Found, services: Settings) -> str:
    assert services.redis_url is not None
    client = _redis_client(services.redis_url)
    try:
        client.ping()
    except Exception:
        client.close()
        raise
    found.redis = client
    return _safe_url(services.redis_url)


def celery_app(name: str) -> Any:
    """The Celery app ``name`` names, found as ``celery -A name`` finds it
    (Celery's own lookup, from the current folder): a module and its ``app``
    or ``celery``, ``module:attribute``, or a package's ``celery`` module.
    :class:`Problem` if it cannot be loaded."""
    from celery import Celery
    from celery.app.utils import find_app

    try:
        app = find_app(name)
        if isinstance(app, Celery):
            app.conf.broker_url  # noqa: B018  (loads a lazy configuration, which may stop)
    except (Exception, SystemExit) as exc:  # the project's import: a failed check
        raise Problem(f"cannot load the Celery app {name!r}: {_reason(exc)}") from exc
    if not isinstance(app, Celery):
        raise Problem(f"{name!r} names a {type(app).__name__}, not a Celery app")
    return app


def _celery_app(found: Found) -> str:
    name = found.app_name
    found.app = app = celery_app(name)
    # An app that installed Runwright imported runner.celery to do it.
    module = sys.modules.get("runner.celery")
    found.installed = module is not None and bool(module.installed(app))
    if not found.installed:
        from runner.core.layout import require_runwright_app

        try:  # a tasks.py of the project's own, in Runwright's place
            require_runwright_app(name, installed=False)
        except SystemExit as exc:
            raise Problem(str(exc.code).removeprefix("runwright: ")) from None
        raise Problem(
            f"{name}: Runwright is not installed on the Celery app {app.main!r}; call "
            "runner.celery.install(app) where it is created (docs/celery.md)"
        )
    return f"{name}: the Celery app {app.main!r}, with Runwright installed"


def _broker_url(app: Any) -> str:
    """The URL the app sends with (its ``broker_url``, which Celery reads
    from ``CELERY_BROKER_URL`` first), without passwords."""
    url = app.conf.broker_write_url or app.conf.broker_url
    if not url:
        with app.connection_for_write() as conn:  # Celery's default broker
            return str(conn.as_uri())
    return _safe_urls(url)


def _connection(app: Any) -> Any:
    """A connection to the app's broker (its transport and options) with
    short timeouts, connected; :class:`Problem` naming the URL if it cannot be."""
    options = {"socket_timeout": CONNECT_SECONDS, "socket_connect_timeout": CONNECT_SECONDS}
    conn = app.connection_for_write(connect_timeout=CONNECT_SECONDS, transport_options=options)
    try:
        conn.ensure_connection(max_retries=1, interval_start=0, timeout=CONNECT_SECONDS)
    except Exception as exc:
        conn.release()
        raise Problem(
            f"cannot reach {_broker_url(app)}, the broker of the Celery app {app.main!r}: "
            f"{_reason(exc)}"
        ) from exc
    return conn


def _broker(app: Any) -> str:
    _connection(app).release()
    return f"{_broker_url(app)}, the broker of the Celery app {app.main!r}"


def _result_backend(app: Any) -> str:
    """Runwright's tasks store no results; the app's own tasks may, so a Redis
    backend must answer. Other backends are named, not connected to."""
    backend = app.conf.result_backend
    if not backend or str(backend).partition(":")[0] == "disabled":
        return "none (Runwright's tasks store no results)"
    url = str(backend)
    shown = _safe_url(url)
    if url.partition("://")[0].lower() not in ("redis", "rediss"):
        return f"{shown} (not connected to: Runwright's tasks store no results)"
    client = _redis_client(url)
    try:
        client.ping()
    except Exception as exc:
        raise Problem(f"cannot reach {shown}, the app's result_backend: {_reason(exc)}") from exc
    finally:
        client.close()
    return f"{shown} answered (Runwright's tasks store no results)"


def _routes(app: Any, queue: str) -> str:
    """Where the app sends Runwright's two tasks: to the queue its workers
    take (RUNWRIGHT_QUEUE), unless the app's routes were replaced after
    install or the queue is not declared where it must be."""
    from runner.celery import EXECUTE, TICK

    astray = []
    for task in (EXECUTE, TICK):
        try:
            route = app.amqp.router.route({}, task)
        except Exception as exc:  # QueueNotFound: task_create_missing_queues is off
            raise Problem(
                f"{task} cannot be routed to queue {queue!r}: {_reason(exc)}; declare the "
                "queue in the app's task_queues (docs/celery.md)"
            ) from exc
        found = route.get("queue")
        name = getattr(found, "name", found)
        if name != queue:
            astray.append(f"{task} goes to queue {name!r}")
    if astray:
        raise Problem(
            f"{' and '.join(astray)}, not to Runwright's queue {queue!r} (RUNWRIGHT_QUEUE): "
            "call runner.celery.install(app) after the app's task_routes are set"
        )
    return f"{EXECUTE} and {TICK} go to queue {queue!r}"


def _task_options(app: Any) -> str:
    """What a worker of the app does with Runwright's messages: it must
    accept their serializer and ack them late; prefetching one per thread
    spreads runs over the workers."""
    from kombu.serialization import prepare_accept_content, registry

    from runner.celery import EXECUTE

    task = app.tasks[EXECUTE]
    serializer = task.serializer or app.conf.task_serializer
    accepted = prepare_accept_content(app.conf.accept_content)  # type: ignore[no-untyped-call]
    if registry.name_to_type.get(serializer, serializer) not in accepted:
        raise Problem(
            f"{EXECUTE} is sent as {serializer}, which the app's accept_content "
            f"({', '.join(sorted(accepted))}) refuses: its workers would refuse every run; "
            f"add {serializer!r} to accept_content"
        )
    if not task.acks_late or not task.reject_on_worker_lost:
        raise Problem(
            f"{EXECUTE} has acks_late={task.acks_late} and reject_on_worker_lost="
            f"{task.reject_on_worker_lost}: a worker that dies loses its runs' messages "
            "until tick() sends them again; leave both as runner.celery.install sets them"
        )
    prefetch = app.conf.worker_prefetch_multiplier
    advice = "" if prefetch == 1 else " (start Runwright's workers with --prefetch-multiplier 1)"
    return (
        f"{EXECUTE} is sent as {serializer}, which the app accepts; acked late, rejected if "
        f"its worker is lost; worker_prefetch_multiplier {prefetch}{advice}"
    )


def _consumers(found: Found, services: Settings) -> str:
    """Whether a live worker takes Runwright's queue, by Celery's inspect
    (each worker's active queues), else its runs wait for none."""
    app, queue = found.app, services.queue
    start = f"celery -A {found.app_name} worker -Q {queue} -P threads --prefetch-multiplier 1"
    if not app.conf.worker_enable_remote_control:
        return _consumers_by_records(found, queue, start)
    conn = _connection(app)
    try:
        replies = app.control.inspect(timeout=INSPECT_SECONDS, connection=conn).active_queues()
        replies = replies if isinstance(replies, dict) else {}
        takers = sorted(w for w, queues in replies.items() if queue in _queue_names(queues))
        if not takers:
            answered = sorted(replies)
            others = ", ".join(
                f"{w} takes {', '.join(sorted(_queue_names(replies[w]))) or 'none'}"
                for w in answered[:NAMED]
            )
            more = f" and {len(answered) - NAMED} more" if len(answered) > NAMED else ""
            who = (
                f"{len(answered)} worker(s) answered: {others}{more}"
                if answered
                else f"no worker answered Celery's inspect within {INSPECT_SECONDS:g} s"
            )
            raise Problem(
                f"no worker takes queue {queue!r}, and runs wait for one ({who}): start one "
                f"({start}), or add the queue to a worker's -Q"
            )
        stats = app.control.inspect(
            timeout=INSPECT_SECONDS, connection=conn, destination=takers, limit=len(takers)
        ).stats()
        stats = stats if isinstance(stats, dict) else {}
    finally:
        conn.release()
    shown = [_taker(name, stats.get(name)) for name in takers]
    more = f" and {len(shown) - 5} more" if len(shown) > 5 else ""
    text = f"{len(takers)} worker(s) take queue {queue!r}: {', '.join(shown[:5])}{more}"
    if any(_prefetches_more(stats.get(name)) for name in takers):
        text += "; start them with --prefetch-multiplier 1, so that runs spread over the workers"
    return text


def _consumers_by_records(found: Found, queue: str, start: str) -> str:
    # Remote control is off: no worker answers inspect; Runwright's workers
    # write their queues in their records (store/workers.py).
    from runner.core.coordination.leases import Leases

    if found.redis is None:
        raise Problem("the app's workers do not answer inspect, and Redis is unreachable")
    takers = sorted(w.name for w in Leases(found.redis).workers().values() if queue in w.queues)
    if not takers:
        raise Problem(f"no live worker's record says it takes queue {queue!r}: start one ({start})")
    return f"{len(takers)} worker(s) take queue {queue!r} by their records: {', '.join(takers[:5])}"


def _queue_names(queues: object) -> set[str]:
    """The queue names in a worker's reply to ``active_queues``."""
    if not isinstance(queues, list):
        return set()
    return {str(q.get("name")) for q in queues if isinstance(q, dict) and q.get("name")}


def _pool_size(stats: object) -> int | None:
    pool = stats.get("pool") if isinstance(stats, dict) else None
    size = pool.get("max-concurrency") if isinstance(pool, dict) else None
    return size if isinstance(size, int) else None


def _taker(name: str, stats: object) -> str:
    prefetch = stats.get("prefetch_count") if isinstance(stats, dict) else None
    size = _pool_size(stats)
    if not isinstance(prefetch, int) or size is None:
        return name
    return f"{name} ({size} threads, prefetch {prefetch})"


def _prefetches_more(stats: object) -> bool:
    prefetch = stats.get("prefetch_count") if isinstance(stats, dict) else None
    size = _pool_size(stats)
    return isinstance(prefetch, int) and size is not None and prefetch > size


def _beat(found: Found, services: Settings) -> str:
    from runner.core.coordination.leases import Leases
    from runner.core.engine.watchdog import STALE_INTERVALS, WITHOUT_BEAT, age_text

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


def _workers(found: Found, services: Settings) -> str:
    from runner.core.coordination.leases import Leases

    seen = Leases(found.redis).workers()
    if not seen:
        raise Problem(
            f"no worker has been seen lately: start one (celery -A {found.app_name} worker -Q "
            f"{services.queue} -P threads) with these settings"
        )
    names = sorted(seen)
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return f"{len(names)} seen: {', '.join(names[:5])}{more}"


def _served(found: Found) -> str:
    """Every agent with runs not ended, or started within :data:`RECENT_SECONDS`,
    is loaded by a live worker (store/workers.py): else its runs wait for
    nobody (and fail after RUNWRIGHT_AGENT_GRACE_SECONDS)."""
    from runner.core.coordination.leases import Leases
    from store.summary import agents_in_use
    from store.workers import unserved

    in_use = agents_in_use(found.postgres, int((time.time() - RECENT_SECONDS) * 1000))
    workers = Leases(found.redis).workers()
    missing = unserved(workers, [row["agent"] for row in in_use])
    if missing:
        waiting = {row["agent"]: int(row["waiting_for_worker"] or 0) for row in in_use}
        raise Problem(unserved_reason(missing, waiting))
    if not in_use:
        return "no agent has open or recent runs"
    return f"each of the {len(in_use)} agent(s) with open or recent runs has a live worker"


def _fitting(compose: Callable[[int], str], candidates: int) -> str:
    """``compose(n)`` for the most ``n`` (1 to ``candidates``, at most
    :data:`NAMED`) whose text fits in :data:`REASON_CHARS`; ``compose(1)``
    whatever its length."""
    text = compose(1)
    for count in range(2, min(candidates, NAMED) + 1):
        longer = compose(count)
        if len(longer) > REASON_CHARS:
            break
        text = longer
    return text


def unserved_reason(missing: list[str], waiting: Mapping[str, int]) -> str:
    """Why "agents served" fails: the agents no live worker has, those whose
    runs wait for one first (the most runs first), as many named as fit in a
    line and the rest counted, so that the line never loses the one that
    matters to the cut."""
    ordered = sorted(missing, key=lambda agent: (-waiting.get(agent, 0), agent))
    modules = "its module" if len(missing) == 1 else "their modules"

    def compose(count: int) -> str:
        first, *also = ordered[:count]
        text = f"no live worker has agent {first!r} ({waiting.get(first, 0)} run(s) wait for one)"
        text += "".join(f", nor agent {a!r} ({waiting.get(a, 0)} run(s))" for a in also)
        rest = ordered[count:]
        if rest:
            runs = sum(waiting.get(agent, 0) for agent in rest)
            text += f", nor {len(rest)} other agent(s) with open or recent runs " + (
                f"({runs} run(s) wait for them)" if runs else "(none of their runs waits)"
            )
        return (
            f"{text}: start a worker whose RUNWRIGHT_AGENTS names {modules} "
            "(runwright workers lists what each serves)"
        )

    # Only agents whose runs wait are named after the first.
    return _fitting(compose, max(1, sum(1 for agent in ordered if waiting.get(agent))))


def failing_reason(failing: list[Mapping[str, Any]]) -> str:
    """Why "tools" fails: the failing tools (``FAILING_TOOLS``' rows, the
    most failures first), the first with its counts, window and last error,
    as many others named as fit in a line and the rest counted."""
    from runner.cli.step_lines import clip
    from store.sealing import key_of

    first = failing[0]
    error = clip(" ".join(str(first["last_error"]).split()), 100)
    if key_of(first["last_error"]) is not None:
        error = "sealed by encryption at rest"

    def compose(count: int) -> str:
        text = (
            f"tool {first['tool']!r} of agent {first['agent']!r} failed {first['failures']} of "
            f"its {first['calls']} calls in {TOOL_WINDOW_TEXT} (last error: {error})"
        )
        also = [
            f"{row['tool']!r} of agent {row['agent']!r} ({row['failures']} of {row['calls']})"
            for row in failing[1:count]
        ]
        rest = len(failing) - count
        if also:
            text += f"; also {', '.join(also)}"
        if rest:
            text += f"; {'and ' if also else ''}{rest} other tool(s) failing most of their calls"
        return f"{text}: runwright show RUN prints each call's error"

    return _fitting(compose, len(failing))


def _tools(found: Found) -> str:
    """The tools that failed in more than half of their calls lately
    (``FAILING_TOOLS``, store/pg/observe.py), by agent and tool."""
    import psycopg2.extras

    from store.pg.observe import FAILING_TOOLS

    since = datetime.now(UTC) - TOOL_WINDOW
    with found.postgres.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cursor:
        cursor.execute(FAILING_TOOLS.pyformat, {"since": since, "min_calls": TOOL_MIN_CALLS})
        failing = cursor.fetchall()
    if not failing:
        return (
            f"no tool failed more than half of its {TOOL_MIN_CALLS} or more calls in "
            f"{TOOL_WINDOW_TEXT}"
        )
    raise Problem(failing_reason(failing))


def _model_limits(found: Found, settings: Settings) -> str:
    """No model whose provider answered 429 in the last day (noted in Redis by
    the executions, runner/core/limits/admission.py) is without a limit in
    force: without one, every process keeps calling it at its own pace."""
    from runner.core.limits import configured
    from runner.core.limits.admission import throttled_models

    seen = throttled_models(found.redis)
    in_force = configured(settings.model_limits)
    bare = [model for model in seen if in_force.for_model(model) is None]
    if bare:
        raise Problem(throttled_reason(bare, seen))
    if not seen:
        return "no provider answered 429 in the last day"
    return f"the {len(seen)} model(s) answered 429 in the last day each have a limit in force"


def throttled_reason(bare: list[str], seen: Mapping[str, float]) -> str:
    """Why "model limits" fails: the models that saw 429s and have no limit,
    the latest first, as many named as fit in a line and the rest counted."""
    ordered = sorted(bare, key=lambda model: (-seen[model], model))
    first = ordered[0]
    last = datetime.fromtimestamp(seen[first], UTC)

    def compose(count: int) -> str:
        text = (
            f"model {first!r} was answered 429 in the last day (last at {last:%Y-%m-%d %H:%M} "
            "UTC) and has no limit in force"
        )
        text += "".join(f", nor {model!r}" for model in ordered[1:count])
        rest = len(ordered) - count
        if rest:
            text += f", nor {rest} other model(s) answered 429"
        example = f'{{"{first}": {{"rpm": ..., "tpm": ...}}}}'
        return (
            f"{text}: set RUNWRIGHT_MODEL_LIMITS (e.g. '{example}') to its provider's limits, "
            "or declare them in code (runner.core.limits.register)"
        )

    return _fitting(compose, len(ordered))


def _agents(settings: Settings) -> str:
    from runner.core.agent import registry

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
