"""What the console is built on (issue 15): the approvals inbox with what an
approver needs to judge, decisions that record who made them, and run
listings that page and count."""

from __future__ import annotations

import pytest

from runner import Engine
from runner.core.errors import InvalidApprovalInput, InvalidInput
from store.models import RunStatus


def _waiting(engine: Engine, amount: int = 7) -> str:
    run = engine.start("approve", {"amount": amount})
    paused = engine.execute(run.id)
    assert paused is not None and paused.status is RunStatus.WAITING
    return run.id


def test_the_inbox_shows_what_an_approver_needs(engine: Engine) -> None:
    first, second = _waiting(engine), _waiting(engine)
    items = engine.inbox()
    assert [i.run.id for i in items] == [first, second]  # oldest first
    item = items[0]
    assert item.run.agent == "approve" and item.run.trigger.payload == {"amount": 7}
    assert item.approval.tool_name == "refund" and item.approval.input == {"amount": 7}
    assert item.asking is not None and item.asking["role"] == "assistant"
    assert [c["id"] for c in item.asking["tool_calls"]] == [item.approval.tool_call_id]
    # The two results it saw before asking, named by the calls that made them.
    assert [r.name for r in item.seen] == ["lookup", "lookup"]
    assert len({r.tool_call_id for r in item.seen}) == 2 and all(r.content for r in item.seen)
    assert [a.approval_id for a in item.step_approvals] == [item.approval.approval_id]
    assert engine.inbox(limit=1) == items[:1]
    assert engine.inbox(agent="nobody") == []


def test_a_decision_records_who_made_it(engine: Engine) -> None:
    run_id = _waiting(engine)
    approval = engine.inbox()[0].approval
    for bad in ("", "   ", "x" * 201, "ada\nlovelace", 7):
        with pytest.raises(InvalidApprovalInput, match="who decided"):
            engine.decide(approval.approval_id, True, trusted=True, by=bad)  # type: ignore[arg-type]
    assert engine.get_run(run_id).status is RunStatus.WAITING  # nothing changed
    engine.decide(
        approval.approval_id, True, "checked the order", trusted=True, by="ada@example.com"
    )
    decided = engine.approvals(run_id)[0]
    assert decided.decided_by == "ada@example.com" and decided.reason == "checked the order"
    assert engine.inbox() == []
    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED


def test_runs_page_and_count(engine: Engine) -> None:
    ids = [engine.start("five").id for _ in range(5)]
    newest = list(reversed(ids))
    assert [r.id for r in engine.list_runs(agent="five", limit=2)] == newest[:2]
    assert [r.id for r in engine.list_runs(agent="five", before=newest[1])] == newest[2:]
    assert engine.run_counts("five") == {RunStatus.QUEUED: 5}
    with pytest.raises(InvalidInput, match="before must be a run id"):
        engine.list_runs(before="../etc")
