"""A run's page and agent versions (docs/operations.md, "Agent versions"):
the version the run is on and the one it started on, its moves to another
version in the timeline with what changed, the same moves over the live
stream (without who moved it, in the public shape), and a pinned run waiting
for a worker of its version."""

from __future__ import annotations

import html
import time
from typing import Any

from flask.testing import FlaskClient

from runner import Agent, Engine, RunStatus, effect
from runner.core.agent import registry
from runner.core.coordination.leases import Leases
from runner.sse import full_event, public_event
from runner.testing import Request, ScriptedModel, call, text, tools
from store.events import EventType
from store.workers import WorkerInfo
from tests.console.conftest import BASE, execute_all, page_text, unique

_models: dict[str, ScriptedModel] = {}


def _script(request: Request) -> Any:
    if request.step == 1:
        return tools(call("refund", {"order": "A-1"}))
    return text("refunded")


def define(name: str, label: str, *, policy: str = "continue") -> str:
    """Version ``label`` of agent ``name``, whose refund a person approves; its id."""

    @effect
    def refund(order: str, idempotency_key: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    model = _models.setdefault(name, ScriptedModel(name, _script))
    Agent(
        name=name,
        model=model.model,
        instructions=f"Refund what is asked ({label}).",
        tools=[refund],
        approvals={"refund": True},
        on_new_version=policy,  # type: ignore[arg-type]
        version=label,
        replace=True,
    )
    return registry.get(name).current_version().id


def approve_all(engine: Engine, run_id: str) -> None:
    for asked in engine.approvals(run_id):
        if asked.pending:
            engine.decide(asked.approval_id, True, "fine", trusted=True, by="alice")


def test_a_run_resumed_on_a_new_version_shows_both_and_the_move_with_its_changes(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    name = unique("ver-page")
    old = define(name, "2026-12-01")
    run = engine.start(name, {})
    execute_all(engine, queued)
    new = define(name, "2026-12-07")
    approve_all(engine, run.id)
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED

    page = page_text(client, f"{BASE}/runs/{run.id}")
    assert f"<dt>version</dt><dd>2026-12-07 ({new})</dd>" in page
    assert f"<dt>started on</dt><dd>2026-12-01 ({old})</dd>" in page
    move = f"version 2026-12-01 ({old}) \u2192 2026-12-07 ({new})"
    assert f'<li class="ev kind-version"><div class="head"><b>{move}</b>' in page
    assert '<span class="meta">on resuming</span>' in page
    assert "<li>label: 2026-12-01 \u2192 2026-12-07</li><li>instructions changed</li>" in page

    # The move comes over the stream too; the public shape leaves out who moved it.
    [event] = [ev for ev in engine.store.events(run.id) if ev.type is EventType.VERSION]
    assert full_event(event)["data"]["to"] == new
    assert public_event(event)["data"] == {
        "from": old,
        "to": new,
        "changes": ["label: 2026-12-01 \u2192 2026-12-07", "instructions changed"],
    }


def test_a_run_never_moved_shows_its_one_version(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    name = unique("ver-page-one")
    version = define(name, "only")
    run = engine.start(name, {})
    execute_all(engine, queued)
    page = page_text(client, f"{BASE}/runs/{run.id}")
    assert f"<dt>version</dt><dd>only ({version})</dd>" in page
    assert "<dt>started on</dt>" not in page
    assert '<li class="ev kind-version">' not in page


def test_a_pinned_run_says_it_waits_for_a_worker_of_its_version_and_a_move_by_whom(
    client: FlaskClient, engine: Engine, queued: list[str], leases: Leases
) -> None:
    name = unique("ver-page-pin")
    old = define(name, "a", policy="pin")
    run = engine.start(name, {})
    execute_all(engine, queued)
    new = define(name, "b", policy="pin")
    approve_all(engine, run.id)
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.QUEUED

    page = page_text(client, f"{BASE}/runs/{run.id}")
    said = html.escape(f"Waiting for a worker of version {old} of '{name}'")
    assert f'<p class="note" id="why">{said}' in page
    assert "none of the 0 live worker(s) runs it" in page
    leases.mark_worker(WorkerInfo("old@h", seen_at=time.time(), agent_versions={name: old}), 30)
    page = page_text(client, f"{BASE}/runs/{run.id}")
    assert "sent to its queue, which 1 live worker(s) of that version take" in page

    engine.versions_loaded()  # a worker of b records it
    report = engine.upgrade_runs(name, "a", by="ops")
    assert report.moved == [run.id]
    page = page_text(client, f"{BASE}/runs/{run.id}")
    assert "Waiting for a worker of version" not in page
    assert f"<b>version a ({old}) \u2192 b ({new})</b>" in page
    assert '<span class="meta">by ops</span>' in page
    assert page.count('<li class="ev kind-version">') == 1
