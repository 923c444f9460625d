"""OpenTelemetry spans of runs, in process: the tree from the
caller's request span through the executions, steps, model and tool calls;
the GenAI attributes; approval, retry and failure on the spans; what kind of
decision a person made (edited, for the run, an answer); no content unless
asked. Spans go to an in-memory exporter of a provider of the test's
own (the global one is left alone)."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import tests.agents_otel as agents_otel
import tests.agents_planned as planned
from runner import Agent, Engine
from runner.core.coordination.leases import Leases, lease_key
from runner.core.observe import ModelCall, ToolCall
from runner.core.settings import Settings
from runner.observe.otel import OtelObserver
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from store.models import (
    Approval,
    Fence,
    Run,
    RunStatus,
    StepKind,
    TriggerEnvelope,
    Usage,
    utcnow,
)
from store.postgres import PostgresStore
from tests.helpers import run_in_thread, wait_for


@dataclasses.dataclass
class Traced:
    engine: Engine
    exporter: InMemorySpanExporter
    provider: TracerProvider
    queued: list[str]

    @property
    def tracer(self) -> trace.Tracer:
        """The web app's tracer, on the same provider as the engine's."""
        return self.provider.get_tracer("tests.web")

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


def make_traced(
    store: PostgresStore, leases: Leases, settings: Settings, **engine_args: Any
) -> Traced:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    queued: list[str] = []
    engine = Engine(
        store,
        leases=leases,
        settings=settings,
        enqueue=queued.append,
        observers=[OtelObserver(settings, tracer_provider=provider)],
        **{"model_retries": 2, "model_backoff_seconds": 0.01, **engine_args},
    )
    return Traced(engine, exporter, provider, queued)


@pytest.fixture
def traced(pg_store: PostgresStore, leases: Leases, settings: Settings) -> Iterator[Traced]:
    made = make_traced(pg_store, leases, dataclasses.replace(settings, otel=True), model_retries=0)
    yield made
    made.engine.close()
    made.provider.shutdown()


@pytest.fixture
def traced_content(pg_store: PostgresStore, leases: Leases, settings: Settings) -> Iterator[Traced]:
    made = make_traced(
        pg_store, leases, dataclasses.replace(settings, otel=True, otel_capture_content=True)
    )
    yield made
    made.engine.close()
    made.provider.shutdown()


def a_run() -> Run:
    now = utcnow()
    return Run("run-1", "agent", RunStatus.RUNNING, TriggerEnvelope(), Usage(), now, now)


@pytest.fixture
def memory() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A provider of the test's own, keeping its spans in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@pytest.fixture
def pg_traced(pg_store: PostgresStore, leases: Leases, settings: Settings) -> Iterator[Traced]:
    made = make_traced(pg_store, leases, dataclasses.replace(settings, otel=True))
    yield made
    made.engine.close()
    made.provider.shutdown()


def secret() -> str:
    return f"secret-{uuid.uuid4().hex}"


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def event(span: ReadableSpan, name: str) -> dict[str, Any]:
    [found] = [dict(e.attributes or {}) for e in span.events if e.name == name]
    return found


def every_text(spans: list[ReadableSpan]) -> list[str]:
    """Every string a span carries: names, attribute and event values, status,
    links; what a backend would store."""
    found: list[str] = []

    def values(attributes: Any) -> None:
        for key, value in dict(attributes or {}).items():
            found.append(str(key))
            items = value if isinstance(value, tuple | list) else (value,)
            found.extend(str(v) for v in items)

    for span in spans:
        found.append(span.name)
        values(span.attributes)
        for item in span.events:
            found.append(item.name)
            values(item.attributes)
        for link in span.links:
            values(link.attributes)
        found.append(span.status.description or "")
        values(span.resource.attributes)
    return found


def run_otel_agent(traced: Traced, payload: dict[str, Any]) -> tuple[str, str]:
    """Start the ``otel`` agent in a request span, execute it to its approval,
    approve it in another request span, execute it to the end. Returns the
    run id and the approval id."""
    engine = traced.engine
    with traced.tracer.start_as_current_span("POST /runs", kind=SpanKind.SERVER):
        run = engine.start("otel", payload)
    assert engine.execute(run.id) is not None
    [approval] = engine.approvals(run.id)
    with traced.tracer.start_as_current_span("POST /approvals", kind=SpanKind.SERVER):
        engine.decide(
            approval.approval_id, True, "fine by me", token=engine.token(approval.approval_id)
        )
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED, done
    return run.id, approval.approval_id


def test_one_trace_from_the_request_through_the_approval_to_the_answer(
    traced: Traced, caplog: pytest.LogCaptureFixture
) -> None:
    marker = secret()
    agents_otel.SEEN.clear()
    with caplog.at_level(logging.WARNING, logger="opentelemetry"):
        run_id, approval_id = run_otel_agent(traced, {"secret": marker, "slow": 1})
    # Every context was detached where it was attached, and nothing was left current.
    assert [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")] == []
    assert not trace.get_current_span().get_span_context().is_valid
    engine = traced.engine
    run = engine.get_run(run_id)
    spans = traced.spans()
    by_id = {s.context.span_id: s for s in spans}

    def parent(span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None, span.name
        return by_id[span.parent.span_id]

    [request] = [s for s in spans if s.name == "POST /runs"]
    [start] = [s for s in spans if s.name == "runwright.start otel"]
    [approve_request] = [s for s in spans if s.name == "POST /approvals"]
    [decision] = [s for s in spans if s.name == "runwright.approval refund"]
    the_trace = request.context.trace_id
    assert {s.context.trace_id for s in spans if s is not approve_request} == {the_trace}
    assert request.parent is None
    assert parent(start) is request and start.kind is SpanKind.PRODUCER
    assert run.trace_context is not None
    assert run.trace_context["traceparent"].split("-")[2] == f"{start.context.span_id:016x}"

    executions = sorted(
        (s for s in spans if s.name == "invoke_agent otel"), key=lambda s: s.start_time or 0
    )
    assert len(executions) == 2
    for number, execution in enumerate(executions, 1):
        assert parent(execution) is start and execution.kind is SpanKind.CONSUMER
        a = attrs(execution)
        assert a["runwright.run_id"] == run_id and a["runwright.agent"] == "otel"
        assert a["runwright.epoch"] == number
        assert a["gen_ai.operation.name"] == "invoke_agent"
        assert a["gen_ai.agent.name"] == "otel"
        assert str(a["runwright.worker"]).count(":") == 2  # host:pid:nonce
    first, second = executions
    assert attrs(first)["runwright.run.status"] == "waiting"
    assert attrs(second)["runwright.run.status"] == "completed"
    assert attrs(second)["runwright.run.steps"] == run.steps_used
    assert attrs(second)["runwright.run.input_tokens"] == run.usage.input_tokens

    steps = [s for s in spans if s.name == "runwright.step"]
    step_of = {s.context.span_id: (parent(s), attrs(s)["runwright.step"]) for s in steps}
    for span in steps:
        assert attrs(span)["runwright.run_id"] == run_id
        assert attrs(span)["runwright.epoch"] == attrs(parent(span))["runwright.epoch"]
    indices = sorted({index for _, index in step_of.values()})
    assert indices == list(range(1, run.steps_used + 1))
    assert [i for p, i in step_of.values() if p is first] == [1, 2]
    # The approval's step is resumed by the second execution: its refund, no model call.
    assert sorted(i for p, i in step_of.values() if p is second) == [2, 3, 4, 5]

    recorded = engine.steps(run_id)
    chats = {step_of[parent(c).context.span_id][1]: c for c in spans if c.name == "chat otel"}
    llm_steps = {s.index: s for s in recorded if s.kind is StepKind.LLM}
    assert sorted(chats) == sorted(llm_steps)
    for index, chat in chats.items():
        a = attrs(chat)
        assert a["runwright.step"] == index
        assert chat.kind is SpanKind.CLIENT
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == "otel"
        assert a["runwright.model"] == "scripted/otel"
        assert a["gen_ai.provider.name"] == a["gen_ai.system"] == "scripted"
        assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (10, 5)
        assert a["gen_ai.response.finish_reasons"] in (("tool_calls",), ("stop",))
        # Scripted models have no price: no cost (a priced one: see the hook test below).
        assert a.get("runwright.cost_usd") == llm_steps[index].cost_usd

    tool_spans = {attrs(s)["gen_ai.tool.call.id"]: s for s in spans if s.name.startswith("exec")}
    tool_steps = [s for s in recorded if s.kind is StepKind.TOOL]
    assert set(tool_spans) == {s.tool_call_id for s in tool_steps}
    for record in tool_steps:
        span = tool_spans[record.tool_call_id]
        assert span.name == f"execute_tool {record.name}"
        a = attrs(span)
        assert a["gen_ai.operation.name"] == "execute_tool"
        assert a["gen_ai.tool.name"] == record.name
        assert a["runwright.tool.effect"] is (record.name == "refund")
        assert step_of[parent(span).context.span_id][1] == record.index == a["runwright.step"]
        failed = record.name == "flaky"
        assert (span.status.status_code is StatusCode.ERROR) is failed
        if failed:
            assert span.status.description is not None
            assert "back room is offline" in span.status.description
            assert a["error.type"] == "tool_error"
    # A sync tool runs in a pool thread, under its own tool span.
    [where] = [s for s in tool_spans.values() if s.name == "execute_tool where"]
    assert [where.context] == agents_otel.SEEN

    [asking] = [s for s in steps if parent(s) is first and attrs(s)["runwright.step"] == 2]
    requested = event(asking, "runwright.approval.requested")
    assert requested["runwright.approval.id"] == approval_id
    assert requested["gen_ai.tool.name"] == "refund"
    assert decision.context.trace_id == the_trace and parent(decision) is start
    assert [link.context.span_id for link in decision.links] == [approve_request.context.span_id]
    decided = event(decision, "runwright.approval.decided")
    assert decided["runwright.approval.id"] == approval_id
    assert decided["runwright.approval.decision"] == "approved"
    assert decided["runwright.approval.waited_seconds"] >= 0

    assert not [text for text in every_text(spans) if marker in text]
    assert not [text for text in every_text(spans) if "fine by me" in text]


def test_content_is_on_the_spans_only_when_asked(traced_content: Traced) -> None:
    marker = secret()
    run_otel_agent(traced_content, {"secret": marker})
    spans = traced_content.spans()
    [first, second] = [s for s in spans if s.name == "invoke_agent otel"]
    assert marker in attrs(first)["runwright.payload"]
    assert attrs(second)["runwright.output"] == "all done"
    [asking] = [s for s in spans if any(e.name == "runwright.approval.requested" for e in s.events)]
    assert marker in event(asking, "runwright.approval.requested")["gen_ai.tool.call.arguments"]
    [decision] = [s for s in spans if s.name == "runwright.approval refund"]
    decided = event(decision, "runwright.approval.decided")
    assert marker in decided["gen_ai.tool.call.arguments"]
    assert decided["runwright.approval.reason"] == "fine by me"
    # The messages each model call was sent (the trigger's payload among
    # them) and its answer; every tool call's arguments and result.
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert chats and all("gen_ai.input.messages" in attrs(c) for c in chats)
    assert marker in attrs(chats[0])["gen_ai.input.messages"]
    assert all("gen_ai.output.messages" in attrs(c) for c in chats)
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert tools and all("gen_ai.tool.call.arguments" in attrs(t) for t in tools)
    assert all("gen_ai.tool.call.result" in attrs(t) for t in tools)


def test_what_the_hooks_report_is_on_the_spans(
    settings: Settings, memory: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """Driving the hooks directly: a priced model call's cost and provider;
    a tool call's arguments and result, recorded only when asked."""
    provider, exporter = memory
    observer = OtelObserver(settings, tracer_provider=provider)
    priced = ModelCall("anthropic/claude-sonnet-4", 1, Usage(120, 30), "stop", 0.0123)
    with observer.model_call(a_run(), priced):
        pass
    [chat] = exporter.get_finished_spans()
    assert chat.name == "chat claude-sonnet-4"
    assert attrs(chat) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "claude-sonnet-4",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.system": "anthropic",
        "runwright.model": "anthropic/claude-sonnet-4",
        "runwright.step": 1,
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "gen_ai.response.finish_reasons": ("stop",),
        "runwright.cost_usd": 0.0123,
    }
    exporter.clear()
    for capture in (False, True):
        observer = OtelObserver(
            dataclasses.replace(settings, otel_capture_content=capture), tracer_provider=provider
        )
        call = ToolCall("search", f"call-{capture}", 1)
        call.arguments = {"q": "the marker"}
        call.result = "found the marker"
        with observer.tool_call(a_run(), call):
            pass
    quiet, loud = exporter.get_finished_spans()
    assert not [t for t in every_text([quiet]) if "marker" in t]
    assert attrs(loud)["gen_ai.tool.call.arguments"] == '{"q": "the marker"}'
    assert attrs(loud)["gen_ai.tool.call.result"] == "found the marker"


