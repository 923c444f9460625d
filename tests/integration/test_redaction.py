"""Redaction where a run's data leaves for people and other systems (issue
53, "Redaction"): with ``redact=["email"]``, the address a trigger carries
reaches the model's request at a loopback provider and stays in the journal,
but no JSON log line, no span (content capture on, an in-memory exporter),
no notifier's webhook body and no frame of the public event stream carries
it."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runner import Agent, Engine, tool
from runner.core.coordination.leases import Leases
from runner.core.observe.logs import JsonFormatter, RunContextFilter
from runner.core.settings import Settings
from runner.notifiers import WebhookNotifier
from runner.observe.otel import OtelObserver
from runner.sse import sse_stream
from store.db import make_engine
from store.models import RunStatus
from store.postgres import PostgresStore
from tests.helpers import unique
from tests.integration.test_notifier_webhooks import SECRET, Service
from tests.integration.test_otel_spans import every_text
from tests.provider import Provider, answer, tool_calls

log = logging.getLogger(__name__)
ADDRESS = re.compile(r"ada\.[0-9a-f]{8}@example\.com")


class Lines(logging.Handler):
    """Log lines as a worker writes them: the run context, the JSON format."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.addFilter(RunContextFilter())
        self.setFormatter(JsonFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def service() -> Iterator[Service]:
    made = Service()
    yield made
    made.close()


@pytest.fixture
def provider() -> Iterator[Provider]:
    def script(step: int, body: dict[str, Any]) -> dict[str, Any]:
        # The model reads the address from what it is sent (a marker if redacted).
        asked = json.dumps(body)
        found = ADDRESS.search(asked)
        to = found.group(0) if found else "nobody"
        if '"role": "tool"' in asked:
            return answer(f"Sent the summary to {to}")
        return tool_calls(("call-1", "send_mail", {"to": to, "subject": "Summary"}))

    with Provider(script) as server:
        yield server


@dataclasses.dataclass
class Traced:
    engine: Engine
    exporter: InMemorySpanExporter


@pytest.fixture
def traced(pg_store: PostgresStore, leases: Leases, settings: Settings) -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    spans = TracerProvider()
    spans.add_span_processor(SimpleSpanProcessor(exporter))
    captured = dataclasses.replace(settings, otel=True, otel_capture_content=True)
    engine = Engine(
        pg_store,
        leases=leases,
        settings=captured,
        enqueue=None,
        observers=[OtelObserver(captured, tracer_provider=spans)],
    )
    yield Traced(engine, exporter)
    engine.close()
    spans.shutdown()


def mailing_agent(provider: Provider, service: Service) -> str:
    name = unique("redact")

    @tool
    def send_mail(to: str, subject: str) -> str:
        """Send a mail."""
        log.info("sending %r to %s", subject, to)
        return f"queued for {to}"

    Agent(
        name=name,
        model="openai/loopback",
        model_settings={"api_base": provider.base_url, "api_key": "sk-loopback"},
        instructions="Mail the summary.",
        tools=[send_mail],
        approvals={"send_mail": True},
        notifier=WebhookNotifier(service.url, SECRET),
        redact=["email"],
    )
    return name


def test_an_address_reaches_the_model_and_the_journal_and_nothing_else(
    traced: Traced, provider: Provider, service: Service, lines: Lines, database_url: str
) -> None:
    engine = traced.engine
    address = f"ada.{uuid.uuid4().hex[:8]}@example.com"
    run = engine.start(mailing_agent(provider, service), f"Mail the summary to {address}")

    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    [approval] = engine.approvals(run.id)
    # The webhook's link token decides it: redaction leaves the token whole.
    [(_, body)] = service.deliveries
    assert body is not None
    engine.decide(approval.approval_id, True, token=body["token"], by="link")
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED, done and done.error
    assert done.output == f"Sent the summary to {address}"

    # The model was sent the real address, in the trigger and the tool's result.
    [first, second] = provider.answered()
    assert address in json.dumps(first.body) and address in json.dumps(second.body)
    assert f"queued for {address}" in json.dumps(second.body)

    # The journal keeps it: the trigger, the approval's input, the steps, the output.
    database = make_engine(database_url, pool_size=1)
    with database.connect() as connection:
        journal = {
            table: connection.execute(sa.text(f"SELECT {table}::text FROM {table}")).scalars().all()
            for table in ("runs", "steps", "approvals")
        }
    database.dispose()
    assert all(any(address in row for row in rows) for rows in journal.values()), journal

    # The log lines (the tool's own, the engine's) carry none of it.
    assert lines.lines, "no log line was written"
    assert any("[redacted:email]" in line for line in lines.lines)  # the tool's line
    assert [line for line in lines.lines if address in line] == []

    # Nor do the spans, content capture on.
    spans = list(traced.exporter.get_finished_spans())
    texts = every_text(spans)
    assert any("[redacted:email]" in text for text in texts)
    assert [text for text in texts if address in text] == []

    # Nor the notifier's webhook: it says what is asked, without the address.
    assert body["tool_name"] == "send_mail"
    assert body["input"] == {"to": "[redacted:email]", "subject": "Summary"}
    assert address not in json.dumps(body)

    # Nor the public event stream; what the approver is shown keeps it.
    frames = b"".join(sse_stream(engine, run.id, None, timeout=5)).decode()
    assert "[redacted:email]" in frames and '"reason":"settled"' in frames
    assert address not in frames
    assert engine.approvals(run.id)[0].input["to"] == address
