"""Redis leases: the fast check of who executes a run.

A lease is the key ``runwright:lease:<run_id>`` with a TTL. Its value is
``"<epoch>:<owner>"``; epoch ``0`` marks a claimer that has set the key but
whose Postgres claim has not returned yet. Postgres (the fencing epoch) is the
authority: a lease only lets a stale owner find out early that it lost the run.

Scripts compare before they act, so only the owner renews or releases. The
redis-py ``Lock`` is deliberately not used: its token is per-client and it has
no notion of the fencing epoch.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
import redis.exceptions

from store.errors import StoreUnavailable
from store.workers import WorkerInfo

if TYPE_CHECKING:
    from store.postgres import PostgresStore

log = logging.getLogger(__name__)

LEASE_PREFIX = "runwright:lease:"
CANCEL_CHANNEL = "runwright:cancel"
TICK_LOCK_KEY = "runwright:tick"
# When tick() last finished (epoch seconds), and each worker's last sign of
# life (a key per worker that expires): what ``runwright doctor`` and the beat
# watchdog read.
LAST_TICK_KEY = "runwright:beacon:tick"
WORKER_PREFIX = "runwright:beacon:worker:"

# Move a pending value (epoch 0) to the bound one. Missing counts as ours: the
# Postgres claim already succeeded, and Postgres is the authority.
_BIND = """
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or v == false then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""

# Compare-and-pexpire. A missing key is re-created: callers renew only after
# Postgres confirmed that the claim is still theirs.
_RENEW = """
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@contextmanager
def redis_errors() -> Iterator[None]:
    """Translate redis-py's connection errors at the store boundary."""
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise StoreUnavailable(f"Redis is unavailable: {exc}") from exc


def lease_key(run_id: str) -> str:
    return f"{LEASE_PREFIX}{run_id}"


@dataclass(frozen=True)
class Holder:
    owner: str
    epoch: int

    @property
    def pending(self) -> bool:
        return self.epoch == 0

    def encode(self) -> str:
        return f"{self.epoch}:{self.owner}"

    @classmethod
    def decode(cls, raw: bytes | str) -> Holder:
        text = raw.decode() if isinstance(raw, bytes) else raw
        epoch, _, owner = text.partition(":")
        return cls(owner=owner, epoch=int(epoch))


class Renewal(enum.Enum):
    RENEWED = 1
    RESTORED = 2
    FOREIGN = 0


class Leases:
    """Lease operations on one Redis database."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._bind = client.register_script(_BIND)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    @classmethod
    def from_url(cls, url: str) -> Leases:
        return cls(connect(url))

    # ------------------------------------------------------------- beacons

    def mark_tick(self, at: float) -> None:
        """Record that tick() finished at ``at`` (epoch seconds)."""
        with redis_errors():
            self.redis.set(LAST_TICK_KEY, repr(at))

    def last_tick(self) -> float | None:
        """When tick() last finished (epoch seconds); None if it never has."""
        with redis_errors():
            value = self.redis.get(LAST_TICK_KEY)
        try:
            return None if value is None else float(value)
        except ValueError:
            return None

    def mark_worker(self, info: WorkerInfo, ttl_seconds: float) -> None:
        """A worker's record (:mod:`store.workers`); it disappears
        ``ttl_seconds`` after the last one."""
        with redis_errors():
            self.redis.set(WORKER_PREFIX + info.name, info.encode(), px=int(ttl_seconds * 1000))

    def forget_worker(self, name: str) -> None:
        """Remove worker ``name``'s record: it stopped."""
        with redis_errors():
            self.redis.delete(WORKER_PREFIX + name)

    def workers(self) -> dict[str, WorkerInfo]:
        """The live workers (seen within their record's TTL), by name."""
        seen: dict[str, WorkerInfo] = {}
        with redis_errors():
            keys = list(self.redis.scan_iter(match=WORKER_PREFIX + "*", count=500))
            values = self.redis.mget(keys) if keys else []
        for key, value in zip(keys, values, strict=True):
            name = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
            if value is None:
                continue  # expired between the scan and the read
            info = WorkerInfo.decode(name.removeprefix(WORKER_PREFIX), value)
            if info is not None:
                seen[info.name] = info
        return seen

    def acquire(self, run_id: str, owner: str, ttl_ms: int) -> bool:
        """``SET NX PX`` a pending lease; False if anyone holds the key."""
        with redis_errors():
            return bool(
                self.redis.set(lease_key(run_id), Holder(owner, 0).encode(), nx=True, px=ttl_ms)
            )

    def bind(self, run_id: str, owner: str, epoch: int, ttl_ms: int) -> bool:
        """Record the epoch Postgres granted in the lease value."""
        with redis_errors():
            result = self._bind(
                keys=[lease_key(run_id)],
                args=[Holder(owner, 0).encode(), Holder(owner, epoch).encode(), ttl_ms],
            )
        return bool(result)

    def renew(self, run_id: str, owner: str, epoch: int, ttl_ms: int) -> Renewal:
        with redis_errors():
            result = self._renew(
                keys=[lease_key(run_id)], args=[Holder(owner, epoch).encode(), ttl_ms]
            )
        return Renewal(int(result))

    def release(self, run_id: str, owner: str, epoch: int) -> bool:
        """Compare-and-delete: only the holder's own value is removed."""
        with redis_errors():
            result = self._release(keys=[lease_key(run_id)], args=[Holder(owner, epoch).encode()])
        return bool(result)

    def holder(self, run_id: str) -> Holder | None:
        """Who holds the lease; None once it expired or was lost (lapsed)."""
        with redis_errors():
            raw = self.redis.get(lease_key(run_id))
        return None if raw is None else Holder.decode(raw)

    def lapsed(self, run_ids: Iterable[str]) -> set[str]:
        """The subset of ``run_ids`` with no lease key at all."""
        ids = list(run_ids)
        if not ids:
            return set()
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for run_id in ids:
                pipe.exists(lease_key(run_id))
            found = pipe.execute()
        return {run_id for run_id, exists in zip(ids, found, strict=True) if not exists}

    def try_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        with redis_errors():
            return bool(self.redis.set(key, token, nx=True, px=ttl_ms))

    def unlock(self, key: str, token: str) -> None:
        with redis_errors():
            self._release(keys=[key], args=[token])

    def publish_cancel(self, run_id: str) -> int:
        with redis_errors():
            return int(self.redis.publish(CANCEL_CHANNEL, run_id))


