"""Settings from the environment.

Unset ``RUNWRIGHT_DATABASE_URL`` and ``RUNWRIGHT_REDIS_URL`` mean the local
stack (``store/local.py``): a real Postgres and Redis under ``./.runwright/``.
"""

from __future__ import annotations

import math
import os
import typing
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.core.redaction import builtin_names
from store.errors import ConfigurationError, InvalidInput
from store.validate import DEFAULT_MAX_PAYLOAD_BYTES

if TYPE_CHECKING:
    from runner.core.keyring import KeyRing
    from store.postgres import PostgresStore
# RUNWRIGHT_MAX_RETRY_AFTER_SECONDS at most: a retry time must stay a date
# Python and Postgres hold, and a year is already past any provider's reason.
MAX_RETRY_AFTER_LIMIT = 366 * 86400
LOG_FORMATS = ("text", "json")


def _parse(item: Field[Any], kind: Any, raw: str) -> Any:
    name = item.metadata["env"]
    if kind in (str, str | None):
        return raw
    if kind is bool:
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigurationError(f"{name} must be true or false, not {raw[:40]!r}")
    if kind in (Path, Path | None):
        return Path(raw)
    if kind == tuple[str, ...]:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    number = int if kind in (int, int | None) else float
    try:
        value = number(raw)
    except ValueError:
        what = "a whole number" if number is int else "a number"
        raise ConfigurationError(f"{name} must be {what}, not {raw[:40]!r}") from None
    if not math.isfinite(value):
        raise ConfigurationError(f"{name} must be finite, not {raw[:40]!r}")
    minimum = item.metadata["minimum"]
    if minimum is not None and value < minimum:
        raise ConfigurationError(f"{name} must be at least {minimum}, not {raw[:40]!r}")
    maximum = item.metadata.get("maximum")
    if maximum is not None and value > maximum:
        raise ConfigurationError(f"{name} must be at most {maximum}, not {raw[:40]!r}")
    return value


def _setting(
    env: str,
    default: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    secret: bool = False,
) -> Any:
    """A field read from the environment variable ``env``; a ``secret`` one is
    left out of the settings' repr."""
    meta = {"env": env, "minimum": minimum, "maximum": maximum}
    if isinstance(default, Path):
        return field(default_factory=lambda: default, metadata=meta)
    return field(default=default, metadata=meta, repr=not secret)


