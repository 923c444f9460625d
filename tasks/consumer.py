"""The worker's consumer: Celery's, reconnecting to the broker promptly.

Celery retries a lost broker connection after 2 s, then 4, 6, 8 ... up to 30 s
between tries, so a worker may stay idle many seconds after its broker is back
(6 s after an 8 s RabbitMQ restart, up to 30 s after a long outage) while runs
wait for it. A try is one TCP connect: this consumer tries after 1 s, then
every 1 s more, at most every RECONNECT_MAX_SECONDS.
"""

from __future__ import annotations

import functools
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

RECONNECT_MAX_SECONDS = 3.0
# kombu's Connection.ensure_connection back-off, which Celery leaves at its defaults.
RECONNECT = {"interval_start": 1.0, "interval_step": 1.0, "interval_max": RECONNECT_MAX_SECONDS}


class Consumer(CeleryConsumer):  # type: ignore[misc]
    def ensure_connected(self, conn: Any) -> Any:
        conn.ensure_connection = functools.partial(conn.ensure_connection, **RECONNECT)
        return super().ensure_connected(conn)
