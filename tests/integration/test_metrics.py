"""Prometheus metrics in-process: the engine on the test's database, its hooks
counted into a registry of the test's own, read without HTTP."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry

import tests.agents_planned as planned
from runner import Agent, Budget, Engine, RunContext, tool
from runner.core.coordination.leases import Leases
from runner.core.errors import ConfigurationError
from runner.core.observe import ModelCall, TickReport, ToolCall
from runner.core.retry import RetryPolicy
from runner.core.settings import Settings
from runner.observe import metrics as m
from runner.testing import Reply, Request, ScriptedModel, call, rate_limited, text, tools
from store.local import free_port
from store.models import Fence, RunStatus, StepKind, Usage, utcnow
from store.postgres import PostgresStore
from tests.agents import lookup
from tests.helpers import expire_approval, parked_run, unique


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def observer(registry: CollectorRegistry) -> m.MetricsObserver:
    return m.MetricsObserver(m.Metrics(registry))


@pytest.fixture
def engine(
    pg_store: PostgresStore, observer: m.MetricsObserver, settings: Settings
) -> Iterator[Engine]:
    made = Engine(pg_store, settings=settings, model_retries=0, observers=[observer])
    yield made
    made.close()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value; 0 for a series never written."""
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def test_a_completed_run_counts_its_steps_tokens_and_latencies(
    engine: Engine, registry: CollectorRegistry
) -> None:
    name = unique("counted")
    in_flight: list[float] = []

    @tool
    def probe(ctx: RunContext) -> str:
        """Look at the gauge while the execution runs."""
        in_flight.append(value(registry, "runwright_executions_in_flight", agent=ctx.agent))
        return "seen"

    model = ScriptedModel(
        name,
        [
            tools(call("lookup", {"q": "a"}), call("probe"), usage=(100, 10)),
            tools(call("lookup", {"q": "b"}), usage=(200, 20)),
            text("done", usage=(300, 30)),
        ],
    )
    Agent(name=name, model=model.model, tools=[lookup, probe])
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED

    steps = engine.steps(run.id)
    llm = [s for s in steps if s.kind is StepKind.LLM]
    tool_steps = [s for s in steps if s.kind is StepKind.TOOL]
    assert (len(llm), len(tool_steps)) == (3, 3)
    assert in_flight == [1.0]
    assert value(registry, "runwright_executions_in_flight", agent=name) == 0
    assert value(registry, "runwright_runs_settled_total", agent=name, status="completed") == 1
    assert value(registry, "runwright_steps_total", agent=name, kind="llm") == len(llm)
    assert value(registry, "runwright_steps_total", agent=name, kind="tool") == len(tool_steps)
    labels = {"agent": name, "model": model.model}
    assert value(registry, "runwright_tokens_total", **labels, direction="input") == 600
    assert value(registry, "runwright_tokens_total", **labels, direction="output") == 60
    assert done.usage == Usage(600, 60)
    # A scripted model without a price is free: cost 0, which adds nothing.
    assert [s.cost_usd for s in llm] == [0.0] * 3
    assert registry.get_sample_value("runwright_cost_usd_total", labels) in (None, 0.0)
    assert value(registry, "runwright_model_call_duration_seconds_count", **labels) == 3
    assert (
        value(
            registry,
            "runwright_tool_call_duration_seconds_count",
            agent=name,
            tool="lookup",
            status="ok",
        )
        == 2
    )
    assert (
        value(
            registry,
            "runwright_tool_call_duration_seconds_count",
            agent=name,
            tool="probe",
            status="ok",
        )
        == 1
    )


def test_failures_are_counted_by_status_and_failed_calls_are_timed_not_stepped(
    engine: Engine, registry: CollectorRegistry
) -> None:
    budget_name, broken_name = unique("budget"), unique("broken")
    budget_model = ScriptedModel(budget_name, lambda r: tools(call("lookup", {"q": "x"})))
    Agent(
        name=budget_name,
        model=budget_model.model,
        tools=[lookup],
        budget=Budget(max_steps=2),
    )

    def broken(request: Request) -> Reply:
        if request.step == 1:
            return tools(call("lookup", {"q": "y"}))
        return Reply(error="bad_request")

    broken_model = ScriptedModel(broken_name, broken)
    Agent(name=broken_name, model=broken_model.model, tools=[lookup])

    over = engine.execute(engine.start(budget_name).id)
    assert over is not None and over.error is not None
    assert over.error.code == "budget_exceeded"
    failed = engine.execute(engine.start(broken_name).id)
    assert failed is not None and failed.error is not None
    assert failed.error.code == "model_error"

    for name in (budget_name, broken_name):
        assert value(registry, "runwright_runs_settled_total", agent=name, status="failed") == 1
        assert value(registry, "runwright_runs_settled_total", agent=name, status="completed") == 0
    assert value(registry, "runwright_steps_total", agent=budget_name, kind="llm") == 2
    assert value(registry, "runwright_steps_total", agent=budget_name, kind="tool") == 2
    # The failed call is timed, but it is no step and reports no tokens.
    broken_labels = {"agent": broken_name, "model": broken_model.model}
    assert value(registry, "runwright_model_call_duration_seconds_count", **broken_labels) == 2
    assert value(registry, "runwright_steps_total", agent=broken_name, kind="llm") == 1
    assert value(registry, "runwright_tokens_total", **broken_labels, direction="input") == 10


