"""A run's page and the runs list say what is known: an approval that expired
reads as expired, not as a reviewer's denial (issue 26, item 6); a cost the
model's price list could not give reads as unknown, not as $0 (item 14)."""

from __future__ import annotations

from datetime import timedelta

from flask.testing import FlaskClient

from runner import Engine, RunStatus
from store.models import utcnow
from tests.console.conftest import BASE, execute_all, page_text, post, waiting_run


def test_an_expired_approval_reads_as_expired_on_the_run_page(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    assert engine.tick(now=utcnow() + timedelta(days=2)).expired == 1
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED

    page = page_text(client, f"{BASE}/runs/{run.id}")
    when = f"{approval.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    assert f"<b>expired</b> at {when} with no decision" in page  # the wait step
    assert "<b>approval expired</b>" in page  # the decision in the event order
    assert f"not approved: the approval expired at {when} with no decision" in page  # the tool
    assert "approval denied" not in page and "<b>denied</b>" not in page
    assert "denied by a human reviewer" not in page


def test_a_reviewer_who_types_expired_reads_as_a_denial(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, _approval = waiting_run(engine, queued)
    answer = post(
        client,
        f"{BASE}/approvals/{_approval.approval_id}",
        {"decision": "deny", "reason": "expired"},
        csrf_from=f"{BASE}/runs/{run.id}",
        user="bob",
    )
    assert answer.status_code == 303
    execute_all(engine, queued)

    page = page_text(client, f"{BASE}/runs/{run.id}")
    assert "<b>denied</b> by bob" in page and "reason: expired" in page
    assert "<b>approval denied</b>" in page
    assert "denied by a human reviewer" in page
    assert "approval expired" not in page and "with no decision" not in page
