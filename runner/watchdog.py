"""A worker's beacon and the beat watchdog (issue 13; filled in by its own change).

``start`` begins a daemon thread that marks this worker alive in Redis and
warns when ``tick()`` has not run for three intervals; ``stop`` ends it."""

from __future__ import annotations

from store.config import Settings


def start(settings: Settings, worker: str) -> None:
    return None


def stop() -> None:
    return None