def test_a_model_failure_is_an_error_on_its_span_and_a_retry_an_event(traced: Traced) -> None:
    engine = traced.engine
    run = engine.start("otel-hiccup", {})
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.QUEUED and waiting.retry_at
    spans = traced.spans()
    [chat] = [s for s in spans if s.name == "chat otel-hiccup"]
    assert chat.status.status_code is StatusCode.ERROR
    assert attrs(chat)["error.type"] == "ModelError"
    assert [e.name for e in chat.events] == ["exception"]
    [execution] = [s for s in spans if s.name == "invoke_agent otel-hiccup"]
    retry = event(execution, "runwright.retry.scheduled")
    assert retry["runwright.retry.attempts"] == 1
    assert retry["runwright.retry.at"] == waiting.retry_at.isoformat()
    assert execution.status.status_code is StatusCode.UNSET  # queued again, not failed
    [step] = [s for s in spans if s.name == "runwright.step"]
    assert step.status.status_code is StatusCode.ERROR  # the exception passed through it


def test_a_failed_run_marks_its_execution_span(traced: Traced) -> None:
    engine = traced.engine
    run = engine.start("otel-refused", {})
    failed = engine.execute(run.id)
    assert failed is not None and failed.status is RunStatus.FAILED and failed.error is not None
    [execution] = [s for s in traced.spans() if s.name == "invoke_agent otel-refused"]
    assert execution.status.status_code is StatusCode.ERROR
    assert execution.status.description == f"model_error: {failed.error.message}"[:1024]
    assert attrs(execution)["error.type"] == "model_error"
    assert attrs(execution)["runwright.run.status"] == "failed"


