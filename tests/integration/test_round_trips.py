"""What a durable step costs in round trips to Postgres (issue 16): a plain
tool step is two commits of one statement each, the journal write (the model's reply,
journaled before any tool runs) and the step commit (the tool's result and the
checkpoint), at step 3 as at step 30. A refactor that adds a read or a write
to the hot path fails here, not only in a benchmark."""

from __future__ import annotations

import uuid
from typing import Any

from runner import Agent, Budget, Engine, tool
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import RunStatus
from store.postgres import PostgresStore


@tool
def fetch(n: int) -> str:
    """Return about a kilobyte."""
    return "x" * 1000


def _agent() -> str:
    name = f"round-trips-{uuid.uuid4().hex[:8]}"

    def script(request: Request) -> Any:
        if request.step < int(request.payload["steps"]):
            return tools(call("fetch", {"n": request.step}))
        return text("done")

    model = ScriptedModel(name, script)
    Agent(name=name, model=model.model, tools=[fetch], budget=Budget(max_steps=100))
    return name


def _cost(engine: Engine, store: PostgresStore, agent: str, steps: int) -> tuple[int, int]:
    run = engine.start(agent, {"steps": steps})
    commits, statements = store.db.commits, store.db.statements
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.steps_used == steps
    return store.db.commits - commits, store.db.statements - statements


def test_a_plain_tool_step_is_two_commits_of_one_statement_each(
    engine: Engine, pg_store: PostgresStore
) -> None:
    agent = _agent()
    _cost(engine, pg_store, agent, 2)  # warm: the first execution prepares and imports
    short_commits, short_statements = _cost(engine, pg_store, agent, 5)
    long_commits, long_statements = _cost(engine, pg_store, agent, 30)
    # The difference is 25 steps of the hot path alone (claim, start and
    # settle are the same in both runs).
    assert (long_commits - short_commits) / 25 == 2
    assert (long_statements - short_statements) / 25 == 2
    # An execution's fixed cost: the claim with its start point, and the settle.
    assert short_commits - 5 * 2 <= 4, short_commits
