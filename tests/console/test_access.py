"""Who may see and do what: the guard's user, approval links, and nobody
(issue 15)."""

from __future__ import annotations

import uuid

import pytest
from flask import Flask
from flask.testing import FlaskClient

from runner import Engine, RunStatus
from runner.console.flask import console_blueprint
from runner.core.errors import ConfigurationError
from store.models import Decision
from tests.console.conftest import (
    BASE,
    HOSTILE_IMG,
    HOSTILE_SCRIPT,
    approval_agent,
    as_user,
    csrf_of,
    execute_all,
    guard,
    page_text,
    waiting_run,
)


def test_without_a_user_every_console_page_is_403_and_nothing_changes(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    for path in ("/", "/approvals", f"/runs/{run.id}", f"/runs/{run.id}/events"):
        page = page_text(client, BASE + path, user=None, status=403)
        assert "Sign in" in page and run.id not in page
    # With the session's CSRF token (from when someone was signed in), but no user.
    token = csrf_of(page_text(client, f"{BASE}/runs/{run.id}"))
    for path, form in [
        (f"/runs/{run.id}/cancel", {}),
        (f"/runs/{run.id}/retry", {}),
        (f"/approvals/{approval.approval_id}", {"decision": "approve"}),
        (f"/runs/{run.id}/steps/{approval.step_index}/decide", {"decision": "approve"}),
    ]:
        answer = client.post(BASE + path, data={**form, "csrf_token": token})
        assert answer.status_code == 403, path
    page_text(client, f"{BASE}/approvals/{approval.approval_id}", user=None, status=403)
    # A signed-in user sent to an approval's address finds it in the inbox.
    answer = client.get(f"{BASE}/approvals/{approval.approval_id}", headers=as_user())
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"{BASE}/approvals#a-{approval.approval_id}"
    assert engine.approvals(run.id)[0].pending
    assert engine.get_run(run.id).status is RunStatus.WAITING


def test_a_token_link_shows_its_approval_and_nothing_else(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent = approval_agent(note="for the broken mug")
    mine = engine.start(agent.name, {"customer": "secret-customer-1"})
    theirs = engine.start(agent.name, {"customer": "secret-customer-2"})
    execute_all(engine, queued)
    [approval] = engine.approvals(mine.id)
    [other] = engine.approvals(theirs.id)
    token = engine.token(approval.approval_id)
    link = f"{BASE}/approvals/{approval.approval_id}?token={token}"

    page = page_text(client, link, user=None)
    assert "Approve refund?" in page and "for the broken mug" in page
    for secret in ("secret-customer", mine.id, theirs.id, "I will refund it", "arrived broken"):
        assert secret not in page
    assert f'href="{BASE}/' not in page  # no way into the console
    assert 'data-expires="' in page

    # The token opens that approval, nothing else.
    for path in (
        f"{BASE}/approvals/{other.approval_id}?token={token}",
        f"{BASE}/approvals/{approval.approval_id}?token={token[:-2]}xx",
        f"{BASE}/approvals/0190a0a0-0000-7000-8000-000000000000?token={token}",
        f"{BASE}/approvals/{approval.approval_id}?token=",
        f"{BASE}/",
        f"{BASE}/approvals",
        f"{BASE}/runs/{mine.id}",
        f"{BASE}/runs/{theirs.id}",
    ):
        page_text(client, path, user=None, status=403)

    form = {
        "decision": "approve",
        "reason": "ok from the link",
        "token": token,
        "csrf_token": csrf_of(page),
    }
    answer = client.post(link, data=form)
    assert answer.status_code == 200 and "Approved" in answer.get_data(as_text=True)
    [decided] = engine.approvals(mine.id)
    assert (decided.decision, decided.decided_by, decided.reason) == (
        Decision.APPROVED,
        "link",
        "ok from the link",
    )
    again = client.post(link, data={**form, "decision": "deny"})
    assert again.status_code == 409
    assert "already approved by link" in again.get_data(as_text=True)
    assert engine.approvals(mine.id)[0].decision is Decision.APPROVED
    # Deciding another approval with this token is refused.
    wrong = client.post(f"{BASE}/approvals/{other.approval_id}", data=form)
    assert wrong.status_code == 403
    assert engine.approvals(theirs.id)[0].pending
    # A page that shows the decision now.
    assert "<b>approved</b> by link" in page_text(client, link, user=None)


def test_a_link_page_escapes_hostile_arguments(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, _run, approval = waiting_run(engine, queued, note=HOSTILE_SCRIPT + HOSTILE_IMG)
    link = f"{BASE}/approvals/{approval.approval_id}?token={engine.token(approval.approval_id)}"
    page = page_text(client, link, user=None)
    assert page.count("<script") == 1 and "<img" not in page
    assert "&lt;script&gt;window.pwned" in page and "&lt;img src=x onerror=" in page


def test_the_blueprint_needs_a_secret_key_for_its_csrf_tokens(engine: Engine) -> None:
    app = Flask(__name__)
    with pytest.raises(ConfigurationError, match="secret_key"):
        app.register_blueprint(console_blueprint(engine, guard=guard), url_prefix="/c")
    app = Flask(__name__)
    app.secret_key = uuid.uuid4().hex
    app.register_blueprint(console_blueprint(engine, guard=guard), url_prefix="/c")
    with app.test_client() as made:
        assert made.get("/c/", headers={"X-Test-User": "a"}).status_code == 200