def test_a_run_started_outside_any_trace_roots_its_own(traced: Traced) -> None:
    engine = traced.engine
    run = engine.start("otel-refused", {})
    engine.execute(run.id)
    spans = traced.spans()
    [start] = [s for s in spans if s.name == "runwright.start otel-refused"]
    [execution] = [s for s in spans if s.name == "invoke_agent otel-refused"]
    assert attrs(start)["runwright.run_id"] == run.id  # the start span names its run
    assert start.parent is None
    assert execution.parent is not None and execution.parent.span_id == start.context.span_id
    assert execution.links == ()  # the executing thread had no span of its own


def test_a_takeover_in_one_process_keeps_each_executions_spans_apart(
    pg_traced: Traced, pg_store: PostgresStore, leases: Leases
) -> None:
    # The takeover is staged by expiring the claim with SQL and deleting the
    # lease, as a dead owner would leave them. Both executions are tasks on
    # this process's loop, at the same time.
    traced = pg_traced
    engine = traced.engine
    name = f"otel-takeover-{uuid.uuid4().hex[:8]}"
    takeover_started = threading.Event()

    def script(request: Request) -> Reply:
        slow = request.step == 1 and not takeover_started.is_set()
        if request.step < 3:
            return tools(call("search", {"q": str(request.step)}), latency=2.0 if slow else 0)
        return text("done by the new owner")

    model = ScriptedModel(name, script)
    Agent(name=name, model=model.model, tools=[agents_otel.search])
    run = engine.start(name)
    old, old_box = run_in_thread(engine, run.id)
    wait_for(lambda: model.call_count == 1)
    takeover_started.set()
    with pg_store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE runs SET claim_expires_at = now() - interval '1 second' WHERE id = :id"
            ),
            {"id": run.id},
        )
    leases.redis.delete(lease_key(run.id))
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    old.join(10)
    assert old_box["run"] is None

    spans = traced.spans()
    by_id = {s.context.span_id: s for s in spans}
    executions = {attrs(s)["runwright.epoch"]: s for s in spans if s.name.startswith("invoke")}
    assert sorted(executions) == [1, 2]
    lost, taker = executions[1], executions[2]
    lease_lost = event(lost, "runwright.lease_lost")
    # The new owner's epoch, unless it had finished by the time the old one looked.
    assert lease_lost["runwright.epoch"] == 1
    assert lease_lost.get("runwright.current_epoch", 2) == 2
    assert lost.status.status_code is StatusCode.ERROR
    assert attrs(lost)["error.type"] == "lease_lost"
    assert event(taker, "runwright.takeover")["runwright.previous_epoch"] == 1
    assert taker.status.status_code is StatusCode.UNSET
    # Every step and call hangs under its own execution, never the other's.
    for span in spans:
        if span.name in ("runwright.step", "chat " + name) or span.name.startswith("execute_tool"):
            up = span
            while not up.name.startswith("invoke"):
                assert up.parent is not None
                up = by_id[up.parent.span_id]
            epoch = attrs(span).get("runwright.epoch", attrs(up)["runwright.epoch"])
            assert attrs(up)["runwright.epoch"] == epoch
    old_steps = [
        s for s in spans if s.name == "runwright.step" and attrs(s)["runwright.epoch"] == 1
    ]
    assert [attrs(s)["runwright.step"] for s in old_steps] == [1]
    assert old_steps[0].status.status_code is StatusCode.ERROR  # LeaseLostError went through it


