"""A loopback OTLP/HTTP trace collector for tests: it takes ``POST
/v1/traces`` bodies (protobuf, as the SDK's exporter sends them), decodes them,
and keeps the spans as plain records a test can search."""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

# opentelemetry.proto.trace.v1.Span.SpanKind
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
# opentelemetry.proto.trace.v1.Status.StatusCode
STATUSES = {0: "unset", 1: "ok", 2: "error"}


@dataclass
class Event:
    name: str
    attributes: dict[str, Any]


@dataclass
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str
    attributes: dict[str, Any]
    events: list[Event]
    links: list[tuple[str, str]]
    status: str
    status_message: str
    service: str | None
    start_ns: int
    end_ns: int
    scope: str = ""

    def event(self, name: str) -> Event:
        [found] = [e for e in self.events if e.name == name]
        return found

    def texts(self) -> list[str]:
        """Every string the span carries (name, keys and values, events,
        status), the way a backend would store them."""
        found = [self.name, self.status_message]
        for attributes in [self.attributes, *(e.attributes for e in self.events)]:
            for key, value in attributes.items():
                found.append(key)
                values = value if isinstance(value, list | tuple) else [value]
                found.extend(str(v) for v in values)
        found.extend(e.name for e in self.events)
        return found


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def _attributes(items: Any) -> dict[str, Any]:
    pairs: list[KeyValue] = list(items)
    return {item.key: _value(item.value) for item in pairs}


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex() or None,
                        name=span.name,
                        kind=KINDS.get(span.kind, str(span.kind)),
                        attributes=_attributes(span.attributes),
                        events=[Event(e.name, _attributes(e.attributes)) for e in span.events],
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        status=STATUSES.get(span.status.code, str(span.status.code)),
                        status_message=span.status.message,
                        service=resource.get("service.name"),
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        scope=scope_spans.scope.name,
                    )
                )
    return spans


class Collector:
    """``with Collector() as collector``: listening on 127.0.0.1 until the block ends."""

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self.requests = 0
        self.errors: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != "/v1/traces":
                    collector.errors.append(f"POST {self.path}")
                    self.send_response(404)
                    self.end_headers()
                    return
                try:
                    received = decode(body)
                except Exception as exc:  # a bad body is the test's failure, not the server's
                    collector.errors.append(repr(exc))
                    self.send_response(400)
                    self.end_headers()
                    return
                with collector._lock:
                    collector._spans.extend(received)
                    collector.requests += 1
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="otlp-collector", daemon=True
        )

    @property
    def endpoint(self) -> str:
        """What OTEL_EXPORTER_OTLP_ENDPOINT should say (the exporter adds /v1/traces)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], Any], timeout: float, what: str
    ) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = predicate(self.spans())
            if found:
                return found
            if time.monotonic() > deadline:
                names = sorted({s.name for s in self.spans()})
                raise AssertionError(f"the collector did not receive {what} in {timeout}s: {names}")
            time.sleep(0.05)

    def __enter__(self) -> Collector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