def test_a_durable_retry_is_counted(engine: Engine, registry: CollectorRegistry) -> None:
    name = unique("flaky")
    calls: list[int] = []

    def flaky(request: Request) -> Reply:
        calls.append(request.step)
        return Reply(error="server_error") if len(calls) == 1 else text("fine")

    model = ScriptedModel(name, flaky)
    Agent(
        name=name,
        model=model.model,
        retry=RetryPolicy(
            initial_backoff=0.01, max_backoff=0.01, max_attempts=3, in_call_retries=0
        ),
    )
    run = engine.start(name)
    first = engine.execute(run.id)
    assert first is not None and first.status is RunStatus.QUEUED and first.retry is not None
    assert value(registry, "runwright_retries_scheduled_total", agent=name) == 1
    assert value(registry, "runwright_runs_paused_total", agent=name, status="queued") == 1
    assert value(registry, "runwright_runs_settled_total", agent=name, status="queued") == 0


def test_waiting_for_an_approval_and_a_failed_notification(
    engine: Engine, registry: CollectorRegistry
) -> None:
    name = unique("asks")

    def refusing(request: Any) -> None:
        raise RuntimeError("the webhook is down")

    model = ScriptedModel(name, [tools(call("lookup", {"q": "z"})), text("ok")])
    Agent(
        name=name,
        model=model.model,
        tools=[lookup],
        approvals={"lookup": True},
        notifier=refusing,
    )
    run = engine.start(name)
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    # A pause for a person is not a settle: it is counted on its own.
    assert value(registry, "runwright_runs_paused_total", agent=name, status="waiting") == 1
    assert value(registry, "runwright_runs_settled_total", agent=name, status="waiting") == 0
    assert value(registry, "runwright_notification_failures_total", agent=name) == 1
    assert value(registry, "runwright_steps_total", agent=name, kind="tool") == 0

    assert waiting.waiting is not None
    approval_id = waiting.waiting.approval_id
    engine.decide(approval_id, True, token=engine.token(approval_id))
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert value(registry, "runwright_steps_total", agent=name, kind="tool") == 1
    assert value(registry, "runwright_runs_settled_total", agent=name, status="completed") == 1


def test_ticks_are_timed_unless_skipped(engine: Engine, registry: CollectorRegistry) -> None:
    engine.tick()
    assert value(registry, "runwright_tick_duration_seconds_count") == 1
    engine.deps.observer.tick(TickReport(skipped=True), 0.001)
    assert value(registry, "runwright_tick_duration_seconds_count") == 1


def test_cost_is_summed_by_agent_and_model(
    engine: Engine, observer: m.MetricsObserver, registry: CollectorRegistry
) -> None:
    name = unique("priced")
    Agent(name=name, model="scripted/none")
    run = engine.start(name)
    for cost in (0.25, None, 0.5):
        with observer.model_call(run, ModelCall("gpt-x", 1, usage=Usage(1, 1), cost_usd=cost)):
            pass
    assert value(registry, "runwright_cost_usd_total", agent=name, model="gpt-x") == 0.75


def test_takeovers_and_lease_losses_by_agent(
    engine: Engine, observer: m.MetricsObserver, registry: CollectorRegistry
) -> None:
    name = unique("taken")
    Agent(name=name, model="scripted/none")
    run = engine.start(name)
    fence = Fence(run.id, "w", 2)
    with observer.execution(run, fence, "w"):
        observer.taken_over(run, 1)
        observer.lease_lost(run.id, 2, 3)
    observer.lease_lost(run.id, 2, 3)  # no longer in flight: its agent is unknown
    assert value(registry, "runwright_takeovers_total", agent=name) == 1
    assert value(registry, "runwright_lease_losses_total", agent=name) == 1
    assert value(registry, "runwright_lease_losses_total", agent=m.OTHER) == 1


