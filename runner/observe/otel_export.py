"""The tracer provider of a process that traces runs: the SDK's, exporting
over OTLP/HTTP as the standard ``OTEL_*`` variables say, installed only if the
process has none (``runner.observe.otel`` re-exports these)."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from opentelemetry import trace

from store.config import Settings

log = logging.getLogger("runner.observe.otel")

# Without OTEL_BSP_SCHEDULE_DELAY, a worker exports its ended spans every
# second rather than the SDK's five: a worker killed mid-run has sent what it
# had finished by then, at the cost of at most one small request a second.
WORKER_SCHEDULE_DELAY_MS = 1000
FLUSH_TIMEOUT_MS = 5000

_installed: Any = None  # the SDK TracerProvider configure() installed, if any
_install_lock = threading.Lock()


def configure(service_name: str = "runwright") -> bool:
    """Install the SDK's tracer provider, exporting over OTLP/HTTP, unless
    this process has a tracer provider already (then it is used as it is).

    The exporter reads the standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``OTEL_EXPORTER_OTLP_HEADERS``, ...); ``OTEL_SERVICE_NAME`` (or
    ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``) overrides
    ``service_name``; ``OTEL_SDK_DISABLED=true`` turns it off. Spans are
    exported every second unless ``OTEL_BSP_SCHEDULE_DELAY`` says otherwise.
    Returns whether it installed one.

    A web app that starts runs calls this once at start-up (or configures
    OpenTelemetry its own way) so that its ``start()`` spans are exported.
    """
    global _installed
    with _install_lock:
        if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            return False
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return False
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = os.environ.get(name, "").strip()
            if protocol and protocol != "http/protobuf":
                log.warning(
                    "runwright exports traces over OTLP/HTTP (http/protobuf) only; %s=%s ignored",
                    name,
                    protocol,
                )
                break
        resource = Resource.create()
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: service_name}))
        delay = None if os.environ.get("OTEL_BSP_SCHEDULE_DELAY") else WORKER_SCHEDULE_DELAY_MS
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=delay)
        )
        trace.set_tracer_provider(provider)
        _installed = provider
        log.info(
            "OpenTelemetry: exporting traces over OTLP/HTTP as service %r",
            resource.attributes.get(SERVICE_NAME),
        )
        return True


def start_worker(settings: Settings) -> None:
    """In a worker, before it takes tasks: a tracer provider unless it has one."""
    configure("runwright-worker")


def stop_worker() -> None:
    """On shutdown: export what is still buffered, and stop the exporter that
    :func:`configure` started (a provider the app installed is only flushed)."""
    global _installed
    provider = _installed if _installed is not None else trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    if flush is not None:
        try:
            flush(FLUSH_TIMEOUT_MS)
        except Exception:
            log.exception("OpenTelemetry: flushing spans at shutdown failed")
    if _installed is not None:
        try:
            _installed.shutdown()
        finally:
            _installed = None
