"""The approvals inbox: what an approver sees, and deciding once, with a
reason, by someone (issue 15)."""

from __future__ import annotations

from flask.testing import FlaskClient

from runner import Engine, RunStatus
from store.models import Decision
from tests.console.conftest import (
    BASE,
    HOSTILE_IMG,
    HOSTILE_SCRIPT,
    approval_agent,
    as_user,
    csrf_of,
    execute_all,
    page_text,
    post,
    waiting_run,
)

INBOX = f"{BASE}/approvals"


def test_the_inbox_shows_what_an_approver_needs_to_judge(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent, run, approval = waiting_run(
        engine, queued, {"order": "A-1001", "customer": "Ada Lovelace"}
    )

    page = page_text(client, INBOX)
    assert f"{agent.name} asks to call refund" in page  # the agent
    assert "Ada Lovelace" in page  # the trigger payload
    assert "I will refund it" in page  # the message that made the call
    assert "Results it had seen (1)" in page and "arrived broken" in page  # what it saw
    assert "<li><b>lookup</b>" in page  # named by the call that asked for it
    assert "&quot;amount&quot;: 30" in page  # the arguments
    assert f'data-expires="{approval.expires_at.isoformat()}"' in page  # counts down
    assert "expires in 23 h 59 min" in page or "expires in 24 h 0 min" in page
    assert f'href="{BASE}/runs/{run.id}"' in page
    assert f'action="{BASE}/approvals/{approval.approval_id}"' in page


def test_hostile_text_in_the_inbox_is_escaped(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent = approval_agent(says="Refund " + HOSTILE_SCRIPT, note=HOSTILE_IMG)
    engine.start(agent.name, {"customer": HOSTILE_SCRIPT})
    execute_all(engine, queued)
    page = page_text(client, INBOX)
    assert page.count("<script") == 1 and "<img" not in page
    assert page.count("&lt;script&gt;window.pwned") == 2  # the payload and the model's text
    assert "&lt;img src=x onerror=" in page  # the arguments


def test_approving_with_a_reason_records_who_and_resumes_the_run(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent, run, approval = waiting_run(engine, queued)

    answer = post(
        client,
        f"{INBOX}/{approval.approval_id}",
        {"decision": "approve", "reason": "customer sent a photo", "next": "inbox"},
        csrf_from=INBOX,
        user="alice",
    )
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"{INBOX}?note=approved"
    [decided] = engine.approvals(run.id)
    assert decided.decision is Decision.APPROVED
    assert decided.decided_by == "alice"
    assert decided.reason == "customer sent a photo"
    assert "Nothing waits for a decision." in page_text(client, f"{INBOX}?note=approved")

    assert queued == [run.id]
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    assert agent.refunds.done == [30]


def test_a_second_post_decides_nothing(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    path = f"{INBOX}/{approval.approval_id}"
    token = csrf_of(page_text(client, INBOX, "alice"))

    form = {"decision": "approve", "csrf_token": token, "next": "inbox"}
    first = client.post(path, data=form, headers=as_user("alice"))
    second = client.post(path, data=form, headers=as_user("alice"))  # a double click
    assert first.status_code == 303
    assert second.status_code == 409
    assert "already decided" in second.get_data(as_text=True)
    late = client.post(path, data={**form, "decision": "deny"}, headers=as_user("bob"))
    assert late.status_code == 409
    [decided] = engine.approvals(run.id)
    assert (decided.decision, decided.decided_by) == (Decision.APPROVED, "alice")
    assert queued == [run.id]  # enqueued once


def test_deny_all_of_a_step_at_once(client: FlaskClient, engine: Engine, queued: list[str]) -> None:
    agent = approval_agent(calls=2)
    run = engine.start(agent.name, {})
    execute_all(engine, queued)
    asked = engine.approvals(run.id)
    assert len(asked) == 2
    page = page_text(client, INBOX)
    assert page.count('<article class="ask">') == 1  # one card for the step
    action = f"{BASE}/runs/{run.id}/steps/{asked[0].step_index}/decide"
    assert f'action="{action}"' in page and "All 2 calls of this step" in page

    form = {"decision": "deny", "reason": "not without a photo"}
    answer = post(client, action, form, csrf_from=INBOX)
    assert answer.status_code == 303
    decided = engine.approvals(run.id)
    assert {(a.decision, a.decided_by, a.reason) for a in decided} == {
        (Decision.DENIED, "alice", "not without a photo")
    }
    run_page = f"{BASE}/runs/{run.id}"
    again = post(client, action, form, csrf_from=run_page)
    assert again.status_code == 409
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    assert agent.refunds.done == []
    steps = f"{BASE}/runs/{run.id}/steps"
    assert post(client, f"{steps}/9/decide", form, csrf_from=run_page).status_code == 404
    assert post(client, f"{steps}/x/decide", form, csrf_from=run_page).status_code == 400


def test_a_post_without_the_csrf_token_changes_nothing(
    client: FlaskClient, app: object, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    path = f"{INBOX}/{approval.approval_id}"
    page_text(client, INBOX)  # the session has a token now

    missing = client.post(path, data={"decision": "approve"}, headers=as_user())
    wrong = client.post(
        path, data={"decision": "approve", "csrf_token": "x" * 43}, headers=as_user()
    )
    cancel = client.post(f"{BASE}/runs/{run.id}/cancel", headers=as_user())
    for answer in (missing, wrong, cancel):
        assert answer.status_code == 403
        assert "CSRF" in answer.get_data(as_text=True)
    # Another session's token does not pass for this one.
    with client.application.test_client() as other:
        foreign = csrf_of(page_text(other, INBOX))
    stolen = client.post(
        path, data={"decision": "approve", "csrf_token": foreign}, headers=as_user()
    )
    assert stolen.status_code == 403
    [still] = engine.approvals(run.id)
    assert still.pending and queued == []
    assert engine.get_run(run.id).status is RunStatus.WAITING


def test_malformed_forms_are_one_clear_400(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    path = f"{INBOX}/{approval.approval_id}"
    token = csrf_of(page_text(client, INBOX))
    urlencoded = {"Content-Type": "application/x-www-form-urlencoded", **as_user()}
    for body, status in [
        (f"csrf_token={token}&decision=approve&reason=%FF".encode(), 400),  # not UTF-8
        (f"csrf_token={token}&decision=maybe".encode(), 400),
        (f"csrf_token={token}&decision=approve&reason={'r' * 3000}".encode(), 400),
    ]:
        answer = client.post(path, data=body, headers=urlencoded)
        assert answer.status_code == status, answer.get_data(as_text=True)
    answer = client.post(
        path,
        data={"csrf_token": token, "decision": "approve", "f": (b"x", "x.txt")},
        headers=as_user(),
    )
    assert answer.status_code == 415
    assert engine.approvals(run.id)[0].pending
