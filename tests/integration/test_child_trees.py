"""Trees of child runs however deep (issue 48, item 2 and 8): a child's usage
reaches its top-level run and every ancestor whatever the depth; a tree has
a depth limit (RUNWRIGHT_MAX_CHILD_DEPTH, ``Agent(max_child_depth=...)``)
past which a child call is a tool error the model sees; a shared budget
bounds a deep tree; a cancel reaches every live descendant of a deep tree,
and a second cancel finishes what a first one left. In-process, on Postgres
(the shared budget of children side by side, on real workers:
tests/e2e/test_children_workers.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from runner import Agent, Budget
from runner.core.agent import registry
from runner.core.settings import Settings
from runner.testing import ScriptedModel, TestEngine, call, text, tools
from runner.testing.scripted import Reply, Request
from store.models import Fence, NewChild, Outcome, RunStatus, TriggerEnvelope
from store.postgres import PostgresStore
from store.rules import cancel_outcome
from tests.helpers import new_run, try_claim, unique

CALL = (10, 0)  # the tokens every model reply of these agents reports


def delegating(name: str, deepest: int | None, **fields: Any) -> tuple[Agent, ScriptedModel]:
    """An agent that hands its task to a child of itself, one level deeper
    each time, until level ``deepest`` (None: for ever), then answers; a
    call its tool refuses, it answers too."""

    def script(request: Request) -> Reply:
        level = int(request.payload["task"].removeprefix("level "))
        if request.tool_results():
            return text(f"level {level} done", usage=CALL)
        if deepest is not None and level >= deepest:
            return text(f"level {level} is the bottom", usage=CALL)
        return tools(call(name, {"task": f"level {level + 1}"}, id="c_down"), usage=CALL)

    model = ScriptedModel(name, script)
    agent = Agent(
        name=name,
        model=model.model,
        tools=lambda ctx: [registry.get(name).as_tool()],
        **fields,
    )
    return agent, model


def chain(engine: TestEngine, root_id: str) -> list[Any]:
    """The run and its descendants down the one chain, top first."""
    runs = [engine.get_run(root_id)]
    while children := engine.engine.children(runs[-1].id):
        [child] = children
        runs.append(child)
    return runs


def own_tokens(engine: TestEngine, run_id: str) -> int:
    return sum(
        (s.usage.total if s.usage else 0) for s in engine.steps(run_id) if s.kind.value == "llm"
    )


def test_a_childs_usage_reaches_every_ancestor_of_a_tree_deeper_than_32(
    runwright_engine: TestEngine,
) -> None:
    agent, _ = delegating(unique("deep"), deepest=40, max_child_depth=45)
    done = runwright_engine.run(agent, {"task": "level 0"})
    assert done.status is RunStatus.COMPLETED, done.error
    runs = chain(runwright_engine, done.id)
    assert len(runs) == 41 and runs[-1].depth == 40
    assert runs[-1].ancestors == tuple(r.id for r in reversed(runs[:-1]))
    assert all(r.root_id == done.id for r in runs)
    # Each run's totals are its own model calls' and its whole subtree's.
    owns = [own_tokens(runwright_engine, r.id) for r in runs]
    assert owns[-1] == 10 and owns[0] == 20
    for position, run in enumerate(runs):
        assert run.usage.total == sum(owns[position:]), f"level {position}"
    assert done.usage.total == 40 * 20 + 10


def test_a_tree_past_its_depth_limit_is_a_tool_error_the_model_sees(
    runwright_database_url: str,
) -> None:
    settings = Settings(secret_key="k" * 32, max_child_depth=3)
    with TestEngine(runwright_database_url, settings=settings) as engine:
        agent, _model = delegating(unique("sinking"), deepest=None)
        done = engine.run(agent, {"task": "level 0"})
        assert done.status is RunStatus.COMPLETED, done.error
        runs = chain(engine, done.id)
        assert [r.depth for r in runs] == [0, 1, 2, 3]
        assert all(r.status is RunStatus.COMPLETED for r in runs)
        # The deepest run's call was refused: the model saw why, and answered.
        [refused] = [s for s in engine.steps(runs[-1].id) if s.kind.value == "tool"]
        assert refused.error is not None
        assert "at most 3 levels of child runs (max_child_depth)" in refused.error
        assert engine.get_run(runs[-1].id).output == "level 3 done"


def test_an_agents_max_child_depth_wins_over_the_projects(runwright_engine: TestEngine) -> None:
    agent, _ = delegating(unique("shallow"), deepest=None, max_child_depth=1)
    done = runwright_engine.run(agent, {"task": "level 0"})
    assert done.status is RunStatus.COMPLETED, done.error
    assert [r.depth for r in chain(runwright_engine, done.id)] == [0, 1]


def test_the_default_depth_limit_is_16_and_read_from_the_environment() -> None:
    assert Settings().max_child_depth == 16
    assert Settings.from_env({"RUNWRIGHT_MAX_CHILD_DEPTH": "4"}).max_child_depth == 4
    with pytest.raises(Exception, match="RUNWRIGHT_MAX_CHILD_DEPTH must be at least 0"):
        Settings.from_env({"RUNWRIGHT_MAX_CHILD_DEPTH": "-1"})
    with pytest.raises(Exception, match="max_child_depth must be a whole number"):
        Agent(name=unique("bad"), model="scripted/x", max_child_depth=-1, register=False)


def test_a_shared_budget_bounds_a_tree_45_levels_deep(runwright_engine: TestEngine) -> None:
    agent, _ = delegating(
        unique("spender"), deepest=45, max_child_depth=50, budget=Budget(max_tokens=700)
    )
    done = runwright_engine.run(agent, {"task": "level 0"})
    runs = chain(runwright_engine, done.id)
    spent = sum(own_tokens(runwright_engine, r.id) for r in runs)
    # The root's totals hold every token the tree spent, and the tree stopped
    # within one call of its budget.
    assert done.usage.total == spent
    assert 700 <= spent <= 700 + CALL[0]
    assert done.status is RunStatus.FAILED and done.error is not None
    assert done.error.code == "budget_exceeded"
    stopped = [r for r in runs if r.error is not None and r.error.code == "budget_exceeded"]
    assert stopped and "the budget they share is 700" in (stopped[-1].error.message or "")


# ----------------------------------------------------------------- cancel


def _child(parent: str, call_id: str = "c", *, detached: bool = False) -> NewChild:
    envelope = TriggerEnvelope(id=f"child:{parent}:{call_id}", source="parent", trigger="t")
    return NewChild(agent="triage", trigger=envelope, call_id=call_id, detached=detached)


def _claimed(store: PostgresStore, run_id: str) -> Fence:
    claim = try_claim(store, run_id, "w", 60)
    assert claim is not None
    return Fence(run_id, "w", claim.epoch)


def _deep_chain(store: PostgresStore, levels: int) -> tuple[str, list[str]]:
    """A top-level run and a chain of ``levels`` children under it, each
    waiting for the next, the deepest queued: the store's own writes."""
    top, _ = store.create_run(new_run())
    ids: list[str] = []
    parent = top.id
    for _level in range(levels):
        fence = _claimed(store, parent)
        [started] = store.start_children(fence, [_child(parent)])
        store.end(fence, Outcome(RunStatus.WAITING))
        ids.append(started.id)
        parent = started.id
    return top.id, ids


