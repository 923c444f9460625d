"""A worker's beacon and the beat watchdog.

``start`` begins one daemon thread per worker process. Every few seconds it
writes the worker's record to Redis (:mod:`store.workers`: what it serves, which
``runwright workers`` lists and ``runwright doctor`` checks) and reads when
``tick()`` last ran: Redis's mark, and, when Redis has none (a Redis restart
loses it), the one tick() keeps in Postgres too, so that a worker never says
tick() has never run when it has. Celery beat sends the ticks; when it is missing nothing
fails, things just stop happening: runs whose worker died are not taken over,
notifications are not sent again and approvals never expire. So a worker logs
one WARNING when ``tick()`` has not run for :data:`STALE_INTERVALS` intervals,
and one INFO when ticks come back. ``stop`` ends the thread.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from store.errors import StoreUnavailable
from store.workers import WorkerInfo

log = logging.getLogger(__name__)

# tick() is overdue after this many intervals (RUNWRIGHT_TICK_SECONDS).
STALE_INTERVALS = 3
# The watchdog looks twice per tick interval, but never less often than this
# (a long interval) nor more often than MIN_PERIOD_SECONDS (a very short one).
MAX_PERIOD_SECONDS = 10.0
MIN_PERIOD_SECONDS = 0.25
# A worker's beacon outlives this many of its periods: one missed write (a busy
# Redis) does not make the worker look gone.
BEACON_PERIODS = 3
WITHOUT_BEAT = (
    "runs whose worker died are not taken over, notifications are not sent again "
    "and approvals do not expire"
)


class Beacons(Protocol):
    """What the watchdog needs of :class:`~runner.core.coordination.leases.Leases`."""

    def mark_worker(self, info: WorkerInfo, ttl_seconds: float) -> None: ...

    def last_tick(self) -> float | None: ...


def period(tick_seconds: float) -> float:
    """How often the watchdog looks, for a tick interval."""
    return min(max(tick_seconds / 2, MIN_PERIOD_SECONDS), MAX_PERIOD_SECONDS)


def age_text(seconds: float) -> str:
    """A duration the way a person reads it: ``0.8 s``, ``12 s``, ``4 min``, ``2 h``, ``3 d``."""
    seconds = max(seconds, 0.0)
    if seconds < 10:
        return f"{seconds:.1f} s"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size * 2:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


class Watchdog:
    """One worker's beacon and beat check. :meth:`check` is one look (the
    thread calls it every :func:`period`; tests call it with their own clock)."""

    def __init__(
        self,
        beacons: Beacons,
        worker: WorkerInfo,
        tick_seconds: float,
        *,
        stored_last_tick: Callable[[], float | None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``stored_last_tick``: when tick() last finished by the store's mark
        (epoch seconds), asked only when Redis has no mark."""
        self.beacons = beacons
        self.stored_last_tick = stored_last_tick
        self.worker = worker
        self.tick_seconds = tick_seconds
        self.period = period(tick_seconds)
        self.clock = clock
        self.started = clock()
        self.overdue = False  # a WARNING was logged and ticks have not come back since
        self.unreachable = False  # the last look could not reach Redis
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def limit(self) -> float:
        return STALE_INTERVALS * self.tick_seconds

    def check(self) -> None:
        now = self.clock()
        try:
            self.beacons.mark_worker(self.worker.seen(now), BEACON_PERIODS * self.period)
            last = self.beacons.last_tick()
        except Exception as exc:  # a watchdog that dies would stop warning for good
            if not self.unreachable:
                log.warning(
                    "watchdog: cannot reach Redis (%s); this worker's beacon and the check "
                    "that celery beat runs wait until it is back",
                    exc,
                )
            self.unreachable = True
            return
        if self.unreachable:
            log.info("watchdog: Redis is reachable again")
            self.unreachable = False
        unknown = None  # why the store could not say, when Redis had no mark
        if last is None and not self.overdue and now - self.started > self.limit:
            # Only now can the answer matter: earlier the worker's own start
            # bounds the wait, and once warned, a new tick marks Redis again.
            last, unknown = self._stored()
        # A worker that just started gives beat its full allowance, whatever the
        # last tick was: beat may be starting at the same moment.
        waited = now - max(last if last is not None else self.started, self.started)
        if waited > self.limit and not self.overdue:
            self.overdue = True
            up = age_text(now - self.started)
            if last is not None:
                what = f"tick() last ran {age_text(now - last)} ago"
            elif unknown is None:
                what = (
                    "tick() has never run (neither Redis nor Postgres has a mark of a tick; "
                    f"this worker has been up {up})"
                )
            else:
                what = (
                    "when tick() last ran is unknown: Redis has no mark of it (a restart "
                    f"loses it) and {unknown} (this worker has been up {up})"
                )
            log.warning(
                "%s, more than %d intervals of %g s: %s. Is celery beat running? "
                "(celery -A tasks beat)",
                what,
                STALE_INTERVALS,
                self.tick_seconds,
                WITHOUT_BEAT,
            )
        elif waited <= self.limit and self.overdue:
            self.overdue = False  # only a new tick shortens the wait
            log.info("tick() runs again (last %s ago)", age_text(now - (last or now)))

    def _stored(self) -> tuple[float | None, str | None]:
        """The store's mark of the last tick, or None and why it is unknown."""
        if self.stored_last_tick is None:
            return None, "this worker has no database to read the mark Postgres keeps"
        try:
            return self.stored_last_tick(), None
        except Exception as exc:  # the look goes on: this is only its wording
            return None, f"the mark Postgres keeps could not be read ({exc})"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="runwright-watchdog", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        self.check()  # at once: a worker is listed as soon as it starts
        while not self._stop.wait(self.period):
            self.check()


_lock = threading.Lock()
_current: tuple[int, Watchdog, Leases] | None = None


def start(settings: Settings, worker: WorkerInfo) -> None:
    """Start this process's watchdog (once: a second call changes nothing).
    ``settings`` are resolved: they name the Redis of the leases."""
    global _current
    with _lock:
        if _current is not None and _current[0] == os.getpid():
            return
        if settings.redis_url is None:
            log.warning("watchdog: no Redis URL in the settings; the beat check is off")
            return
        leases = Leases.from_url(settings.redis_url)
        stored = None
        if settings.database_url is not None:
            from runner.core.coordination.leases import stored_last_tick
            from runner.core.settings import open_store

            # The worker's own pool (one engine per URL and process); connects
            # only when Redis has no mark to read.
            store = open_store(settings)
            stored = functools.partial(stored_last_tick, store)
        dog = Watchdog(leases, worker, settings.tick_seconds, stored_last_tick=stored)
        dog.start()
        _current = (os.getpid(), dog, leases)


def stop() -> None:
    """Stop this process's watchdog, if it runs (any number of times)."""
    global _current
    with _lock:
        current, _current = _current, None
    if current is None or current[0] != os.getpid():
        return  # none, or the parent's (a forked child never ran that thread)
    _, dog, leases = current
    dog.stop()
    # The worker is gone: its record goes now, not when its TTL lapses, so
    # that `runwright versions` and `workers` stop listing it at once.
    with contextlib.suppress(StoreUnavailable):
        leases.forget_worker(dog.worker.name)
    leases.redis.close()