@dataclass(frozen=True)
class Settings:
    """Every ``RUNWRIGHT_*`` variable, parsed and checked in one place.

    Nothing else reads the environment; the README's configuration table lists
    exactly these (a test compares them)."""

    database_url: str | None = _setting("RUNWRIGHT_DATABASE_URL", None)
    redis_url: str | None = _setting("RUNWRIGHT_REDIS_URL", None)
    broker_url: str | None = _setting("RUNWRIGHT_BROKER_URL", None)
    agents: tuple[str, ...] = _setting("RUNWRIGHT_AGENTS", ())
    secret_key: str | None = _setting("RUNWRIGHT_SECRET_KEY", None)
    lease_ttl_seconds: float = _setting("RUNWRIGHT_LEASE_TTL_SECONDS", 15.0, minimum=0.3)
    tick_seconds: float = _setting("RUNWRIGHT_TICK_SECONDS", 5.0, minimum=0.1)
    drain_seconds: float = _setting("RUNWRIGHT_DRAIN_SECONDS", 10.0, minimum=0)
    reenqueue_seconds: float = _setting("RUNWRIGHT_REENQUEUE_SECONDS", 30.0, minimum=0)
    # How long an execution waits out a Redis or Postgres outage (its claim, a
    # fenced write) before it gives up; a claim then hands its message back.
    store_wait_seconds: float = _setting("RUNWRIGHT_STORE_WAIT_SECONDS", 60.0, minimum=0)
    max_payload_bytes: int = _setting(
        "RUNWRIGHT_MAX_PAYLOAD_BYTES", DEFAULT_MAX_PAYLOAD_BYTES, minimum=1
    )
    notify_backoff_seconds: float = _setting("RUNWRIGHT_NOTIFY_BACKOFF_SECONDS", 5.0, minimum=0)
    notify_backoff_cap_seconds: float = _setting(
        "RUNWRIGHT_NOTIFY_BACKOFF_CAP_SECONDS", 600.0, minimum=0
    )
    approval_expires_seconds: float = _setting(
        "RUNWRIGHT_APPROVAL_EXPIRES_SECONDS", 86400.0, minimum=1
    )
    tick_batch: int = _setting("RUNWRIGHT_TICK_BATCH", 500, minimum=1)
    # How many levels of child runs a tree may have below its top-level run
    # (runner/core/children.py); an agent's max_child_depth wins.
    max_child_depth: int = _setting("RUNWRIGHT_MAX_CHILD_DEPTH", 16, minimum=0)
    max_takeovers: int = _setting("RUNWRIGHT_MAX_TAKEOVERS", 5, minimum=1)
    agent_grace_seconds: float = _setting("RUNWRIGHT_AGENT_GRACE_SECONDS", 600.0, minimum=0)
    # How often a pinned run that no live worker of its version takes is
    # looked at again (docs/deploying.md).
    version_recheck_seconds: float = _setting(
        "RUNWRIGHT_VERSION_RECHECK_SECONDS", 60.0, minimum=0.1
    )
    model_retries: int = _setting("RUNWRIGHT_MODEL_RETRIES", 3, minimum=0)
    model_backoff_seconds: float = _setting("RUNWRIGHT_MODEL_BACKOFF_SECONDS", 0.5, minimum=0)
    # Durable retries of a model call once the in-call ones are spent (runner/core/retry.py).
    retry_initial_seconds: float = _setting("RUNWRIGHT_RETRY_INITIAL_SECONDS", 1.0, minimum=0)
    retry_multiplier: float = _setting("RUNWRIGHT_RETRY_MULTIPLIER", 2.0, minimum=1)
    retry_max_backoff_seconds: float = _setting(
        "RUNWRIGHT_RETRY_MAX_BACKOFF_SECONDS", 60.0, minimum=0
    )
    retry_max_attempts: int = _setting("RUNWRIGHT_RETRY_MAX_ATTEMPTS", 20, minimum=1)
    retry_max_elapsed_seconds: float = _setting(
        "RUNWRIGHT_RETRY_MAX_ELAPSED_SECONDS", 1800.0, minimum=1
    )
    # The longest pause a provider's Retry-After may ask for; a longer ask
    # waits this long (if the retry policy allows): runner/core/retry.py.
    max_retry_after_seconds: float = _setting(
        "RUNWRIGHT_MAX_RETRY_AFTER_SECONDS", 86400.0, minimum=1, maximum=MAX_RETRY_AFTER_LIMIT
    )
    home: Path = _setting("RUNWRIGHT_HOME", Path(".runwright"))  # noqa: RUF009 (a field)
    enqueue: str = _setting("RUNWRIGHT_ENQUEUE", "tasks:enqueue")
    queue: str = _setting("RUNWRIGHT_QUEUE", "runwright")
    # A run's priority on the broker too (docs/flow-control.md): RabbitMQ's
    # x-max-priority queue, Redis's priority steps. Off: the broker's order.
    broker_priorities: bool = _setting("RUNWRIGHT_BROKER_PRIORITIES", False)
    # The project's Celery app that installed Runwright (runner.celery.install),
    # as `celery -A` names it: what doctor and worker-shape check without -A.
    celery_app: str | None = _setting("RUNWRIGHT_CELERY_APP", None)
    worker_pool: str = _setting("RUNWRIGHT_WORKER_POOL", "threads")
    worker_concurrency: int = _setting("RUNWRIGHT_WORKER_CONCURRENCY", 64, minimum=1)
    # AMQP heartbeats: RabbitMQ closes the connection of a worker it has not
    # heard from in about this long (a frozen process, a dead network path),
    # and hands its unacknowledged messages to another worker. 0 turns them off.
    broker_heartbeat_seconds: float = _setting(
        "RUNWRIGHT_BROKER_HEARTBEAT_SECONDS", 10.0, minimum=0
    )
    visibility_timeout_seconds: int = _setting("RUNWRIGHT_VISIBILITY_TIMEOUT", 12 * 3600, minimum=1)
    # Celery's task events from every worker all the time (and the task-sent
    # event from every enqueue). Off, a worker sends them while a monitor asks
    # for them, as Flower does by default: a busy worker saves three broker
    # round trips a run (docs/celery.md, "What Flower shows").
    task_events: bool = _setting("RUNWRIGHT_TASK_EVENTS", False)
    beat_schedule: Path | None = _setting("RUNWRIGHT_BEAT_SCHEDULE", None)  # noqa: RUF009
    db_pool_size: int = _setting("RUNWRIGHT_DB_POOL_SIZE", 10, minimum=1)
    # Off behind PgBouncer in transaction mode (see docs/operations.md).
    db_prepared: bool = _setting("RUNWRIGHT_DB_PREPARED", True)
    # An execution's fenced writes go to Postgres from the event loop, on
    # non-blocking connections (store/onloop.py), rather than by a thread of
    # the I/O pool. Off: every store call takes a thread, as before.
    store_on_loop: bool = _setting("RUNWRIGHT_STORE_ON_LOOP", True)
    io_threads: int = _setting("RUNWRIGHT_IO_THREADS", 32, minimum=1)
    tool_threads: int = _setting("RUNWRIGHT_TOOL_THREADS", 64, minimum=1)
    model: str | None = _setting("RUNWRIGHT_MODEL", None)
    # Model limits as JSON, {"pattern": {"rpm": .., "tpm": .., "max_concurrent": ..}}:
    # checked here, read by runner/core/limits/model_limits.py (configured()).
    model_limits: str | None = _setting("RUNWRIGHT_MODEL_LIMITS", None)
    # How long a model call waits in place for its limit before its run parks
    # (docs/flow-control.md): parked, it holds no worker thread and no lease.
    limit_wait_seconds: float = _setting("RUNWRIGHT_LIMIT_WAIT_SECONDS", 2.0, minimum=0)
    # Tenants' turns a round under a contended limit, as JSON {"acme": 2}: checked
    # here, read by runner/core/limits/model_limits.py (tenant_weights()).
    tenant_weights: str | None = _setting("RUNWRIGHT_TENANT_WEIGHTS", None)
    # Observing runs (runner/observe): log lines, traces, metrics.
    log_format: str = _setting("RUNWRIGHT_LOG_FORMAT", "text")
    otel: bool = _setting("RUNWRIGHT_OTEL", False)
    otel_capture_content: bool = _setting("RUNWRIGHT_OTEL_CAPTURE_CONTENT", False)
    metrics_port: int | None = _setting("RUNWRIGHT_METRICS_PORT", None, minimum=1)
    # Loopback unless told otherwise: the endpoint has no authentication.
    metrics_host: str = _setting("RUNWRIGHT_METRICS_HOST", "127.0.0.1")
    # Built-in redaction patterns for every agent's data on its way to logs,
    # spans, the public event stream and notifiers (runner/core/redaction.py).
    redact: tuple[str, ...] = _setting("RUNWRIGHT_REDACT", ())
    # Encryption at rest (docs/security.md): the key ring, ``id:base64-key``
    # pairs, the first sealing (runner/core/keyring.py).
    encryption_keys: str | None = _setting("RUNWRIGHT_ENCRYPTION_KEYS", None, secret=True)

    def __post_init__(self) -> None:
        if self.log_format not in LOG_FORMATS:
            raise ConfigurationError(
                f"RUNWRIGHT_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, "
                f"not {self.log_format[:40]!r}"
            )
        if not 1 <= self.max_retry_after_seconds <= MAX_RETRY_AFTER_LIMIT:
            raise ConfigurationError(
                "RUNWRIGHT_MAX_RETRY_AFTER_SECONDS must be from 1 to "
                f"{MAX_RETRY_AFTER_LIMIT}, not {self.max_retry_after_seconds}"
            )
        if self.tenant_weights is not None:
            from runner.core.limits.model_limits import tenant_weights

            tenant_weights(self.tenant_weights)
        if self.model_limits is not None:
            from runner.core.limits.model_limits import ModelLimits

            ModelLimits.from_json(self.model_limits)
        try:
            builtin_names(self.redact, "RUNWRIGHT_REDACT")
        except InvalidInput as exc:
            raise ConfigurationError(exc.message) from None
        if self.encryption_keys is not None:
            from runner.core.keyring import KeyRing

            KeyRing.parse(self.encryption_keys)
        if self.metrics_port is not None and self.metrics_port > 65535:
            raise ConfigurationError(
                f"RUNWRIGHT_METRICS_PORT must be a port number, not {self.metrics_port}"
            )

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Environment variable name -> field name, for every setting."""
        return {f.metadata["env"]: f.name for f in fields(cls)}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for item in fields(cls):
            raw = env.get(item.metadata["env"], "").strip()
            if raw:
                values[item.name] = _parse(item, hints[item.name], raw)
        return cls(**values)

    @property
    def uses_local_stack(self) -> bool:
        """No URLs at all: the local stack. Anything partial is refused by :meth:`check`."""
        return self.database_url is None and self.redis_url is None

    def check(self) -> None:
        """Refuse, in one line, a configuration a production process must not
        run with: one of the two URLs without the other (which would quietly
        start private embedded servers), or services without a signing key
        (each process would sign approval tokens with its own random key)."""
        if (self.database_url is None) != (self.redis_url is None):
            missing, given = (
                ("RUNWRIGHT_DATABASE_URL", "RUNWRIGHT_REDIS_URL")
                if self.database_url is None
                else ("RUNWRIGHT_REDIS_URL", "RUNWRIGHT_DATABASE_URL")
            )
            raise ConfigurationError(
                f"{missing} is not set but {given} is: set both, or neither to use the local stack"
            )
        if not self.uses_local_stack and not (self.secret_key or "").strip():
            raise ConfigurationError(
                "RUNWRIGHT_SECRET_KEY is not set: approval tokens need one key shared by every "
                "process; set it to 32 or more random bytes, e.g. the output of "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )

    @property
    def configured_broker(self) -> str | None:
        """The broker's URL as configured: ``RUNWRIGHT_BROKER_URL``, else the
        leases' Redis; None until the settings name one (or are resolved)."""
        return self.broker_url or self.redis_url

    @property
    def broker(self) -> str:
        url = self.configured_broker
        if url is None:
            raise ConfigurationError("no broker URL: resolve the settings first")
        return url