@pytest.mark.timeout(300)
def test_cancelling_the_root_of_a_601_run_chain_cancels_every_run(
    runwright_engine: TestEngine,
) -> None:
    store = runwright_engine.store
    top, descendants = _deep_chain(store, 600)
    result = runwright_engine.engine.cancel(top)
    assert result.run.status is RunStatus.CANCELLED
    live = [r for r in descendants if not store.get_run(r).status.ended]
    assert live == []


def test_a_second_cancel_finishes_what_a_first_one_left(runwright_engine: TestEngine) -> None:
    store = runwright_engine.store
    top, descendants = _deep_chain(store, 40)
    # A first cancel settled the root and stopped there (its process died).
    with store.db.tx() as tx:
        from store.pg.approvals import END_BY_ID
        from store.pg.base import outcome_params

        tx.execute(
            END_BY_ID, {"run_id": top, "cancel": True, **outcome_params(cancel_outcome(), top)}
        )
    assert store.get_run(descendants[-1]).status is RunStatus.QUEUED
    again = runwright_engine.engine.cancel(top)
    assert again.run.status is RunStatus.CANCELLED
    assert {store.get_run(r).status for r in descendants} == {RunStatus.CANCELLED}


def test_a_cancel_leaves_a_detached_childs_subtree_alone(runwright_engine: TestEngine) -> None:
    store = runwright_engine.store
    top, _ = store.create_run(new_run())
    fence = _claimed(store, top.id)
    [kept] = store.start_children(fence, [_child(top.id, "d", detached=True)])
    store.end(fence, Outcome(RunStatus.WAITING))
    [under] = store.start_children(_claimed(store, kept.id), [_child(kept.id, "g")])
    runwright_engine.engine.cancel(top.id)
    assert store.get_run(top.id).status is RunStatus.CANCELLED
    assert store.get_run(kept.id).status is RunStatus.RUNNING
    assert store.get_run(under.id).status is RunStatus.QUEUED


def test_the_ancestors_of_a_run_come_from_its_row(runwright_engine: TestEngine) -> None:
    store = runwright_engine.store
    top, descendants = _deep_chain(store, 35)
    chain_up = [r.id for r in store.ancestors(descendants[-1])]
    assert chain_up == [*reversed(descendants[:-1]), top]
    assert re.fullmatch(r"[0-9a-f-]{36}", chain_up[-1])
