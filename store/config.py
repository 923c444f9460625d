"""Settings from the environment.

Unset ``RUNWRIGHT_DATABASE_URL`` and ``RUNWRIGHT_REDIS_URL`` mean the local
stack (``store/local.py``): a real Postgres and Redis under ``./.runwright/``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from store.errors import InvalidInput

DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024


def _number(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInput(f"{name} must be a number, not {raw!r}") from None
    if value < minimum:
        raise InvalidInput(f"{name} must be at least {minimum}, not {raw!r}")
    return value


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    redis_url: str | None = None
    broker_url: str | None = None
    agents: tuple[str, ...] = ()
    secret_key: str | None = None
    lease_ttl_seconds: float = 15.0
    tick_seconds: float = 5.0
    drain_seconds: float = 10.0
    reenqueue_seconds: float = 30.0
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    notify_backoff_seconds: float = 5.0
    notify_backoff_cap_seconds: float = 600.0
    approval_expires_seconds: float = 86400.0
    tick_batch: int = 500
    # Takeovers without progress before a run settles failed/crashed.
    max_takeovers: int = 5
    home: Path = field(default_factory=lambda: Path(".runwright"))
    enqueue: str = "tasks:enqueue"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        agents = tuple(a.strip() for a in env.get("RUNWRIGHT_AGENTS", "").split(",") if a.strip())
        return cls(
            database_url=env.get("RUNWRIGHT_DATABASE_URL") or None,
            redis_url=env.get("RUNWRIGHT_REDIS_URL") or None,
            broker_url=env.get("RUNWRIGHT_BROKER_URL") or None,
            agents=agents,
            secret_key=env.get("RUNWRIGHT_SECRET_KEY") or None,
            lease_ttl_seconds=_number(env, "RUNWRIGHT_LEASE_TTL_SECONDS", 15.0, minimum=0.3),
            tick_seconds=_number(env, "RUNWRIGHT_TICK_SECONDS", 5.0, minimum=0.1),
            drain_seconds=_number(env, "RUNWRIGHT_DRAIN_SECONDS", 10.0),
            reenqueue_seconds=_number(env, "RUNWRIGHT_REENQUEUE_SECONDS", 30.0),
            max_payload_bytes=int(
                _number(env, "RUNWRIGHT_MAX_PAYLOAD_BYTES", DEFAULT_MAX_PAYLOAD_BYTES, minimum=1)
            ),
            notify_backoff_seconds=_number(env, "RUNWRIGHT_NOTIFY_BACKOFF_SECONDS", 5.0),
            notify_backoff_cap_seconds=_number(env, "RUNWRIGHT_NOTIFY_BACKOFF_CAP_SECONDS", 600.0),
            approval_expires_seconds=_number(
                env, "RUNWRIGHT_APPROVAL_EXPIRES_SECONDS", 86400.0, minimum=1
            ),
            tick_batch=int(_number(env, "RUNWRIGHT_TICK_BATCH", 500, minimum=1)),
            max_takeovers=int(_number(env, "RUNWRIGHT_MAX_TAKEOVERS", 5, minimum=1)),
            home=Path(env.get("RUNWRIGHT_HOME") or ".runwright"),
            enqueue=env.get("RUNWRIGHT_ENQUEUE") or "tasks:enqueue",
        )

    @property
    def uses_local_stack(self) -> bool:
        return self.database_url is None or self.redis_url is None

    def resolved(self) -> Settings:
        """These settings with the local stack's URLs filled in (started if needed)."""
        if not self.uses_local_stack:
            return self
        from store.local import LocalStack

        urls = LocalStack(self.home).up()
        secret = self.secret_key or LocalStack(self.home).secret_key()
        return replace(
            self,
            database_url=self.database_url or urls.database_url,
            redis_url=self.redis_url or urls.redis_url,
            secret_key=secret,
        )

    @property
    def broker(self) -> str:
        url = self.broker_url or self.redis_url
        if url is None:
            raise InvalidInput("no broker URL: resolve the settings first")
        return url
