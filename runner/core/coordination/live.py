"""Live delivery of run events through Redis pub/sub (runner/core/events/feed.py).

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
import os
import queue
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import redis
import redis.exceptions

from store.errors import StoreUnavailable

log = logging.getLogger(__name__)

EVENTS_PREFIX = "runwright:events:"
# What a writer publishes after a commit: "read what is new".
WAKE = b"w"


def events_channel(run_id: str) -> str:
    return EVENTS_PREFIX + run_id


class Publisher:
    """Publishes on a connection of its own without waiting for Redis's
    answers (the number of listeners, which nobody needs), so that a publish
    costs its caller one socket write. Messages go out at once and in order.

    The connection asks Redis not to answer at all (``CLIENT REPLY OFF``);
    where a server does not know that command (some proxies), the answers are
    read, without blocking, before each publish instead.

    A failure (Redis down, a write that times out) drops the connection and
    the message; the next publish connects again. Readers do not depend on a
    wake-up arriving: they catch up from the store.
    """

    TIMEOUT_SECONDS = 1.0
    # Unread answers past this are waited for (Redis answers as fast as it reads).
    MAX_PENDING = 10_000

    def __init__(self, client: redis.Redis, on_error: Callable[[Exception], None]) -> None:
        pool = client.connection_pool
        self._connection_class = pool.connection_class
        self._kwargs = {
            **pool.connection_kwargs,
            "socket_timeout": self.TIMEOUT_SECONDS,
            "socket_connect_timeout": self.TIMEOUT_SECONDS,
            "health_check_interval": 0,
        }
        self._on_error = on_error
        self._lock = threading.Lock()
        self._conn: Any = None
        self._pid = 0
        self._quiet = False  # Redis sends no answers
        self._pending = 0  # answers not read yet (when it does)

    def send(self, channel: str, payload: bytes | str) -> bool:
        """Publish; False if it could not be sent."""
        with self._lock:
            return self._send(channel, payload)

    def send_now(self, channel: str, payload: bytes | str) -> bool | None:
        """:meth:`send` where it need not wait first: for another thread's
        send, to connect, or for Redis's unread answers; else None, and
        nothing is tried."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if not self.connected or (not self._quiet and self._pending >= self.MAX_PENDING):
                return None
            return self._send(channel, payload)
        finally:
            self._lock.release()

    def _send(self, channel: str, payload: bytes | str) -> bool:
        try:
            conn = self._connection()
            if not self._quiet:
                self._read_answers(conn, wait=self._pending >= self.MAX_PENDING)
                self._pending += 1
            conn.send_packed_command([_publish_command(channel, payload)], check_health=False)
            return True
        except (redis.exceptions.RedisError, OSError) as exc:
            self._drop()
            self._on_error(exc)
            return False

    @property
    def connected(self) -> bool:
        """Whether a send needs no connect first."""
        return self._conn is not None and self._pid == os.getpid()

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _connection(self) -> Any:
        if self._conn is None or self._pid != os.getpid():  # none yet, or a forked child's
            conn = self._connection_class(**self._kwargs)
            self._pid = os.getpid()
            self._conn = conn
            conn.connect()
            self._quiet = self._silence(conn)
            self._pending = 0
        return self._conn

    @staticmethod
    def _silence(conn: Any) -> bool:
        """Ask Redis to stop answering; whether it agreed. With replies off,
        the PING goes unanswered and the first answer is ``CLIENT REPLY ON``'s
        OK; a server that does not know the command answers all three, the
        first with an error."""
        for command in (("CLIENT", "REPLY", "OFF"), ("PING",), ("CLIENT", "REPLY", "ON")):
            conn.send_command(*command, check_health=False)
        try:
            conn.read_response()
        except redis.exceptions.ResponseError:
            for _ in range(2):
                with suppress(redis.exceptions.ResponseError):
                    conn.read_response()
            return False
        conn.send_command("CLIENT", "REPLY", "OFF", check_health=False)
        return True

    def _read_answers(self, conn: Any, *, wait: bool) -> None:
        while self._pending and (wait or conn.can_read(timeout=0)):
            with suppress(redis.exceptions.ResponseError):
                conn.read_response()
            self._pending -= 1
            wait = False

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._pid == os.getpid():
            with suppress(Exception):
                conn.disconnect()


def _publish_command(channel: str, payload: bytes | str) -> bytes:
    """PUBLISH in the Redis protocol, written out (cheaper than the client's
    general packer on this path, which runs after every write of a run)."""
    name = channel.encode()
    body = payload.encode() if isinstance(payload, str) else payload
    return b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
        len(name),
        name,
        len(body),
        body,
    )


def token_payload(delta: dict[str, Any]) -> str:
    return json.dumps(delta, separators=(",", ":"))


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
