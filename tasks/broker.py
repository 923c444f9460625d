"""The Redis broker transport, hardened against broker restarts.

When a worker loses its Redis broker connection, Celery's consumer calls
``Connection.collect()`` and then ``Connection.close()``. ``collect()`` detaches
kombu's transport from the connection (``transport.client = None``) even when
the channel could not close (its pending ``BRPOP`` read failed on the dead
socket). ``close()`` then closes that channel again; the channel drops its
pools, restores its unacknowledged messages through a new pool, and building
that pool reads ``transport.client.hostname``: an ``AttributeError``, which is
not a connection error, so the worker stops with "Unrecoverable error". Acks of
executions that were running during the outage go through the same old channel
and fail the same way.

Here each channel keeps the connection parameters it was opened with, so work
left on an old channel reaches Redis again, or fails with a connection error
that Celery already handles, as on any other dead connection.
See docs/redis-broker.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kombu.transport import redis
from redis.exceptions import ConnectionError as RedisConnectionError


class Channel(redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        # Kept in __dict__, not set in __init__: Channel.__init__ builds its first
        # pool (for its ping) before a subclass's __init__ could set anything.
        saved: dict[bool, dict[str, Any]] = self.__dict__.setdefault("_runwright_connparams", {})
        if self.connection is not None and self.connection.client is not None:
            build: Callable[..., dict[str, Any]] = super()._connparams
            saved[asynchronous] = build(asynchronous=asynchronous)
        elif asynchronous not in saved:
            raise RedisConnectionError("the broker connection is closed")
        return dict(saved[asynchronous])


class Transport(redis.Transport):
    Channel = Channel
