"""Settings from the environment.

Unset ``RUNWRIGHT_DATABASE_URL`` and ``RUNWRIGHT_REDIS_URL`` mean the local
stack (``store/local.py``): a real Postgres and Redis under ``./.runwright/``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from store.errors import ConfigurationError, InvalidInput

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
    agent_grace_seconds: float = 600.0
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
            agent_grace_seconds=_number(env, "RUNWRIGHT_AGENT_GRACE_SECONDS", 600.0),
            home=Path(env.get("RUNWRIGHT_HOME") or ".runwright"),
            enqueue=env.get("RUNWRIGHT_ENQUEUE") or "tasks:enqueue",
        )

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

    def resolved(self, *, start: bool = True) -> Settings:
        """These settings, checked, with the local stack's URLs filled in when no
        URLs are set. ``start=False`` never starts servers: the stack must be up."""
        self.check()
        if not self.uses_local_stack:
            return self
        from store.local import LocalStack

        stack = LocalStack(self.home)
        urls = stack.up() if start else stack.running_urls()
        if urls is None:
            raise ConfigurationError(
                "RUNWRIGHT_DATABASE_URL and RUNWRIGHT_REDIS_URL are not set and the local "
                f"stack under {stack.home} is not running: run `runwright local up`, or set "
                "both URLs"
            )
        return replace(
            self,
            database_url=urls.database_url,
            redis_url=urls.redis_url,
            secret_key=self.secret_key or stack.secret_key(),
        )

    @property
    def broker(self) -> str:
        url = self.broker_url or self.redis_url
        if url is None:
            raise InvalidInput("no broker URL: resolve the settings first")
        return url
