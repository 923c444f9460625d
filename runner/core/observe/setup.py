"""Which listeners a process gets, from the settings; and a worker's start and
stop of what serves them (the metrics endpoint, the trace exporter). The
optional extras are imported here only when configured."""

from __future__ import annotations

import logging
from typing import Any

from runner.core.errors import ConfigurationError
from runner.core.observe import Observer
from runner.core.settings import Settings

log = logging.getLogger(__name__)


def observers(settings: Settings) -> list[Observer]:
    """The optional listeners the settings ask for (the log listener is always on)."""
    found: list[Observer] = []
    if settings.otel:
        found.append(_extra("otel", "runner.observe.otel").observer(settings))
    if settings.metrics_port is not None:
        found.append(_extra("metrics", "runner.observe.metrics").observer(settings))
    return found


def _extra(name: str, module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(
            f"{module} needs the {name!r} extra: pip install 'runwright[{name}]' ({exc})"
        ) from exc


def install_logging(handlers: list[logging.Handler], settings: Settings | None = None) -> None:
    """The run context (and the configured format) on ``handlers``."""
    from runner.core.observe.logs import install

    settings = settings or Settings.from_env()
    install(handlers, settings.log_format)


def start_worker(settings: Settings, handlers: list[logging.Handler]) -> None:
    """In a worker process, before it takes tasks: the log format on Celery's
    handlers, the trace exporter, the metrics endpoint (the worker's start in
    runner/celery.py starts the watchdog beside them)."""
    install_logging(handlers, settings)
    if settings.otel:
        _extra("otel", "runner.observe.otel").start_worker(settings)
    if settings.metrics_port is not None:
        _extra("metrics", "runner.observe.metrics").start_worker(settings)


def stop_worker(settings: Settings) -> None:
    """On shutdown: flush what the exporters still hold."""
    if settings.otel:
        _extra("otel", "runner.observe.otel").stop_worker()
