"""The inbox's mark of a call whose tool changed since it was requested
(docs/approvals.md): a renamed tool's call shows what changed, offers no
approval, and a person may deny it and fail the run, with the reason."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient

from runner import Agent, Engine, RunStatus, effect
from runner.testing import ScriptedModel, call, text, tools
from store.models import Decision
from tests.console.conftest import BASE, execute_all, page_text, post
from tests.helpers import unique

INBOX = f"{BASE}/approvals"


def _agent(name: str, model: ScriptedModel, refund: Any) -> None:
    Agent(name=name, model=model.model, tools=[refund], approvals={refund.name: True}, replace=True)


def test_a_renamed_tools_call_is_marked_and_its_run_can_be_failed_from_the_inbox(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    name = unique("changed-inbox")
    model = ScriptedModel(
        unique("changed-inbox-model"), [tools(call("refund", {"order": "A-1"})), text("done")]
    )

    @effect
    def refund(order: str, idempotency_key: str) -> str:
        """Refund an order."""
        return order

    _agent(name, model, refund)
    run = engine.start(name, {})
    execute_all(engine, queued)
    [approval] = engine.approvals(run.id)

    @effect
    def issue_refund(order: str, idempotency_key: str) -> str:
        """Refund an order."""
        return order

    _agent(name, model, issue_refund)
    page = page_text(client, INBOX)
    assert "Tool changed since requested" in page
    assert "<li>tool refund no longer exists</li>" in page
    assert "<li>tool issue_refund takes the same parameters (renamed?)</li>" in page
    section = page.split(f'id="a-{approval.approval_id}"')[1].split("</section>")[0]
    assert 'value="approve"' not in section and 'value="fail"' in section

    answer = post(
        client,
        f"{BASE}/approvals/{approval.approval_id}",
        {"decision": "fail", "reason": "refunds moved", "run": run.id, "next": "inbox"},
        csrf_from=INBOX,
    )
    assert answer.status_code == 303 and "note=run_failed" in answer.headers["Location"]
    failed = engine.get_run(run.id)
    assert failed.status is RunStatus.FAILED and failed.error is not None
    assert failed.error.code == "tool_changed" and "refunds moved" in failed.error.message
    decided = engine.approvals(run.id)[0]
    assert decided.decision is Decision.DENIED and decided.decided_by == "alice"


def test_approving_a_steps_calls_together_is_refused_when_a_tool_changed(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    name = unique("changed-step")
    asks = tools(call("refund", {"order": "A-1"}), call("refund", {"order": "A-2"}))
    model = ScriptedModel(unique("changed-step-model"), [asks, text("done")])

    @effect
    def refund(order: str, idempotency_key: str) -> str:
        """Refund an order."""
        return order

    _agent(name, model, refund)
    run = engine.start(name, {})
    execute_all(engine, queued)
    first, _second = engine.approvals(run.id)

    @effect
    def refund(order: str, reason: str, idempotency_key: str) -> str:  # type: ignore[no-redef]
        """Refund an order."""
        return order

    _agent(name, model, refund)
    answer = post(
        client,
        f"{BASE}/runs/{run.id}/steps/{first.step_index}/decide",
        {"decision": "approve"},
        csrf_from=INBOX,
    )
    body = answer.get_data(as_text=True)
    assert answer.status_code == 400
    assert "changed since its call was requested: decide that call on its own" in body
    assert all(a.pending for a in engine.approvals(run.id))
