"""Erasure (docs/security.md, "Erasure"): a run's payloads removed from every
table, its skeleton kept, a live run refused and left as it is, erasure by a
trigger key, the audit entry, and the reads that must still work on an erased
run (Engine.get_run, ``runwright show``, the console's run page, the event
stream); a retry or a fork of it refused."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from runner import Agent, Engine
from runner.cli import main
from runner.console.views import Console, Request
from runner.core.coordination.leases import Leases
from runner.core.errors import InvalidInput, InvalidTransition, RunNotFound
from runner.core.settings import Settings
from runner.testing import ScriptedModel, call, text, tools
from store.events import EventType
from store.models import Decision, RunStatus, StepKind
from store.pg.erasure import hashed_key
from store.postgres import PostgresStore
from tests.helpers import snapshot
from tests.marked_runs import agent, completed_run, found, unique


@pytest.fixture
def queued() -> list[str]:
    return []


@pytest.fixture
def engine(
    pg_store: PostgresStore, leases: Leases, settings: Settings, queued: list[str]
) -> Iterator[Engine]:
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=queued.append)
    yield made
    made.close()


def test_erasure_removes_the_payloads_everywhere_and_keeps_the_skeleton(
    engine: Engine, pg_store: PostgresStore
) -> None:
    marker = unique("MARKER")
    run_id = completed_run(engine, marker)
    # The marker is where the brief says a run keeps data, before.
    before = found(pg_store, marker)
    for place in (
        "runs.trigger",
        "runs.output",
        "messages.body",
        "steps.input",
        "steps.output",
        "effects.input",
        "effects.output",
        "approvals.input",
        "approvals.arguments",
        "approvals.answer",
        "approvals.reason",
        "run_events.data",
    ):
        assert place in before
    was = engine.get_run(run_id)
    steps_before = [(s.kind, s.index, s.name, s.usage, s.started_at) for s in engine.steps(run_id)]
    decisions_before = [(a.decision, a.decided_by, a.tool_name) for a in engine.approvals(run_id)]

    report = engine.erase([run_id], by="dpo", source="test")

    assert [(r.run_id, r.erased, r.refused) for r in report.runs] == [(run_id, True, None)]
    assert found(pg_store, marker) == []
    run = engine.get_run(run_id)
    assert run.erased_by == "dpo" and run.erased_at is not None
    assert run.erased_at == report.runs[0].erased_at
    # The skeleton stays.
    assert (run.status, run.usage, run.steps_used, run.cost_usd) == (
        was.status,
        was.usage,
        was.steps_used,
        was.cost_usd,
    )
    assert (run.created_at, run.started_at, run.finished_at, run.agent) == (
        was.created_at,
        was.started_at,
        was.finished_at,
        was.agent,
    )
    assert run.output is None and run.state is None
    assert run.trigger.id == was.trigger.id and run.trigger.payload == {}
    assert run.trigger.keys == {"customer": hashed_key("customer", "42")}
    steps = engine.steps(run_id)
    assert [(s.kind, s.index, s.name, s.usage, s.started_at) for s in steps] == steps_before
    assert {s.kind for s in steps} >= {StepKind.LLM, StepKind.TOOL, StepKind.WAIT}
    assert all(s.input is None for s in steps)
    assert [(a.decision, a.decided_by, a.tool_name) for a in engine.approvals(run_id)] == (
        decisions_before
    )
    assert Decision.ANSWERED in {a.decision for a in engine.approvals(run_id)}
    checkpoint = engine.checkpoint(run_id)
    assert checkpoint is not None and checkpoint.step_index == 4 and checkpoint.messages == []
    # The status events keep their statuses; approval events say they were erased.
    events = list(engine.events(run_id, timeout=0, tokens=False))
    assert [ev.status for ev in events if ev.type is EventType.STATUS][-1] is RunStatus.COMPLETED
    approval_events = [ev for ev in events if ev.type is EventType.APPROVAL]
    assert approval_events and all(ev.data.get("erased") is True for ev in approval_events)
    assert all("input" not in ev.data and "answer" not in ev.data for ev in approval_events)
    # One audit entry.
    [entry] = [e for e in pg_store.audit_entries(run_id=run_id) if e.action == "erased"]
    assert (entry.actor, entry.source, entry.detail) == ("dpo", "test", {"status": "completed"})
    assert pg_store.verify_audit().ok


def test_an_erased_run_reads_everywhere_and_cannot_be_retried_or_forked(
    engine: Engine, pg_store: PostgresStore
) -> None:
    marker = unique("MARKER")
    run_id = completed_run(engine, marker)
    engine.erase([run_id], by="dpo")

    console = Console(engine, base_url="/console")
    page = console.handle("run", Request("GET", params={"run_id": run_id}, user="ada"))
    assert page.status == 200
    assert isinstance(page.body, str)
    assert 'id="erased"' in page.body and "by dpo" in page.body and marker not in page.body
    # The retry button stays hidden: an erased run has no history to retry from.
    assert f'action="/console/runs/{run_id}/retry" hidden>' in page.body

    with pytest.raises(InvalidTransition, match=r"was erased .* by dpo.* cannot be forked"):
        engine.fork(run_id, 1)
    # A completed run is not retried anyway; a failed or cancelled one erased is
    # refused as well (below, the cancelled one).
    name = agent(marker)
    cancelled = engine.start(name, {"customer": marker})
    engine.cancel(cancelled.id, by="ada")
    engine.erase([cancelled.id], by="dpo")
    before = snapshot(pg_store)
    with pytest.raises(InvalidTransition, match=r"was erased .* cannot be retried"):
        engine.retry(cancelled.id)
    assert snapshot(pg_store) == before
    assert found(pg_store, marker) == []


def test_a_live_run_is_refused_and_left_as_it_is(engine: Engine, pg_store: PostgresStore) -> None:
    marker = unique("MARKER")
    name = agent(marker)
    live = engine.start(name, {"customer": marker})
    waiting = engine.execute(live.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    queued_run = engine.start(name, {"customer": marker})
    before = snapshot(pg_store)

    report = engine.erase([live.id, queued_run.id], by="dpo")

    assert [(r.run_id, r.erased) for r in report.runs] == [(live.id, False), (queued_run.id, False)]
    assert "the run is waiting: it may still need its payloads" in (report.runs[0].refused or "")
    assert "the run is queued" in (report.runs[1].refused or "")
    assert snapshot(pg_store) == before
    assert engine.get_run(live.id).erased_at is None
    assert [e for e in pg_store.audit_entries() if e.action == "erased"] == []


def test_bad_input_is_refused_and_changes_nothing(engine: Engine, pg_store: PostgresStore) -> None:
    marker = unique("MARKER")
    run_id = completed_run(engine, marker)
    before = snapshot(pg_store)
    missing = str(uuid.uuid4())
    for call_it, error, match in (
        (lambda: engine.erase([run_id, missing], by="dpo"), RunNotFound, "no run with id"),
        (lambda: engine.erase(["nope"], by="dpo"), RunNotFound, "no run with id"),
        (lambda: engine.erase(by="dpo"), InvalidInput, "by their ids or by one trigger key"),
        (
            lambda: engine.erase([run_id], key="customer=42", by="dpo"),
            InvalidInput,
            "not both",
        ),
        (lambda: engine.erase(key="customer", by="dpo"), InvalidInput, "name=value"),
        (lambda: engine.erase(key="=42", by="dpo"), InvalidInput, "name=value"),
        (lambda: engine.erase([run_id], by=" "), InvalidInput, "say who erases"),
        (lambda: engine.erase(run_id, by="dpo"), InvalidInput, "a list of run ids"),
    ):
        with pytest.raises(error, match=match):
            call_it()
        assert snapshot(pg_store) == before
    assert engine.get_run(run_id).erased_at is None


def test_erasure_by_trigger_key_finds_the_runs_before_and_after(
    engine: Engine, pg_store: PostgresStore
) -> None:
    customer = unique("c")
    first = completed_run(engine, unique("MARKER"), customer=customer)
    second = completed_run(engine, unique("MARKER"), customer=customer)
    other = completed_run(engine, unique("MARKER"), customer=unique("c"))

    report = engine.erase(key=f"customer={customer}", by="dpo")

    assert sorted(r.run_id for r in report.erased) == sorted([first, second])
    assert engine.get_run(other).erased_at is None
    # The erased runs keep their key hashed, and are found by it again.
    assert sorted(pg_store.runs_by_key("customer", customer)) == sorted([first, second])
    again = engine.erase(key=f"customer={customer}", by="dpo")
    assert sorted(r.run_id for r in again.erased) == sorted([first, second])
    assert engine.get_run(first).trigger.keys == {"customer": hashed_key("customer", customer)}
    assert engine.erase(key="customer=nobody", by="dpo").runs == []


def test_a_run_is_erased_with_its_ended_children_and_a_child_of_a_live_run_is_not(
    engine: Engine, pg_store: PostgresStore
) -> None:
    marker = unique("MARKER")
    child_name = unique("child")
    child_model = ScriptedModel(child_name, lambda request: text(f"child says {marker}"))
    child_agent = Agent(name=child_name, model=child_model.model)
    lead_name = unique("lead")
    lead_model = ScriptedModel(
        lead_name, [tools(call(child_name, {"task": marker}, id="c1")), text(f"lead {marker}")]
    )
    Agent(name=lead_name, model=lead_model.model, tools=[child_agent.as_tool()])
    lead = engine.start(lead_name, {"about": marker})
    waiting = engine.execute(lead.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    [child] = engine.children(lead.id)
    done_child = engine.execute(child.id)
    assert done_child is not None and done_child.status is RunStatus.COMPLETED

    # The child has ended, but its parent waits on it and will read its output.
    before = snapshot(pg_store)
    [refused] = engine.erase([child.id], by="dpo").runs
    assert not refused.erased
    assert f"its ancestor run {lead.id} has not ended" in (refused.refused or "")
    assert snapshot(pg_store) == before

    done = engine.execute(lead.id)
    assert done is not None and done.status is RunStatus.COMPLETED, done.error
    report = engine.erase([lead.id], by="dpo")
    assert [(r.run_id, r.erased, r.via) for r in report.runs] == [
        (lead.id, True, None),
        (child.id, True, lead.id),
    ]
    assert found(pg_store, marker) == []
    entries = [e for e in pg_store.audit_entries() if e.action == "erased"]
    assert [(e.run_id, e.detail) for e in entries] == [
        (lead.id, {"status": "completed"}),
        (child.id, {"status": "completed", "via": lead.id}),
    ]


def test_the_next_run_of_a_thread_starts_without_the_erased_history(engine: Engine) -> None:
    marker = unique("MARKER")
    name = unique("thread")
    model = ScriptedModel(name, lambda request: text("noted"))
    Agent(name=name, model=model.model)
    thread = unique("t")
    first = engine.start(name, {"said": marker}, thread=thread)
    assert engine.execute(first.id) is not None
    engine.erase([first.id], by="dpo")

    second = engine.start(name, {"said": "hello again"}, thread=thread)
    done = engine.execute(second.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    seen = json.dumps(model.calls[-1].messages)
    assert "hello again" in seen and marker not in seen


# ------------------------------------------------------------ command line

sent_runs: list[str] = []


def send(run_id: str, **_: Any) -> None:
    sent_runs.append(run_id)


@pytest.fixture
def cli(database_url: str, redis_url: str) -> Iterator[Any]:
    env = {
        "RUNWRIGHT_DATABASE_URL": database_url,
        "RUNWRIGHT_REDIS_URL": redis_url,
        "RUNWRIGHT_ENQUEUE": f"{__name__}:send",
        "RUNWRIGHT_AGENTS": "",
        "RUNWRIGHT_SECRET_KEY": "test:test-secret-for-runwright-tests-only",
    }

    def run(*args: str, answer: str | None = None) -> Result:
        return CliRunner().invoke(main, list(args), env=env, input=answer, catch_exceptions=False)

    yield run


def test_the_command_line_asks_erases_and_shows(
    engine: Engine, pg_store: PostgresStore, cli: Any
) -> None:
    marker = unique("MARKER")
    run_id = completed_run(engine, marker)

    declined = cli("runs", "erase", run_id, "--by", "dpo", answer="n\n")
    assert declined.exit_code == 1
    assert "Erase the payloads of 1 run" in declined.output
    assert engine.get_run(run_id).erased_at is None

    done = cli("runs", "erase", run_id, "--by", "dpo", answer="y\n")
    assert done.exit_code == 0, done.output
    assert f"run {run_id} erased by dpo" in done.output
    assert found(pg_store, marker) == []

    shown = cli("show", run_id)
    assert shown.exit_code == 0, shown.output
    assert "erased" in shown.output and "by dpo" in shown.output
    shown_json = json.loads(cli("show", run_id, "--json").output)
    assert shown_json["run"]["erased"]["by"] == "dpo"

    name = agent(marker)
    live = engine.start(name, {"customer": marker})
    refused = cli("runs", "erase", live.id, "--by", "dpo", "--yes", "--json")
    assert refused.exit_code == 0
    document = json.loads(refused.output)
    assert document["erased"] == [] and document["refused"][0]["run_id"] == live.id
    assert "the run is queued" in document["refused"][0]["reason"]

    customer = unique("c")
    keyed = completed_run(engine, unique("MARKER"), customer=customer)
    by_key = cli("runs", "erase", "--key", f"customer={customer}", "--by", "dpo", "--yes", "--json")
    assert by_key.exit_code == 0, by_key.output
    assert [r["run_id"] for r in json.loads(by_key.output)["erased"]] == [keyed]
    nobody = cli("runs", "erase", "--key", "customer=nobody", "--by", "dpo", "--yes")
    assert nobody.exit_code == 0 and "nothing erased" in nobody.output

    bad = cli("runs", "erase", "--by", "dpo", "--yes")
    assert bad.exit_code == 1 and "by their ids or by one trigger key" in bad.output
