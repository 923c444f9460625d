"""Live delivery of run events through Redis pub/sub (runner/events.py).

Redis carries no event a reader could not rebuild: a writer publishes a bare
wake-up on the run's channel after each commit, and readers read what is new
from the store. Token deltas, which are never stored, are the only payloads.

One :class:`EventListener` per process holds one pub/sub connection for all
the runs its readers follow: a web process serving many live pages costs
Redis one client, not one per page.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import redis
import redis.exceptions

from store.errors import StoreUnavailable
from store.leases import redis_errors

log = logging.getLogger(__name__)

EVENTS_PREFIX = "runwright:events:"
# What a writer publishes after a commit: "read what is new".
WAKE = b"w"


def events_channel(run_id: str) -> str:
    return EVENTS_PREFIX + run_id


def publish_wake(client: redis.Redis, run_id: str) -> None:
    with redis_errors():
        client.publish(events_channel(run_id), WAKE)


def publish_token(client: redis.Redis, run_id: str, delta: dict[str, Any]) -> None:
    with redis_errors():
        client.publish(events_channel(run_id), json.dumps(delta, separators=(",", ":")))


# A token delta is worth little once late: its publish gives up quickly, so a
# slow Redis never holds up the model stream it reports on.
TOKEN_TIMEOUT_SECONDS = 0.25


def quick_client(client: redis.Redis) -> redis.Redis:
    """A client to the same Redis as ``client`` with short timeouts."""
    pool = client.connection_pool
    kwargs = {
        **pool.connection_kwargs,
        "socket_timeout": TOKEN_TIMEOUT_SECONDS,
        "socket_connect_timeout": TOKEN_TIMEOUT_SECONDS,
    }
    return redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )


def decode(data: bytes | str) -> dict[str, Any] | None:
    """A channel message: None for a wake-up, else a token delta. Anything else
    on the channel (it is a public name) is dropped by the caller."""
    raw = data if isinstance(data, bytes) else data.encode()
    if raw == WAKE:
        return None
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("not a delta")
    return value


class EventListener:
    """A daemon thread that owns the process's pub/sub connection.

    ``on_message(run_id, data)`` gets every message of a subscribed run;
    ``on_reset()`` is called after a reconnect, once the subscriptions are back,
    so that readers catch up on what was published while the connection was
    down. Subscriptions are requests to the thread (a pub/sub connection is not
    for two threads at once); :meth:`subscribe` returns once Redis confirmed, so
    that anything published afterwards reaches the caller.
    """

    # How long the thread waits for a message before it looks at its requests.
    POLL_SECONDS = 0.02

    def __init__(
        self,
        client: redis.Redis,
        on_message: Callable[[str, bytes], None],
        on_reset: Callable[[], None],
    ) -> None:
        self._client = client
        self._on_message = on_message
        self._on_reset = on_reset
        self._requests: queue.SimpleQueue[tuple[str, str, threading.Event | None]] = (
            queue.SimpleQueue()
        )
        self._channels: set[str] = set()
        self._waiting: dict[str, list[threading.Event]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runwright-events", daemon=True)
        self._thread.start()

    def subscribe(self, run_id: str, timeout: float = 5.0) -> None:
        confirmed = threading.Event()
        self._requests.put(("subscribe", events_channel(run_id), confirmed))
        if not confirmed.wait(timeout):
            raise StoreUnavailable(f"Redis did not confirm the subscription within {timeout:g} s")

    def unsubscribe(self, run_id: str) -> None:
        self._requests.put(("unsubscribe", events_channel(run_id), None))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        reconnect = False
        while not self._stop.is_set():
            pubsub = self._client.pubsub()  # type: ignore[no-untyped-call]
            try:
                if self._channels:
                    pubsub.subscribe(*self._channels)
                if reconnect:
                    self._on_reset()
                reconnect = True
                while not self._stop.is_set():
                    self._take_requests(pubsub)
                    message = pubsub.get_message(timeout=self.POLL_SECONDS)
                    if message is not None:
                        self._handle(message)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                log.warning("run-event listener lost Redis (%s); reconnecting", exc)
                self._stop.wait(0.5)
            except Exception:
                log.exception("run-event listener failed; restarting it")
                self._stop.wait(0.5)
            finally:
                with suppress(redis.exceptions.RedisError, OSError):
                    pubsub.close()

    def _take_requests(self, pubsub: Any) -> None:
        while True:
            try:
                action, channel, confirmed = self._requests.get_nowait()
            except queue.Empty:
                return
            if action == "subscribe":
                if confirmed is not None:
                    self._waiting.setdefault(channel, []).append(confirmed)
                self._channels.add(channel)
                pubsub.subscribe(channel)
            else:
                self._channels.discard(channel)
                pubsub.unsubscribe(channel)

    def _handle(self, message: dict[str, Any]) -> None:
        channel = message.get("channel")
        if isinstance(channel, bytes):
            channel = channel.decode()
        if not isinstance(channel, str) or not channel.startswith(EVENTS_PREFIX):
            return
        kind = message.get("type")
        if kind == "subscribe":
            for confirmed in self._waiting.pop(channel, []):
                confirmed.set()
        elif kind == "message":
            self._on_message(channel[len(EVENTS_PREFIX) :], message["data"])
