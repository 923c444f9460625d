"""Traces across real processes (issue 13, acceptance 1): a run started from a
web request, approved from another, and resumed on a second worker after its
first was SIGKILLed mid-run, is one trace at a real OTLP/HTTP collector, with
GenAI attributes on its model and tool spans and nothing of its payload or
tool arguments anywhere."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import tests.agents_otel  # noqa: F401  (the agents, known to the web app's engine too)
from runner import Engine
from runner.core.settings import Settings
from runner.observe.otel import OtelObserver
from store.models import RunStatus, StepKind
from tests.e2e.cluster import Cluster, Proc, wait_until
from tests.otel_collector import Collector, ReceivedSpan
from tests.otel_flask_app import create_app


@pytest.fixture
def collector() -> Iterator[Collector]:
    with Collector() as running:
        yield running


def of_run(run_id: str, name: str, spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name and s.attributes.get("runwright.run_id") == run_id]


def test_a_run_across_a_web_app_an_approval_and_a_sigkill_is_one_trace(
    collector: Collector, cluster: Cluster
) -> None:
    def worker(name: str) -> Proc:
        return cluster.worker(
            name,
            RUNWRIGHT_OTEL="1",
            RUNWRIGHT_AGENTS="tests.agents,tests.agents_otel",
            OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
            OTEL_BSP_SCHEDULE_DELAY="100",
        )

    workers = {w.pid: w for w in (worker("w1"), worker("w2"))}
    cluster.beat()

    # The web app: its own tracer provider, exporting to the same collector.
    provider = TracerProvider(resource=Resource.create({"service.name": "shop-web"}))
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"{collector.endpoint}/v1/traces"), schedule_delay_millis=100
        )
    )
    settings = Settings.from_env(cluster.env(RUNWRIGHT_OTEL="1"))
    sender = cluster.engine()
    engine = Engine(
        sender.store,
        leases=sender.leases,
        enqueue=sender.enqueue,
        settings=settings,
        observers=[OtelObserver(settings, tracer_provider=provider)],
    )
    client = create_app(engine, provider.get_tracer("shop-web")).test_client()
    marker = f"secret-{uuid.uuid4().hex}"
    try:
        started = client.post("/runs/otel", json={"secret": marker, "slow": 6, "latency": 0.4})
        assert started.status_code == 201, started.text
        run_id = started.json["run_id"]  # type: ignore[index]
        waiting = wait_until(
            lambda: engine.get_run(run_id).status is RunStatus.WAITING and engine.get_run(run_id),
            60,
            "the run to wait for its approval",
        )
        approval_id = waiting.waiting.approval_id
        decided = client.post(
            f"/approvals/{approval_id}",
            json={"approve": True, "reason": f"ok {marker}", "token": engine.token(approval_id)},
        )
        assert decided.status_code == 200, decided.text

        # Kill the resumed execution once it has exported a few finished steps.
        def resumed_steps(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
            steps = of_run(run_id, "runwright.step", spans)
            return [s for s in steps if s.attributes["runwright.epoch"] == 2]

        collector.wait_for(lambda spans: len(resumed_steps(spans)) >= 3, 60, "three resumed steps")
        running = engine.get_run(run_id)
        assert running.status is RunStatus.RUNNING and running.claim is not None, running
        assert running.claim.epoch == 2
        victim = workers[int(running.claim.owner.split(":")[1])]
        victim.signal(signal.SIGKILL)
        victim.wait(10)
        done = wait_until(
            lambda: engine.get_run(run_id).status is RunStatus.COMPLETED and engine.get_run(run_id),
            60,
            "another worker to finish the run",
        )
        collector.wait_for(
            lambda spans: [
                s
                for s in of_run(run_id, "invoke_agent otel", spans)
                if s.attributes["runwright.epoch"] == 3
            ],
            30,
            "the takeover's execution span",
        )
        provider.force_flush()
        recorded = engine.steps(run_id)
    finally:
        engine.close()
        sender.close()
        provider.shutdown()

    spans = collector.spans()
    assert collector.errors == []
    by_id = {s.span_id: s for s in spans}
    [request] = [s for s in spans if s.name == "POST /runs/<agent>"]
    the_trace = request.trace_id
    in_trace = [s for s in spans if s.trace_id == the_trace]
    assert request.parent_id is None and request.kind == "server" and request.service == "shop-web"
    [start] = [s for s in in_trace if s.name == "runwright.start otel"]
    assert start.parent_id == request.span_id and start.kind == "producer"

    # The executions: before the approval, and the takeover; the killed one
    # never ended, so never left its worker: its finished steps did.
    executions = {
        s.attributes["runwright.epoch"]: s for s in of_run(run_id, "invoke_agent otel", spans)
    }
    assert sorted(executions) == [1, 3]
    for execution in executions.values():
        assert execution.trace_id == the_trace and execution.parent_id == start.span_id
        assert execution.kind == "consumer" and execution.service == "runwright-worker"
        assert execution.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert execution.attributes["runwright.agent"] == "otel"
    assert executions[1].attributes["runwright.run.status"] == "waiting"
    assert executions[3].attributes["runwright.run.status"] == "completed"
    assert (
        executions[3].attributes["runwright.worker"] != executions[1].attributes["runwright.worker"]
    )
    takeover = executions[3].event("runwright.takeover")
    assert takeover.attributes["runwright.previous_epoch"] == 2

    steps = of_run(run_id, "runwright.step", spans)
    assert all(s.trace_id == the_trace for s in steps)
    by_epoch: dict[int, list[ReceivedSpan]] = {}
    for step in steps:
        by_epoch.setdefault(step.attributes["runwright.epoch"], []).append(step)
    assert sorted(by_epoch) == [1, 2, 3]
    for epoch in (1, 3):
        assert {s.parent_id for s in by_epoch[epoch]} == {executions[epoch].span_id}
    [killed_parent] = {s.parent_id for s in by_epoch[2]}
    assert killed_parent not in by_id
    indices = {s.attributes["runwright.step"] for s in steps}
    assert indices == set(range(1, done.steps_used + 1))

    # Model and tool spans, with their GenAI attributes, for every recorded step.
    chats = [s for s in in_trace if s.name == "chat otel"]
    assert {s.index for s in recorded if s.kind is StepKind.LLM} <= {
        c.attributes["runwright.step"] for c in chats
    }
    for chat in chats:
        assert chat.kind == "client"
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "otel"
        assert chat.attributes["gen_ai.provider.name"] == "scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 10
        assert chat.attributes["gen_ai.usage.output_tokens"] == 5
        assert chat.attributes["gen_ai.response.finish_reasons"] in (("tool_calls",), ("stop",))
    tools = {
        s.attributes["gen_ai.tool.call.id"]: s
        for s in in_trace
        if s.name.startswith("execute_tool ")
    }
    for record in (s for s in recorded if s.kind is StepKind.TOOL):
        span = tools[record.tool_call_id]
        assert span.name == f"execute_tool {record.name}"
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.name"] == record.name
        assert span.attributes["runwright.step"] == record.index
        assert span.status == ("error" if record.name == "flaky" else "unset")

    # The approval: asked on step 2 of the first execution, decided in the web app.
    [asking] = [s for s in by_epoch[1] if s.attributes["runwright.step"] == 2]
    assert (
        asking.event("runwright.approval.requested").attributes["runwright.approval.id"]
        == approval_id
    )
    [decision] = [s for s in in_trace if s.name == "runwright.approval refund"]
    assert decision.parent_id == start.span_id and decision.service == "shop-web"
    assert (
        decision.event("runwright.approval.decided").attributes["runwright.approval.decision"]
        == "approved"
    )
    [approve_request] = [s for s in spans if s.name == "POST /approvals/<approval_id>"]
    assert decision.links == [(approve_request.trace_id, approve_request.span_id)]

    # The workers' tracing went without a complaint (contexts, exports).
    for proc in workers.values():
        complaints = ("Failed to detach context", "Exception while exporting", "Queue full")
        assert [c for c in complaints if c in proc.log()] == [], proc.name

    # Nothing of the payload, the tool arguments or the reviewer's reason, anywhere.
    leaks = [(s.name, t) for s in spans for t in s.texts() if marker in t]
    assert leaks == []