def resolve(settings: Settings, *, start: bool = True) -> Settings:
    """``settings``, checked, with the local stack's URLs filled in when no URLs
    are set. ``start=False`` never starts servers: the stack must be up."""
    settings.check()
    if not settings.uses_local_stack:
        return settings
    from store.local import LocalStack

    stack = LocalStack(settings.home)
    urls = stack.up() if start else stack.running_urls()
    if urls is None:
        raise ConfigurationError(
            "RUNWRIGHT_DATABASE_URL and RUNWRIGHT_REDIS_URL are not set and the local "
            f"stack under {stack.home} is not running: run `runwright local up`, or set "
            "both URLs"
        )
    return replace(
        settings,
        database_url=urls.database_url,
        redis_url=urls.redis_url,
        secret_key=settings.secret_key or stack.secret_key(),
    )


def open_store(settings: Settings) -> PostgresStore:
    """The Postgres store ``settings`` name, on this process's pool for its URL
    (``RUNWRIGHT_DB_POOL_SIZE``, ``RUNWRIGHT_DB_PREPARED``, ``RUNWRIGHT_MAX_PAYLOAD_BYTES``)."""
    from store.postgres import PostgresStore

    if not settings.database_url:
        raise ConfigurationError("RUNWRIGHT_DATABASE_URL is not set")
    return PostgresStore.from_url(
        settings.database_url,
        pool_size=settings.db_pool_size,
        prepared=settings.db_prepared,
        max_payload_bytes=settings.max_payload_bytes,
        cipher=key_ring(settings),
    )


def key_ring(settings: Settings) -> KeyRing | None:
    """The key ring ``RUNWRIGHT_ENCRYPTION_KEYS`` holds; None without it."""
    if not settings.encryption_keys:
        return None
    from runner.core.keyring import KeyRing

    return KeyRing.parse(settings.encryption_keys).ready()
