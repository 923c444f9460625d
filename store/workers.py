"""What a live worker serves: its name, the agents it loaded, its version,
pool and concurrency. Each worker's watchdog (runner/core/engine/watchdog.py)
writes its record to Redis under a TTL every few seconds
(:meth:`runner.core.coordination.leases.Leases.mark_worker`), so the records that can be read are
the live workers'. ``runwright workers`` lists them; ``runwright doctor`` and
``runwright show`` use them to say which agent no live worker has.

A record is JSON. A worker of an earlier version wrote only when it was seen,
as a number: it reads as a worker whose agents are unknown, never as one that
has none."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

# What one record may hold: a worker with a thousand agents still fits.
RECORD_CHARS = 64_000


@dataclass(frozen=True)
class WorkerInfo:
    """One worker process that takes Runwright's runs."""

    name: str
    # When it was last seen and when it started (epoch seconds).
    seen_at: float = 0.0
    started_at: float | None = None
    # The agents it loaded (None: a worker of an earlier version, which did not say).
    agents: tuple[str, ...] | None = None
    version: str | None = None
    pool: str | None = None
    concurrency: int | None = None
    queues: tuple[str, ...] = field(default_factory=tuple)
    # The process: what an execution's owner names (runner/core/engine/execution.new_owner).
    host: str | None = None
    pid: int | None = None
    # The version of each agent it loaded, by agent (runner/core/versions.py);
    # None: a worker of an earlier release, which did not say.
    agent_versions: Mapping[str, str] | None = None

    def seen(self, at: float) -> WorkerInfo:
        return replace(self, seen_at=at)

    def encode(self) -> str:
        return json.dumps(
            {
                "seen_at": self.seen_at,
                "started_at": self.started_at,
                "agents": None if self.agents is None else list(self.agents),
                "version": self.version,
                "pool": self.pool,
                "concurrency": self.concurrency,
                "queues": list(self.queues),
                "host": self.host,
                "pid": self.pid,
                "agent_versions": None
                if self.agent_versions is None
                else dict(self.agent_versions),
            }
        )

    @classmethod
    def decode(cls, name: str, value: str | bytes) -> WorkerInfo | None:
        """The record of worker ``name``; None if it cannot be read (a
        record is written by any process that can reach Redis)."""
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        if len(text) > RECORD_CHARS:
            return None
        try:
            data: Any = json.loads(text)
        except ValueError:
            return None
        if isinstance(data, int | float) and not isinstance(data, bool):
            return cls(name, seen_at=float(data))  # an earlier version's mark
        if not isinstance(data, dict) or not _number(data.get("seen_at")):
            return None
        return cls(
            name,
            seen_at=float(data["seen_at"]),
            started_at=float(data["started_at"]) if _number(data.get("started_at")) else None,
            agents=_names(data.get("agents")),
            version=_text(data.get("version")),
            pool=_text(data.get("pool")),
            concurrency=(int(data["concurrency"]) if _number(data.get("concurrency")) else None),
            queues=_names(data.get("queues")) or (),
            host=_text(data.get("host")),
            pid=int(data["pid"]) if _number(data.get("pid")) else None,
            agent_versions=_versions(data.get("agent_versions")),
        )

    def serves_version(self, agent: str, version: str) -> bool:
        """Whether this worker loaded ``agent`` at ``version``."""
        return self.agent_versions is not None and self.agent_versions.get(agent) == version


def serving(workers: Iterable[WorkerInfo], agent: str) -> list[WorkerInfo]:
    """The workers that loaded ``agent`` (a worker that did not say may have)."""
    return [w for w in workers if w.agents is None or agent in w.agents]


def worker_of(owner: str, workers: Iterable[WorkerInfo]) -> WorkerInfo | None:
    """The live worker whose process an execution's owner (``host:pid:nonce``)
    names; None if it is gone or did not say."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    for worker in workers:
        if worker.host == host and worker.pid is not None and str(worker.pid) == pid:
            return worker
    return None


def unserved(workers: Mapping[str, WorkerInfo], agents: Iterable[str]) -> list[str]:
    """Of ``agents``, those no live worker has loaded, sorted."""
    live = list(workers.values())
    return sorted({agent for agent in agents if not serving(live, agent)})


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _names(value: object) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(item for item in value if isinstance(item, str))


def _versions(value: object) -> dict[str, str] | None:
    if not isinstance(value, dict):
        return None
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