def connect(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url,
        socket_timeout=5,
        socket_connect_timeout=5,
        health_check_interval=30,
        retry_on_timeout=False,
    )


class CancelListener:
    """A daemon thread that hands every run id published on the cancel channel
    to ``callback``. It reconnects after Redis restarts; the heartbeat's poll of
    ``cancel_requested`` covers what it misses meanwhile."""

    def __init__(self, client: redis.Redis, callback: Callable[[str], Any]) -> None:
        self._client = client
        self._callback = callback
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runwright-cancel", daemon=True)

    def start(self, wait: float = 5.0) -> CancelListener:
        self._thread.start()
        self._ready.wait(wait)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        # One WARNING when Redis goes, one INFO when the listener is subscribed
        # again: the retries in between say nothing new.
        lost_at: float | None = None  # time.monotonic() at the loss, while away
        while not self._stop.is_set():
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(CANCEL_CHANNEL)
                if lost_at is not None:
                    away = time.monotonic() - lost_at
                    log.info("cancel listener is subscribed again after %.1f s without Redis", away)
                    lost_at = None
                self._ready.set()
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.2)
                    if message and message.get("type") == "message":
                        data = message["data"]
                        self._callback(data.decode() if isinstance(data, bytes) else str(data))
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                if lost_at is None:
                    lost_at = time.monotonic()
                    log.warning(
                        "cancel listener lost Redis (%s); reconnecting, and meanwhile the "
                        "heartbeat's poll sees cancellations",
                        exc,
                    )
                self._stop.wait(0.5)
            except Exception:
                # Anything else (a server that is not Redis answering on its
                # port, a callback's bug) is retried at the pace of an outage,
                # and said once until the listener is subscribed again: a
                # retry at once would spin, a socket a try.
                if lost_at is None:
                    lost_at = time.monotonic()
                    log.exception("cancel listener failed; subscribing again")
                self._stop.wait(0.5)
            finally:
                with suppress(redis.exceptions.RedisError):
                    pubsub.close()


def stored_last_tick(store: PostgresStore) -> float | None:
    """When tick() last finished (epoch seconds) by the store's mark; None if
    it never has since the store had one (revision 0009)."""
    at = store.last_tick()
    return None if at is None else at.timestamp()


def last_tick(leases: Leases | None, store: PostgresStore) -> float | None:
    """When tick() last finished (epoch seconds), None if it never has. Redis's
    mark, a cheap read, is the newest; when it has none (a Redis restart, which
    loses it, or no tick ever) the store's answers."""
    if leases is not None:
        at = leases.last_tick()
        if at is not None:
            return at
    return stored_last_tick(store)