def test_label_values_are_capped_and_clipped(engine: Engine) -> None:
    registry = CollectorRegistry()
    observer = m.MetricsObserver(m.Metrics(registry), max_models=2, max_tools=1)
    name = unique("many")
    Agent(name=name, model="scripted/none")
    run = engine.start(name)
    for model in ("a", "b", "c", "d", "a"):
        with observer.model_call(run, ModelCall(model, 1, usage=Usage(1, 1))):
            pass
    for tool_name in ("t1", "t2"):
        with observer.tool_call(run, ToolCall(tool_name, "call-1", 1)):
            pass
    models = {
        s.labels["model"]: s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == "runwright_tokens_total" and s.labels["direction"] == "input"
    }
    assert models == {"a": 2.0, "b": 1.0, m.OTHER: 2.0}
    tool_calls = "runwright_tool_call_duration_seconds_count"
    assert value(registry, tool_calls, agent=name, tool="t1", status="ok") == 1
    assert value(registry, tool_calls, agent=name, tool=m.OTHER, status="ok") == 1
    long = m.Bounded(5)("x" * 1000)
    assert long == "x" * m.MAX_LABEL_CHARS


def test_executions_are_counted_by_the_agent_version_they_ran_on(
    engine: Engine, registry: CollectorRegistry
) -> None:
    from dataclasses import replace

    name = unique("versioned")
    model = ScriptedModel(name, [tools(call("lookup", {"q": "a"})), text("done")])
    Agent(name=name, model=model.model, tools=[lookup], version="2026-12-07")
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    version = done.version
    assert version is not None and done.started_version == version
    executions = "runwright_executions_total"
    assert value(registry, executions, agent=name, version=version, status="completed") == 1
    # A run that ended before any execution recorded its version, and the cap.
    own = CollectorRegistry()
    capped = m.MetricsObserver(m.Metrics(own), max_versions=1)
    for seen in (None, "aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        capped.ended(replace(done, version=seen), 1.0)
    assert value(own, executions, agent=name, version="none", status="completed") == 1
    assert value(own, executions, agent=name, version="aaaaaaaaaaaa", status="completed") == 1
    assert value(own, executions, agent=name, version=m.OTHER, status="completed") == 1


def test_no_label_holds_a_run_or_call_id(engine: Engine, registry: CollectorRegistry) -> None:
    name = unique("ids")
    model = ScriptedModel(name, [tools(call("lookup", {"q": "a"})), text("done")])
    Agent(name=name, model=model.model, tools=[lookup])
    runs = [engine.start(name, {"n": i}) for i in range(3)]
    for run in runs:
        engine.execute(run.id)
    ids = {r.id for r in runs}
    ids |= {s.tool_call_id for r in runs for s in engine.steps(r.id) if s.tool_call_id}
    labels = [v for family in registry.collect() for s in family.samples for v in s.labels.values()]
    assert labels and value(registry, "runwright_steps_total", agent=name, kind="tool") == 3
    assert [v for v in labels if any(i in v for i in ids)] == []


# ------------------------------------------------------------- scrape time


def scrape(registry: CollectorRegistry) -> dict[str, float]:
    return {
        s.name + ("" if not s.labels else str(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
    }


def test_backlog_and_last_tick_are_read_at_scrape_time(pg_store: PostgresStore) -> None:
    store = pg_store
    reads: list[int] = []
    last: list[float | None] = [None]

    def backlog() -> tuple[int, Any]:
        reads.append(1)
        return store.approval_backlog()

    registry = CollectorRegistry(auto_describe=True)
    collector = m.ScrapeTimeCollector(backlog, lambda: last[0], cache_seconds=3600)
    registry.register(collector)
    assert reads == []  # registering queries nothing
    first = scrape(registry)
    assert first["runwright_approvals_pending"] == 0
    assert first["runwright_approval_oldest_pending_age_seconds"] == 0
    assert first["runwright_last_tick_age_seconds"] == float("inf")
    assert first["runwright_metrics_source_up[('source', 'store')]"] == 1

    created = utcnow() - timedelta(seconds=90)
    store.approval_backlog = lambda: (2, created)  # type: ignore[method-assign]
    last[0] = time.time() - 4
    cached = scrape(registry)
    assert len(reads) == 1 and cached["runwright_approvals_pending"] == 0  # cached
    assert 4 <= cached["runwright_last_tick_age_seconds"] < 60  # never cached

    collector.cache_seconds = 0
    fresh = scrape(registry)
    assert len(reads) == 2 and fresh["runwright_approvals_pending"] == 2
    assert 90 <= fresh["runwright_approval_oldest_pending_age_seconds"] < 200


def test_a_failing_source_leaves_its_gauges_out_and_the_scrape_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def down() -> Any:
        raise ConnectionError("database down")

    registry = CollectorRegistry()
    registry.register(m.ScrapeTimeCollector(down, lambda: 1.0, cache_seconds=0))
    with caplog.at_level(logging.WARNING, logger=m.__name__):
        for _ in range(3):
            samples = scrape(registry)
    assert "runwright_approvals_pending" not in samples
    assert samples["runwright_metrics_source_up[('source', 'store')]"] == 0
    assert samples["runwright_metrics_source_up[('source', 'leases')]"] == 1
    assert "runwright_last_tick_age_seconds" in samples
    assert [r.getMessage() for r in caplog.records].count(
        "metrics: cannot read the store for the scrape: database down"
    ) == 1


def test_the_module_registry_is_its_own(settings: Settings) -> None:
    one = m.observer(settings)
    assert m.observer(settings) is one
    assert one.metrics.runs_settled in m.REGISTRY._collector_to_names
    names = {family.name for family in prometheus_client.REGISTRY.collect()}
    assert not any(n.startswith("runwright_") for n in names)


def test_a_host_that_is_not_ours_stops_the_worker_with_one_line() -> None:
    port = free_port()
    # 203.0.113.0/24 is for documentation: no interface of this machine has it.
    settings = Settings(metrics_port=port, metrics_host="203.0.113.7")
    with pytest.raises(ConfigurationError, match=r"RUNWRIGHT_METRICS_HOST='203\.0\.113\.7'"):
        m.start_worker(settings)


def test_a_port_in_use_stops_the_worker_with_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError, match=f"RUNWRIGHT_METRICS_PORT={port}"):
            m.start_worker(Settings(metrics_port=port))


def test_an_mcp_tools_calls_are_counted_under_its_prefixed_name(
    engine: Engine, registry: CollectorRegistry
) -> None:
    import sys

    from runner.core.mcp import MCPServer
    from runner.core.mcp.sessions import close_all
    from tests.services import ROOT

    server = MCPServer.stdio(
        "tracker",
        sys.executable,
        args=["-m", "tests.mcp_servers"],
        cwd=str(ROOT),
        env={"PYTHONPATH": str(ROOT)},
    )
    name = unique("mcp-metrics")
    model = ScriptedModel(
        name,
        [
            tools(call("tracker_lookup", {"q": "A7"}), call("tracker_broken", {})),
            text("done"),
        ],
    )
    Agent(name=name, model=model.model, mcp=[server])
    try:
        done = engine.execute(engine.start(name).id)
    finally:
        close_all()
    assert done is not None and done.status is RunStatus.COMPLETED
    for tool_name, status in (("tracker_lookup", "ok"), ("tracker_broken", "error")):
        # A failed call is timed too, and counted as an error.
        count = value(
            registry,
            "runwright_tool_call_duration_seconds_count",
            agent=name,
            tool=tool_name,
            status=status,
        )
        assert count == 1, tool_name
        calls = value(
            registry, "runwright_tool_calls_total", agent=name, tool=tool_name, status=status
        )
        assert calls == 1, tool_name
    assert value(registry, "runwright_steps_total", agent=name, kind="tool") == 2


def test_decisions_are_counted_by_kind_and_whether_they_were_edited(
    engine: Engine, registry: CollectorRegistry
) -> None:
    step = [("refund", {"amount": n}) for n in (1, 2, 3)]
    run = engine.start(
        planned.PEOPLE, planned.plan([*step, ("ask_human", {"question": "Which colour?"})])
    )
    engine.execute(run.id)
    edited, denied, expiring, question = engine.approvals(run.id)
    engine.decide(edited.approval_id, True, trusted=True, by="ada", arguments={"amount": 5})
    engine.decide(denied.approval_id, False, "no", trusted=True, by="bo")
    engine.answer(question.approval_id, "blue", trusted=True, by="cy")
    expire_approval(engine.store, expiring.approval_id)
    assert engine.tick().expired == 1
    # Approved for the rest of the run: its other pending call is counted too.
    granted = engine.start(planned.PEOPLE, planned.plan(step[:2]))
    engine.execute(granted.id)
    first, _ = engine.approvals(granted.id)
    engine.decide(first.approval_id, True, trusted=True, by="ada", for_run=True)

    def decisions(tool: str, decision: str, edited: str) -> float:
        labels = {"agent": planned.PEOPLE, "tool": tool, "decision": decision, "edited": edited}
        return value(registry, "runwright_approval_decisions_total", **labels)

    assert decisions("refund", "approved", "true") == 1
    assert decisions("refund", "approved", "false") == 2
    assert decisions("refund", "denied", "false") == 1
    assert decisions("refund", "expired", "false") == 1  # not a person's denial
    assert decisions("ask_human", "answered", "false") == 1
    total = sum(
        s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == "runwright_approval_decisions_total"
    )
    assert total == 6


# ------------------------------------------------------------ flow control


def test_a_limit_s_waits_tokens_parks_and_429s_are_counted_by_model_and_key(
    pg_store: PostgresStore, leases: Leases, registry: CollectorRegistry
) -> None:
    """One request a minute: the first run's call goes (its wait in place,
    its tokens reserved and used), the second parks on the model's key; a
    model with no limit whose provider answers 429 is counted too."""
    name, throttled = unique("limited"), unique("throttled")
    model = ScriptedModel(name, lambda request: text("done", usage=(100, 10)))
    Agent(name=name, model=model.model)
    refusing = ScriptedModel(throttled, [rate_limited(), text("late")])
    Agent(name=throttled, model=refusing.model)
    settings = Settings(
        lease_ttl_seconds=3,
        secret_key="test:test-secret-for-runwright-tests-only",
        model_limits=json.dumps({model.model: {"rpm": 1}}),
    )
    engine = Engine(
        pg_store,
        leases=leases,
        settings=settings,
        model_retries=0,
        observers=[m.MetricsObserver(m.Metrics(registry))],
    )
    try:
        first = engine.execute(engine.start(name).id)
        assert first is not None and first.status is RunStatus.COMPLETED
        second = engine.execute(engine.start(name).id)
        assert second is not None and second.parked_key == model.model
        engine.execute(engine.start(throttled).id)
    finally:
        engine.close()

    labels = {"model": model.model}
    assert value(registry, "runwright_limit_wait_seconds_count", **labels) == 1  # not the parked
    reserved = value(registry, "runwright_limit_tokens_reserved_total", **labels)
    assert reserved >= 100  # the prompt's tokens counted, and the output cap
    assert value(registry, "runwright_limit_tokens_used_total", **labels) == 110
    parked = {"key": model.model, "reason": "requests"}
    assert value(registry, "runwright_runs_parked_total", **parked) == 1
    assert value(registry, "runwright_provider_rate_limited_total", model=refusing.model) == 1
    assert value(registry, "runwright_provider_rate_limited_total", **labels) == 0


def test_limit_keys_are_capped_like_models(
    pg_store: PostgresStore, registry: CollectorRegistry
) -> None:
    observer = m.MetricsObserver(m.Metrics(registry), max_keys=1)
    for key in ("a", "b", "c"):
        observer.parked(parked_run(pg_store, key), key, "tokens")
    assert value(registry, "runwright_runs_parked_total", key="a", reason="tokens") == 1
    assert value(registry, "runwright_runs_parked_total", key=m.OTHER, reason="tokens") == 2


def test_runs_parked_now_are_read_from_the_store_at_scrape_time(
    pg_store: PostgresStore,
) -> None:
    parked_run(pg_store, "openai/gpt-a", tenant="acme")
    parked_run(pg_store, "openai/gpt-a")
    parked_run(pg_store, "openai/gpt-b", tenant="acme")
    registry = CollectorRegistry()
    collector = m.ScrapeTimeCollector(
        pg_store.approval_backlog, lambda: None, parked=pg_store.parked, cache_seconds=0
    )
    registry.register(collector)
    samples = scrape(registry)
    assert samples["runwright_parked_runs[('key', 'openai/gpt-a')]"] == 2
    assert samples["runwright_parked_runs[('key', 'openai/gpt-b')]"] == 1

    # Past the cap, keys add up under "other".
    capped = CollectorRegistry()
    capped.register(
        m.ScrapeTimeCollector(
            pg_store.approval_backlog, lambda: None, parked=pg_store.parked, max_keys=1
        )
    )
    samples = scrape(capped)
    assert samples["runwright_parked_runs[('key', 'openai/gpt-a')]"] == 2
    assert samples[f"runwright_parked_runs[('key', '{m.OTHER}')]"] == 1
