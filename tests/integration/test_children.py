"""Agents that delegate (issue 28, its first part): ``Agent.as_tool`` starts a
child run per call; the parent waits for its children holding no worker and
no lease, and the last child's settle queues it again; the child's structured
output or final text is the call's result, a failed child a tool error; a
parent that starts its children again (after a crash) finds those it started;
``tick()`` resumes a parent whose wake-up was lost. In-process, on Postgres,
through the testing kit (real workers: tests/e2e/test_children_workers.py)."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from runner import Agent, Budget
from runner.core.children import child_trigger_id
from runner.core.errors import InvalidInput
from runner.core.model import warm_up
from runner.testing import ScriptedModel, TestEngine, call, output, text, tools
from store.models import RunStatus
from store.postgres import PostgresStore
from tests.helpers import unique


class Summary(pydantic.BaseModel):
    topic: str
    points: int


def researcher(name: str | None = None) -> Agent:
    """A child agent with a structured output."""
    name = name or unique("researcher")
    model = ScriptedModel(name, lambda request: output({"topic": "tides", "points": 3}))
    return Agent(name=name, model=model.model, output=Summary, instructions="Researches.")


def writer(name: str | None = None, says: str = "a draft") -> Agent:
    name = name or unique("writer")
    model = ScriptedModel(name, lambda request: text(says))
    return Agent(name=name, model=model.model)


def lead(*children: Agent, calls: list[Any], **fields: Any) -> tuple[Agent, ScriptedModel]:
    """A lead agent whose first step calls ``calls``, then says done."""
    name = unique("lead")
    model = ScriptedModel(name, [tools(*calls), text("both in")])
    agent = Agent(name=name, model=model.model, tools=[c.as_tool() for c in children], **fields)
    return agent, model


def results(model: ScriptedModel, step: int) -> dict[str, str]:
    return {
        m["tool_call_id"]: m["content"]
        for m in model.calls[step].messages
        if m.get("role") == "tool"
    }


def test_a_lead_calls_two_children_in_one_step_and_gets_both_results(
    runwright_engine: TestEngine,
) -> None:
    research, draft = researcher(), writer(says="the draft, in full")
    agent, model = lead(
        research,
        draft,
        calls=[
            call(research.name, {"task": "tides"}, id="c_research"),
            call(draft.name, {"task": "write it"}, id="c_draft"),
        ],
    )
    run = runwright_engine.start(agent)
    runwright_engine.engine.execute(run.id)
    # The lead's step started both children and waits for them, holding no claim.
    waiting = runwright_engine.get_run(run.id)
    assert waiting.status is RunStatus.WAITING and waiting.claim is None
    why = runwright_engine.engine.explain(waiting)
    assert why is not None and why.startswith("waiting for its child runs: ")
    children = runwright_engine.engine.children(run.id)
    assert [(c.agent, c.parent_call_id, c.status) for c in children] == [
        (research.name, "c_research", RunStatus.QUEUED),
        (draft.name, "c_draft", RunStatus.QUEUED),
    ]
    assert all(c.parent_id == run.id and not c.detached for c in children)
    assert children[0].trigger.payload == {"task": "tides"}
    assert children[0].trigger.id == child_trigger_id(run.id, "c_research")
    assert children[0].trigger.source == "parent"

    done = runwright_engine.run_until_ended(run.id)
    assert done.status is RunStatus.COMPLETED, done.error
    seen = results(model, 1)
    assert json.loads(seen["c_research"]) == {"topic": "tides", "points": 3}
    assert seen["c_draft"] == "the draft, in full"
    assert len(runwright_engine.engine.children(run.id)) == 2
    # The wait's own step says what it waited for, and that it ended.
    [wait] = [s for s in runwright_engine.steps(run.id) if s.kind.value == "wait"]
    assert wait.name == "children" and wait.input == {
        "approval_ids": [],
        "child_calls": ["c_research", "c_draft"],
    }
    assert wait.output == {"resumed": True} and wait.finished_at is not None
    model.assert_complete()


def test_a_child_that_fails_is_a_tool_error_for_the_parent_not_its_failure(
    runwright_engine: TestEngine,
) -> None:
    name = unique("looper")
    looping = ScriptedModel(name, lambda request: tools(call("nothing_here", {})), strict=False)
    child = Agent(name=name, model=looping.model, budget=Budget(max_steps=2))
    agent, model = lead(child, calls=[call(child.name, {"task": "loop"}, id="c_loop")])
    done = runwright_engine.run(agent)
    assert done.status is RunStatus.COMPLETED, done.error
    [failed] = runwright_engine.engine.children(done.id)
    assert failed.status is RunStatus.FAILED
    told = json.loads(results(model, 1)["c_loop"])
    assert told["error"] == (
        f"the {child.name} agent's run {failed.id} failed "
        "(budget_exceeded: the run used all 2 steps of its budget)"
    )


def test_a_cancelled_child_is_a_tool_error_and_resumes_its_parent(
    runwright_engine: TestEngine,
) -> None:
    child = writer()
    agent, model = lead(child, calls=[call(child.name, {"task": "x"}, id="c_one")])
    run = runwright_engine.start(agent)
    runwright_engine.engine.execute(run.id)
    [started] = runwright_engine.engine.children(run.id)
    runwright_engine.engine.cancel(started.id)
    assert runwright_engine.get_run(run.id).status is RunStatus.QUEUED  # the cancel resumed it
    done = runwright_engine.run_until_ended(run.id)
    assert done.status is RunStatus.COMPLETED, done.error
    told = json.loads(results(model, 1)["c_one"])
    assert told["error"] == f"the {child.name} agent's run {started.id} was cancelled"


@pytest.mark.parametrize("at", ["after_journal", "after_children_start", "after_commit"])
def test_a_parent_recovered_after_a_crash_has_exactly_one_child_per_call(
    runwright_engine: TestEngine, at: str
) -> None:
    first, second = writer(says="one"), writer(says="two")
    agent, model = lead(
        first,
        second,
        calls=[
            call(first.name, {"task": "a"}, id="c_a"),
            call(second.name, {"task": "b"}, id="c_b"),
        ],
    )
    run = runwright_engine.start(agent)
    runwright_engine.crash(run.id, at)
    if at == "after_journal":
        # The model's reply is journaled, no child started yet: the recovered
        # execution starts them, reusing the reply.
        assert runwright_engine.engine.children(run.id) == []
        done = runwright_engine.take_over(run.id)
    elif at == "after_children_start":
        # The children exist, unsent, and the step's wait is not committed:
        # the recovered execution finds them, commits the wait and sends them.
        assert len(runwright_engine.engine.children(run.id)) == 2
        done = runwright_engine.take_over(run.id)
    else:
        # The wait is committed, but the children were never sent: tick()
        # sends queued runs nobody took, and they resume the parent.
        assert runwright_engine.get_run(run.id).status is RunStatus.WAITING
        runwright_engine.clock.advance(runwright_engine.engine.settings.reenqueue_seconds + 1)
        runwright_engine.tick()
        done = runwright_engine.run_until_ended(run.id)
    assert done.status is RunStatus.COMPLETED, done.error
    children = runwright_engine.engine.children(run.id)
    assert sorted(c.parent_call_id or "" for c in children) == ["c_a", "c_b"]
    assert results(model, 1) == {"c_a": "one", "c_b": "two"}
    assert model.call_count == 2  # the journaled reply was reused
    runwright_engine.assert_taken_over(run.id)


def test_tick_resumes_a_parent_whose_last_childs_wake_up_was_lost(
    runwright_engine: TestEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = writer(says="late")
    agent, model = lead(child, calls=[call(child.name, {"task": "x"}, id="c_one")])
    run = runwright_engine.start(agent)
    runwright_engine.engine.execute(run.id)
    [started] = runwright_engine.engine.children(run.id)
    # The child's settle commits, and its process dies before resuming the parent.
    with monkeypatch.context() as patch:
        patch.setattr(PostgresStore, "resume_if_done", lambda self, run_id: [])
        runwright_engine.engine.execute(started.id)
    assert runwright_engine.get_run(started.id).status is RunStatus.COMPLETED
    assert runwright_engine.get_run(run.id).status is RunStatus.WAITING
    report = runwright_engine.tick()
    assert report.resumed == [run.id]
    done = runwright_engine.get_run(run.id)
    assert done.status is RunStatus.COMPLETED, done.error
    assert results(model, 1) == {"c_one": "late"}


def test_an_approval_and_a_child_in_one_step_resume_the_parent_once_both_are_done(
    runwright_engine: TestEngine,
) -> None:
    from runner import tool

    @tool
    def publish(title: str) -> str:
        """Publish it."""
        return f"published {title}"

    child = writer(says="drafted")
    name = unique("lead")
    model = ScriptedModel(
        name,
        [
            tools(
                call("publish", {"title": "t"}, id="c_pub"),
                call(child.name, {"task": "draft"}, id="c_draft"),
            ),
            text("done"),
        ],
    )
    agent = Agent(
        name=name,
        model=model.model,
        tools=[publish, child.as_tool()],
        approvals={"publish": True},
    )
    run = runwright_engine.start(agent)
    runwright_engine.engine.execute(run.id)
    [child_run] = runwright_engine.engine.children(run.id)
    [approval] = runwright_engine.pending(run.id)
    # The approval decided first: the child still runs, so the parent waits on.
    runwright_engine.engine.decide(approval.approval_id, True, trusted=True, by="ops")
    assert runwright_engine.get_run(run.id).status is RunStatus.WAITING
    runwright_engine.engine.execute(child_run.id)  # its settle resumes the parent
    assert runwright_engine.get_run(run.id).status is RunStatus.QUEUED
    done = runwright_engine.run_until_ended(run.id)
    assert done.status is RunStatus.COMPLETED, done.error
    assert results(model, 1) == {"c_pub": "published t", "c_draft": "drafted"}


def test_as_tool_names_and_schemas() -> None:
    class Brief(pydantic.BaseModel):
        topic: str
        depth: int = 1

    child = Agent(
        name="research-desk",
        model="scripted/none",
        instructions="Finds sources.\nThen more.",
        input=Brief,
        register=False,
    )
    made = child.as_tool()
    schema = made.schema()["function"]
    assert schema["name"] == "research-desk"
    assert schema["description"] == "Ask the research-desk agent. Finds sources."
    assert set(schema["parameters"]["properties"]) == {"topic", "depth"}
    plain = Agent(name="w", model="scripted/none", register=False).as_tool(
        name="draft", description="Drafts.", detached=True
    )
    assert plain.schema()["function"]["parameters"]["required"] == ["task"]
    assert plain.detached and plain.name == "draft"
    with pytest.raises(InvalidInput, match="is not a function name"):
        Agent(name="has space", model="scripted/none", register=False).as_tool()


def test_cancelling_a_parent_cancels_its_children_but_not_a_detached_one(
    runwright_engine: TestEngine,
) -> None:
    kept, dropped, grandchild = writer(says="kept"), writer(says="never"), writer(says="deep")
    middle_name = unique("middle")
    middle_model = ScriptedModel(
        middle_name, [tools(call(grandchild.name, {"task": "deep"}, id="c_deep")), text("mid")]
    )
    middle = Agent(name=middle_name, model=middle_model.model, tools=[grandchild.as_tool()])
    name = unique("lead")
    model = ScriptedModel(
        name,
        [
            tools(
                call("kept", {"task": "k"}, id="c_kept"),
                call(dropped.name, {"task": "d"}, id="c_dropped"),
                call(middle.name, {"task": "m"}, id="c_middle"),
            ),
            text("never"),
        ],
    )
    agent = Agent(
        name=name,
        model=model.model,
        tools=[kept.as_tool(name="kept", detached=True), dropped.as_tool(), middle.as_tool()],
    )
    run = runwright_engine.start(agent)
    runwright_engine.engine.execute(run.id)
    by_call = {c.parent_call_id: c for c in runwright_engine.engine.children(run.id)}
    assert by_call["c_kept"].detached and not by_call["c_dropped"].detached
    runwright_engine.engine.execute(by_call["c_middle"].id)  # it waits for its own child
    [deep] = runwright_engine.engine.children(by_call["c_middle"].id)

    result = runwright_engine.engine.cancel(run.id)
    assert result.run.status is RunStatus.CANCELLED
    status = {k: runwright_engine.get_run(c.id).status for k, c in by_call.items()}
    assert status == {
        "c_kept": RunStatus.QUEUED,
        "c_dropped": RunStatus.CANCELLED,
        "c_middle": RunStatus.CANCELLED,
    }
    assert runwright_engine.get_run(deep.id).status is RunStatus.CANCELLED  # and theirs
    # The detached child runs on after its parent was cancelled.
    assert runwright_engine.run_until_ended(by_call["c_kept"].id).status is RunStatus.COMPLETED
    assert runwright_engine.get_run(run.id).status is RunStatus.CANCELLED


def _spender(steps: int, price: tuple[float, float] | None = None) -> Agent:
    """A child that calls a tool ``steps - 1`` times, then answers; each
    reply reports 1,000 input tokens and 10 output tokens."""
    from runner import tool

    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    name = unique("spender")

    def script(request: Any) -> Any:
        if request.step < steps:
            return tools(call("noop", {}), usage=(1000, 10))
        return text("spent", usage=(1000, 10))

    model = ScriptedModel(name, script, price=price)
    return Agent(name=name, model=model.model, tools=[noop])


def test_childrens_tokens_and_cost_count_in_their_parents_totals(
    runwright_engine: TestEngine,
) -> None:
    first, second = _spender(2, price=(1e-6, 0.0)), _spender(3, price=(1e-6, 0.0))
    middle_name = unique("middle")
    middle_model = ScriptedModel(
        middle_name,
        [
            tools(call(second.name, {"task": "deep"}, id="c_deep"), usage=(50, 5)),
            text("mid", usage=(50, 5)),
        ],
    )
    middle = Agent(name=middle_name, model=middle_model.model, tools=[second.as_tool()])
    agent, _model = lead(
        first,
        middle,
        calls=[
            call(first.name, {"task": "a"}, id="c_a"),
            call(middle.name, {"task": "b"}, id="c_b"),
        ],
    )
    done = runwright_engine.run(agent)
    assert done.status is RunStatus.COMPLETED, done.error
    by_call = {c.parent_call_id: c for c in runwright_engine.engine.children(done.id)}
    [deep] = runwright_engine.engine.children(by_call["c_b"].id)
    assert by_call["c_a"].usage.input_tokens == 2000 and deep.usage.input_tokens == 3000
    # The middle run's totals hold its grandchild's; the lead's, the whole tree's.
    assert by_call["c_b"].usage.input_tokens == 100 + 3000
    assert done.usage.input_tokens == 2 * 10 + 2000 + 100 + 3000  # the lead's own replies: 10 each
    assert done.usage.output_tokens == 2 * 5 + 20 + 10 + 30
    assert done.cost_usd == pytest.approx(0.002 + 0.003)
    # Each run's own steps stay its own: the lead's two model steps cost nothing.
    lead_llm = [s for s in runwright_engine.steps(done.id) if s.kind.value == "llm"]
    assert [s.cost_usd for s in lead_llm] == [0.0, 0.0]


def test_a_shared_cost_budget_stops_the_tree_when_the_children_together_exceed_it(
    runwright_engine: TestEngine,
) -> None:
    # Each child step costs $0.001; alone, a child costs $0.004, under the
    # lead's $0.006; together they reach it.
    first, second = _spender(4, price=(1e-6, 0.0)), _spender(4, price=(1e-6, 0.0))
    agent, model = lead(
        first,
        second,
        calls=[
            call(first.name, {"task": "a"}, id="c_a"),
            call(second.name, {"task": "b"}, id="c_b"),
        ],
        budget=Budget(max_cost_usd=0.006),
    )
    done = runwright_engine.run(agent)
    by_call = {c.parent_call_id: c for c in runwright_engine.engine.children(done.id)}
    statuses = sorted(c.status.value for c in by_call.values())
    assert statuses == ["completed", "failed"]
    [stopped] = [c for c in by_call.values() if c.status is RunStatus.FAILED]
    assert stopped.error is not None and stopped.error.code == "budget_exceeded"
    assert f"the {agent.name} run {done.id} it works for cost $0.006000" in stopped.error.message
    assert stopped.usage.input_tokens == 2000  # it stopped before its third step
    # The lead, resumed with the tree's cost on its own totals, stops too.
    assert done.status is RunStatus.FAILED and done.error is not None
    assert done.error.code == "budget_exceeded", done.error
    assert done.cost_usd == pytest.approx(0.006)
    assert model.call_count == 1  # it never asked its model again


def test_a_childs_approval_surfaces_with_its_parent_chain_and_resumes_the_tree(
    runwright_engine: TestEngine,
) -> None:
    from runner import effect

    asked: list[Any] = []

    @effect
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    child_name = unique("refunder")
    child_model = ScriptedModel(
        child_name, [tools(call("refund", {"order": "A1"}, id="c_refund")), text("refunded")]
    )
    child = Agent(
        name=child_name,
        model=child_model.model,
        tools=[refund],
        approvals={"refund": True},
        notifier=asked.append,
    )
    middle_name = unique("middle")
    middle_model = ScriptedModel(
        middle_name, [tools(call(child.name, {"task": "refund A1"}, id="c_deep")), text("ok")]
    )
    middle = Agent(name=middle_name, model=middle_model.model, tools=[child.as_tool()])
    agent, model = lead(middle, calls=[call(middle.name, {"task": "handle A1"}, id="c_mid")])

    waiting = runwright_engine.run(agent)
    assert waiting.status is RunStatus.WAITING
    [mid_run] = runwright_engine.engine.children(waiting.id)
    [child_run] = runwright_engine.engine.children(mid_run.id)
    assert runwright_engine.get_run(child_run.id).status is RunStatus.WAITING
    # The inbox shows the child's approval with the runs it works for.
    [item] = [i for i in runwright_engine.engine.inbox() if i.run.id == child_run.id]
    assert [p.id for p in item.parents] == [mid_run.id, waiting.id]
    # Its notification names the top-level run.
    [request] = asked
    assert request.run_id == child_run.id and request.root_run_id == waiting.id
    # Deciding it resumes the child, whose settle resumes its parent, and so on up.
    runwright_engine.engine.decide(item.approval.approval_id, True, trusted=True, by="ops")
    done = runwright_engine.run_until_ended(waiting.id)
    assert done.status is RunStatus.COMPLETED, done.error
    assert runwright_engine.get_run(child_run.id).status is RunStatus.COMPLETED
    assert results(model, 1) == {"c_mid": "ok"}


def test_show_lists_a_runs_children_and_a_child_its_parent(runwright_engine: TestEngine) -> None:
    from runner.cli.as_json import show_json
    from runner.cli.describe import describe

    child = writer(says="hi")
    agent, _model = lead(child, calls=[call(child.name, {"task": "x"}, id="c_one")])
    done = runwright_engine.run(agent)
    [kid] = runwright_engine.engine.children(done.id)
    lines = describe(done, [], runwright_engine.steps(done.id), None, [kid])
    assert "children (their usage and cost count in this run's)" in lines
    [line] = [x for x in lines if x.startswith(f"  {kid.id}")]
    assert f"{child.name}  completed  call c_one  10 in, 5 out" in line
    kid_lines = describe(kid, [], runwright_engine.steps(kid.id))
    assert f"parent   run {done.id} (its call c_one)" in kid_lines
    shown = show_json(done, [], [], [], None, messages=False, children=[kid])
    assert [c["id"] for c in shown["children"]] == [kid.id]
    assert shown["children"][0]["parent_id"] == done.id
    assert shown["children"][0]["parent_call_id"] == "c_one"


def test_the_parents_event_feed_has_each_childs_start_and_settle(
    runwright_engine: TestEngine,
) -> None:
    ok, broken = writer(says="fine"), writer(says="unused")
    agent, _model = lead(
        ok,
        broken,
        calls=[call(ok.name, {"task": "a"}, id="c_ok"), call(broken.name, {"task": "b"}, id="c_x")],
    )
    run = runwright_engine.start(agent)
    runwright_engine.engine.execute(run.id)
    by_call = {c.parent_call_id: c for c in runwright_engine.engine.children(run.id)}
    runwright_engine.engine.cancel(by_call["c_x"].id)
    done = runwright_engine.run_until_ended(run.id)
    assert done.status is RunStatus.COMPLETED, done.error
    events = list(runwright_engine.engine.events(run.id, timeout=0, tokens=False))
    child_events = [e.data for e in events if e.type.value == "child"]
    assert [(d["action"], d["call_id"]) for d in child_events] == [
        ("started", "c_ok"),
        ("started", "c_x"),
        ("settled", "c_x"),
        ("settled", "c_ok"),
    ]
    assert child_events[2] == {
        "action": "settled",
        "run_id": by_call["c_x"].id,
        "agent": broken.name,
        "call_id": "c_x",
        "status": "cancelled",
        "error_code": "cancelled",
    }
    assert child_events[0]["run_id"] == by_call["c_ok"].id and "status" in child_events[0]
    # In the parent's feed, in commit order: both children started before the
    # last one settled, which came before the parent's resume.
    order = [(e.type.value, e.data.get("status")) for e in events]
    assert order.index(("child", "completed")) < order.index(("status", "queued"), 2)


def test_a_duplicate_resume_and_a_redelivered_parent_start_no_third_child(
    runwright_engine: TestEngine,
) -> None:
    import sqlalchemy as sa

    first, second = writer(says="one"), writer(says="two")
    agent, model = lead(
        first,
        second,
        calls=[
            call(first.name, {"task": "a"}, id="c_a"),
            call(second.name, {"task": "b"}, id="c_b"),
        ],
    )
    run = runwright_engine.start(agent)
    runwright_engine.engine.execute(run.id)
    [a, b] = runwright_engine.engine.children(run.id)
    # A resume that came too early (its children still run): the parent is
    # queued again by hand, as a stray wake-up would.
    with runwright_engine.store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE runs SET status = 'queued' WHERE id = :id"), {"id": run.id})
    again = runwright_engine.engine.execute(run.id)
    assert again is not None and again.status is RunStatus.WAITING  # it waits on
    assert [c.id for c in runwright_engine.engine.children(run.id)] == [a.id, b.id]
    assert model.call_count == 1  # nothing asked of its model
    runwright_engine.engine.execute(a.id)
    runwright_engine.engine.execute(b.id)  # the last settle resumes it
    done = runwright_engine.engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED, done
    # Its task delivered once more: nothing to claim, nothing started.
    assert runwright_engine.engine.execute(run.id) is None
    assert len(runwright_engine.engine.children(run.id)) == 2
    assert results(model, 1) == {"c_a": "one", "c_b": "two"}


def test_retrying_a_parent_keeps_its_completed_children_and_starts_the_others_again(
    runwright_engine: TestEngine,
) -> None:
    done_model_name = unique("finisher")
    done_model = ScriptedModel(done_model_name, lambda request: text("finished"))
    finisher = Agent(name=done_model_name, model=done_model.model)
    again = writer(says="second time")
    agent, model = lead(
        finisher,
        again,
        calls=[
            call(finisher.name, {"task": "a"}, id="c_done"),
            call(again.name, {"task": "b"}, id="c_again"),
        ],
    )
    run = runwright_engine.start(agent)
    runwright_engine.engine.execute(run.id)
    by_call = {c.parent_call_id: c for c in runwright_engine.engine.children(run.id)}
    runwright_engine.engine.execute(by_call["c_done"].id)  # one child completes
    runwright_engine.engine.cancel(run.id)  # the other is cancelled with its parent
    assert runwright_engine.get_run(by_call["c_again"].id).status is RunStatus.CANCELLED

    retried = runwright_engine.engine.retry(run.id)
    assert retried.status is RunStatus.QUEUED
    done = runwright_engine.run_until_ended(run.id)
    assert done.status is RunStatus.COMPLETED, done.error
    children = runwright_engine.engine.children(run.id)
    assert [c.parent_call_id for c in children] == ["c_done", "c_again", "c_again"]
    assert children[2].trigger.id == child_trigger_id(run.id, "c_again", 2)
    assert children[2].status is RunStatus.COMPLETED
    assert done_model.call_count == 1  # the completed child was not run again
    assert results(model, 1) == {"c_done": "finished", "c_again": "second time"}


def test_a_fork_starts_fresh_children(runwright_engine: TestEngine) -> None:
    child = writer(says="fresh")
    name = unique("lead")
    model = ScriptedModel(
        name,
        [
            tools(call(child.name, {"task": "first"}, id="c_one")),
            tools(call(child.name, {"task": "second"}, id="c_two")),
            text("done"),
        ],
    )
    agent = Agent(name=name, model=model.model, tools=[child.as_tool()])
    done = runwright_engine.run(agent)
    assert done.status is RunStatus.COMPLETED, done.error
    originals = runwright_engine.engine.children(done.id)
    assert [c.parent_call_id for c in originals] == ["c_one", "c_two"]
    fork = runwright_engine.engine.fork(done.id, 1)  # after the first child's result
    forked = runwright_engine.run_until_ended(fork.id)
    assert forked.status is RunStatus.COMPLETED, forked.error
    [fresh] = runwright_engine.engine.children(fork.id)
    assert fresh.parent_call_id == "c_two" and fresh.id not in {c.id for c in originals}
    assert runwright_engine.engine.children(done.id) == originals


def test_a_parents_execution_timeout_does_not_run_while_it_waits(
    runwright_engine: TestEngine,
) -> None:
    name = unique("slowchild")
    slow = ScriptedModel(name, lambda request: text("took its time", latency=1.5))
    child = Agent(name=name, model=slow.model)
    agent, model = lead(
        child, calls=[call(child.name, {"task": "x"}, id="c_slow")], budget=Budget(timeout_ms=1000)
    )
    # litellm imported and warm: in a fresh process the lead's first call
    # alone could use up its second.
    warm_up()
    done = runwright_engine.run(agent)  # the child alone takes longer than the lead's timeout
    assert done.status is RunStatus.COMPLETED, done.error
    assert results(model, 1) == {"c_slow": "took its time"}