def test_a_broken_stored_context_starts_a_trace_of_its_own(
    settings: Settings, memory: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """The stored context comes back from the database: a value that is not a
    W3C trace context is ignored, never an error in the execution."""
    provider, exporter = memory
    observer = OtelObserver(settings, tracer_provider=provider)
    broken: list[Any] = [
        {"traceparent": "00-not-a-trace-01"},
        {"traceparent": 42},
        {7: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        {"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
    ]
    for stored in broken:
        run = dataclasses.replace(a_run(), trace_context=stored)
        with observer.execution(run, Fence(run.id, "owner", 1), "worker"):
            pass
    assert [s.parent for s in exporter.get_finished_spans()] == [None] * len(broken)


def test_an_mcp_tool_call_is_an_execute_tool_span_naming_its_server(traced: Traced) -> None:
    import sys

    from runner.core.mcp import MCPServer
    from runner.core.mcp.sessions import close_all
    from tests.services import ROOT

    server = MCPServer.stdio(
        "tracker",
        sys.executable,
        args=["-m", "tests.mcp_servers"],
        cwd=str(ROOT),
        env=lambda: {"PYTHONPATH": str(ROOT), "TRACKER_TOKEN": "secret-token-otel"},
    )
    name = f"otel-mcp-{uuid.uuid4().hex[:8]}"
    model = ScriptedModel(name, [tools(call("tracker_lookup", {"q": "A7"})), text("done")])
    Agent(name=name, model=model.model, mcp=[server])
    try:
        run = traced.engine.start(name)
        done = traced.engine.execute(run.id)
    finally:
        close_all()
    assert done is not None and done.status is RunStatus.COMPLETED
    [span] = [s for s in traced.spans() if s.name == "execute_tool tracker_lookup"]
    attributes = dict(span.attributes or {})
    assert attributes["runwright.mcp.server"] == "tracker"
    assert attributes["gen_ai.tool.name"] == "tracker_lookup"
    assert attributes["runwright.tool.effect"] is False
    # The server's credentials are in no span.
    assert "secret-token-otel" not in repr([(s.attributes, s.events) for s in traced.spans()])
    # A Python tool's span names no server.
    assert not any(
        "runwright.mcp.server" in dict(s.attributes or {})
        for s in traced.spans()
        if s.name.startswith("execute_tool") and s is not span
    )


def test_a_child_runs_spans_are_under_its_parents_tool_call(traced: Traced) -> None:
    child_name = f"otel-child-{uuid.uuid4().hex[:8]}"
    child_model = ScriptedModel(child_name, [text("helped")])
    child = Agent(name=child_name, model=child_model.model)
    name = f"otel-lead-{uuid.uuid4().hex[:8]}"
    model = ScriptedModel(name, [tools(call(child.name, {"task": "help"})), text("done")])
    Agent(name=name, model=model.model, tools=[child.as_tool()])
    run = traced.engine.start(name)
    while traced.queued:
        traced.engine.execute(traced.queued.pop(0))
    assert traced.engine.get_run(run.id).status is RunStatus.COMPLETED
    [kid] = traced.engine.children(run.id)
    spans = traced.spans()
    [tool_span] = [s for s in spans if s.name == f"execute_tool {child.name}"]
    [child_execution] = [s for s in spans if s.name == f"invoke_agent {child.name}"]
    # The child's execution joins the parent's trace, under the call that started it
    # (through the start span the call opened).
    assert child_execution.context.trace_id == tool_span.context.trace_id
    by_id = {s.context.span_id: s for s in spans}
    chain = []
    parent = child_execution.parent
    while parent is not None and parent.span_id in by_id:
        chain.append(by_id[parent.span_id].name)
        parent = by_id[parent.span_id].parent
    assert chain[:2] == [f"runwright.start {child.name}", f"execute_tool {child.name}"], chain
    assert dict(child_execution.attributes or {})["runwright.run_id"] == kid.id


def decide_what_people_do(engine: Engine, marker: str) -> list[Approval]:
    """A step of the ``planned`` agent asks for three refunds and a question;
    a person approves the first with an edit, the second for the rest of the
    run (which approves the third with it), and answers the question. Its
    requests, decided: the edited, the granting, the question, the standing."""
    run = engine.start(
        planned.PEOPLE,
        planned.plan(
            [
                ("refund", {"amount": 5}),
                ("lookup", {"order": "7"}),
                ("refund", {"amount": 6}),
                ("ask_human", {"question": f"Which colour? {marker}"}),
                ("refund", {"amount": 7}),
            ]
        ),
    )
    assert engine.execute(run.id) is not None
    edited, granting, question, _ = engine.approvals(run.id)
    engine.decide(edited.approval_id, True, trusted=True, by="ada", arguments={"amount": 4})
    engine.decide(granting.approval_id, True, trusted=True, by="ada", for_run=True)
    engine.answer(question.approval_id, f"blue {marker}", trusted=True, by="cy")
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED, done
    return engine.approvals(run.id)


def decisions(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    """The decision spans by the tool call each decided."""
    found = {}
    for span in spans:
        if span.name.startswith("runwright.approval "):
            call_id = event(span, "runwright.approval.decided")["gen_ai.tool.call.id"]
            found[call_id] = span
    return found


def test_a_decision_says_whether_it_was_edited_for_the_run_standing_or_an_answer(
    traced: Traced,
) -> None:
    marker = secret()
    edited, granting, question, standing = decide_what_people_do(traced.engine, marker)
    spans = decisions(traced.spans())
    # Each decision, the one the grant made with it too.
    assert set(spans) == {a.tool_call_id for a in (edited, granting, question, standing)}

    def how(approval: Approval) -> tuple[Any, ...]:
        span = spans[approval.tool_call_id]
        on_event = event(span, "runwright.approval.decided")
        keys = (
            "runwright.approval.kind",
            "runwright.approval.decision",
            "runwright.approval.edited",
            "runwright.approval.for_run",
            "runwright.approval.standing",
        )
        assert {k: attrs(span)[k] for k in keys} == {k: on_event[k] for k in keys}
        return tuple(on_event[k] for k in keys)

    assert how(edited) == ("approval", "approved", True, False, False)
    assert how(granting) == ("approval", "approved", False, True, False)
    assert how(standing) == ("approval", "approved", False, False, True)
    assert how(question) == ("input", "answered", False, False, False)
    assert spans[question.tool_call_id].name == "runwright.approval ask_human"
    granted = event(spans[standing.tool_call_id], "runwright.approval.decided")
    assert granted["runwright.approval.standing_from"] == granting.approval_id
    # No content without capture: not the edit, the answer or the question.
    assert not [t for t in every_text(traced.spans()) if marker in t]
    captured = ("runwright.approval.arguments", "runwright.approval.answer")
    assert not [
        k for s in spans.values() for k in event(s, "runwright.approval.decided") if k in captured
    ]


def test_the_edit_and_the_answer_are_on_the_span_only_when_asked(traced_content: Traced) -> None:
    marker = secret()
    edited, _, question, _ = decide_what_people_do(traced_content.engine, marker)
    spans = decisions(traced_content.spans())
    on_edit = event(spans[edited.tool_call_id], "runwright.approval.decided")
    assert json.loads(on_edit["runwright.approval.arguments"]) == {"amount": 4}
    assert json.loads(on_edit["gen_ai.tool.call.arguments"]) == {"amount": 5}  # the model's
    on_answer = event(spans[question.tool_call_id], "runwright.approval.decided")
    assert on_answer["runwright.approval.answer"] == f"blue {marker}"
    assert marker in on_answer["gen_ai.tool.call.arguments"]  # what the model asked
