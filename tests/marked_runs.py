"""Runs whose data carries a marker string everywhere a run keeps data, and
a scan of the whole database for it: what erasure (tests/integration/
test_erasure.py) and encryption at rest (test_encryption.py) look for."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from runner import Agent, Engine, effect, tool
from runner.testing import Request as ModelRequest
from runner.testing import ScriptedModel, call, text, tools
from store.models import RunStatus
from store.postgres import PostgresStore


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def agent(marker: str) -> str:
    """An agent whose model puts ``marker`` everywhere a run keeps data: a
    tool's arguments and result, an effect's (approved by a person, who
    edits its arguments and gives a reason), a question and its answer, the
    output."""
    name = unique("erase")

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return f"order {order}: paid"

    @effect
    def refund(note: str, idempotency_key: str) -> dict[str, Any]:
        """Refund an order."""
        return {"refunded": note}

    def script(request: ModelRequest) -> Any:
        if request.step == 1:
            return tools(call("lookup", {"order": marker}))
        if request.step == 2:
            return tools(call("refund", {"note": f"for {marker}"}))
        if request.step == 3:
            return tools(call("ask_human", {"question": f"Anything else about {marker}?"}))
        return text(f"done with {marker}")

    model = ScriptedModel(name, script)
    Agent(
        name=name,
        model=model.model,
        tools=[lookup, refund],
        approvals={"refund": True},
        ask_human=True,
    )
    return name


def completed_run(engine: Engine, marker: str, *, customer: str = "42") -> str:
    """A run of :func:`agent` taken to its end, ``marker`` in all it holds."""
    name = agent(marker)
    run = engine.start(name, {"customer": marker}, keys={"customer": customer})
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    [asked] = engine.approvals(run.id)
    engine.decide(
        asked.approval_id,
        True,
        f"ok for {marker}",
        trusted=True,
        by="ada",
        arguments={"note": f"edited {marker}"},
    )
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    question = next(a for a in engine.approvals(run.id) if a.decision is None)
    engine.answer(question.approval_id, f"no, {marker}", trusted=True, by="cy")
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    return run.id


def found(store: PostgresStore, marker: str) -> list[str]:
    """Every text, json and jsonb value of every table of the database that
    holds ``marker``, as table.column."""
    with store.engine.connect() as conn:
        columns = conn.execute(
            sa.text(
                """
                SELECT table_name, column_name FROM information_schema.columns
                 WHERE table_schema = 'public'
                   AND data_type IN ('text', 'json', 'jsonb', 'character varying', 'ARRAY')
                 ORDER BY table_name, column_name
                """
            )
        ).all()
        assert {t for t, _ in columns} >= {"runs", "steps", "messages", "approvals", "run_events"}
        hits = []
        for table, column in columns:
            count = conn.execute(
                sa.text(
                    f'SELECT count(*) FROM "{table}" WHERE CAST("{column}" AS text) LIKE :like'
                ),
                {"like": f"%{marker}%"},
            ).scalar_one()
            if count:
                hits.append(f"{table}.{column}")
        return hits


def everything(engine: Engine, run_id: str) -> dict[str, Any]:
    """All that a run's readers get of it: run, steps, checkpoint, effects,
    approvals, events."""
    run = engine.get_run(run_id)
    checkpoint = engine.checkpoint(run_id)
    return {
        "trigger": run.trigger.payload,
        "output": run.output,
        "state": run.state,
        "steps": [(s.kind, s.index, s.input, s.output, s.error) for s in engine.steps(run_id)],
        "messages": None if checkpoint is None else checkpoint.messages,
        "effects": [(e.key, e.input, e.output) for e in engine.store.effects(run_id)],
        "approvals": [(a.input, a.arguments, a.answer) for a in engine.approvals(run_id)],
        "events": [e.data for e in engine.store.events(run_id)],
    }
