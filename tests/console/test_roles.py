"""Who may see what (docs/security.md, "Roles"), through the Flask blueprint
and its ``abilities`` callable: without ``see_payloads`` the run page, the
inbox, the event stream and a schedule's page show payloads' shape with
their values masked and record no view; without ``decide`` no form is shown
and every decision's POST is refused, changing nothing; an approval link
shows its holder the call it decides, whoever else may see what."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from runner import Agent, Engine
from runner.console.abilities import EVERY_ABILITY, Ability, abilities_of, parse_role
from runner.console.flask import console_blueprint
from runner.console.masking import MASK
from runner.core.audit import AuditAction
from runner.testing import ScriptedModel, text
from store.models import Decision, Fence, RetryWait, utcnow
from store.postgres import PostgresStore
from tests.console.conftest import (
    BASE,
    USER_HEADER,
    as_user,
    csrf_of,
    execute_all,
    guard,
    plain_agent,
    unique,
    waiting_question,
    waiting_run,
)
from tests.helpers import snapshot, try_claim

ROLE_HEADER = "X-Test-Role"
ASKED = {"customer": "Ada Lovelace", "order": {"id": "A-1001", "items": [1, 2]}}


def abilities(request: Any) -> frozenset[Ability]:
    """The host app's roles, as these tests stage them: a header names one."""
    role = request.headers.get(ROLE_HEADER)
    if role == "decider":  # decides without seeing payloads
        return frozenset({Ability.SEE_RUNS, Ability.DECIDE})
    return EVERY_ABILITY if role is None else abilities_of(parse_role(role))


@pytest.fixture
def client(engine: Engine) -> Iterator[FlaskClient]:
    app = Flask(__name__)
    app.secret_key = "console-roles-" + uuid.uuid4().hex
    # A short live stream: a waiting run's stream ends, and the test reads it whole.
    blueprint = console_blueprint(engine, guard=guard, abilities=abilities, live_timeout=0.5)
    app.register_blueprint(blueprint, url_prefix=BASE)
    with app.test_client() as made:
        yield made


def as_role(role: str, user: str | None = None) -> dict[str, str]:
    return {USER_HEADER: user or role, ROLE_HEADER: role}


def get(client: FlaskClient, path: str, role: str, status: int = 200) -> str:
    answer = client.get(path, headers=as_role(role))
    body = answer.get_data(as_text=True)
    assert answer.status_code == status, body[-2000:]
    return body


def views(engine: Engine) -> list[tuple[str, str | None]]:
    return [
        (e.actor, e.run_id) for e in engine.audit_log() if e.action == AuditAction.VIEWED_PAYLOADS
    ]


def test_a_viewer_sees_the_shape_of_payloads_masked_and_no_view_is_recorded(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _, run, approval = waiting_run(engine, queued, payload=ASKED)
    secrets = ("Ada Lovelace", "A-1001", "arrived broken", "The order arrived broken")

    page = get(client, f"{BASE}/runs/{run.id}", "viewer")
    assert 'id="status" class="st st-waiting">waiting</span>' in page and run.agent in page
    assert MASK in page and "&quot;customer&quot;" in page  # the keys stay
    assert not any(secret in page for secret in secrets)
    assert 'id="cancel"' not in page and 'action="' + f"{BASE}/runs/{run.id}/cancel" not in page

    inbox = get(client, f"{BASE}/approvals", "viewer")
    assert f'id="a-{approval.approval_id}"' in inbox and "asks to call refund" in inbox
    assert MASK in inbox and not any(secret in inbox for secret in secrets)
    assert 'class="approve"' not in inbox and 'name="reason"' not in inbox

    stream = get(client, f"{BASE}/runs/{run.id}/events?after=0", "viewer")
    frames = [
        json.loads(line.removeprefix("data: "))
        for line in stream.splitlines()
        if line.startswith("data: {") and '"run_id"' in line
    ]
    kinds = {frame["type"] for frame in frames}
    assert {"status", "step", "approval"} <= kinds
    assert not any(secret in stream for secret in secrets)
    tool = next(f for f in frames if f["type"] == "step" and f["data"]["kind"] == "tool")
    assert tool["data"]["input"] == {"order": MASK} and tool["data"]["name"] == "lookup"
    requested = next(f for f in frames if f["type"] == "approval")
    assert requested["data"]["input"] == {"amount": MASK, "note": MASK}

    assert views(engine) == []  # the viewer read no payload
    # A reader sees them, and that is recorded; so does a link's holder.
    assert "Ada Lovelace" in get(client, f"{BASE}/runs/{run.id}", "reader")
    token = engine.token(approval.approval_id)
    link = client.get(f"{BASE}/approvals/{approval.approval_id}?token={token}")
    assert link.status_code == 200 and MASK not in link.get_data(as_text=True)
    assert "&quot;amount&quot;: 30" in link.get_data(as_text=True)
    assert views(engine) == [("reader", run.id), ("link", run.id)]


def test_a_schedules_payload_and_keys_are_masked_for_a_viewer(
    client: FlaskClient, engine: Engine
) -> None:
    engine.schedules.create(
        "pulse", plain_agent(), every=60, payload={"note": "quarterly figures"}, keys={"t": "ops"}
    )
    page = get(client, f"{BASE}/schedules/pulse", "viewer")
    assert "every 60 s" in page and MASK in page
    assert "quarterly figures" not in page and "t=ops" not in page
    assert "quarterly figures" in get(client, f"{BASE}/schedules/pulse", "reader")


def test_a_viewer_or_a_reader_posting_a_decision_is_refused_and_nothing_changes(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent, run, approval = waiting_run(engine, queued, payload=ASKED)
    asked_run, question = waiting_question(engine, queued)
    ended = engine.start(plain_agent(), {})
    execute_all(engine, queued)
    # The session's CSRF token, from a page an approver sees with its forms.
    token = csrf_of(get(client, f"{BASE}/approvals", "approver"))
    forms = [
        (f"/runs/{run.id}/cancel", {}),
        (f"/runs/{ended.id}/retry", {}),
        (f"/approvals/{approval.approval_id}", {"decision": "approve"}),
        (f"/approvals/{approval.approval_id}", {"decision": "deny", "reason": "no"}),
        (
            f"/approvals/{approval.approval_id}",
            {"decision": "approve", "run": run.id, "arguments": '{"amount": 1, "note": ""}'},
        ),
        (f"/runs/{run.id}/steps/{approval.step_index}/decide", {"decision": "approve"}),
        (f"/runs/{run.id}/effects/call-1/resolve", {"outcome": "done"}),
        (
            f"/approvals/{question.approval_id}",
            {"decision": "answer", "run": asked_run.id, "answer": "yes"},
        ),
    ]
    before = snapshot(engine.store)
    logged = len(engine.audit_log())
    for role in ("viewer", "reader"):
        for path, form in forms:
            answer = client.post(
                BASE + path, data={**form, "csrf_token": token}, headers=as_role(role)
            )
            body = answer.get_data(as_text=True)
            assert answer.status_code == 403, (role, path, body[-500:])
            assert "may not decide" in body and "nothing changed" in body
    assert snapshot(engine.store) == before
    assert not [e for e in engine.audit_log()[logged:] if e.action != AuditAction.VIEWED_PAYLOADS]
    assert agent.refunds.done == []
    # The control: the same form from an approver goes through.
    answer = client.post(
        f"{BASE}/approvals/{approval.approval_id}",
        data={"decision": "approve", "csrf_token": token},
        headers=as_role("approver"),
    )
    assert answer.status_code == 303
    assert engine.approvals(run.id)[0].decision is Decision.APPROVED


def test_deciding_without_seeing_payloads_offers_no_masked_arguments_to_edit(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent, run, approval = waiting_run(engine, queued)
    inbox = get(client, f"{BASE}/approvals", "decider")
    assert 'class="approve"' in inbox and MASK in inbox
    assert 'name="arguments"' not in inbox  # a masked box sent back would be an edit
    answer = client.post(
        f"{BASE}/approvals/{approval.approval_id}",
        data={"decision": "approve", "next": "inbox", "run": run.id, "csrf_token": csrf_of(inbox)},
        headers=as_role("decider"),
    )
    assert answer.status_code == 303
    execute_all(engine, queued)
    assert agent.refunds.done == [30]  # the model's own arguments
    assert not engine.approvals(run.id)[0].edited
    assert views(engine) == []


def test_without_an_abilities_callable_a_signed_in_user_may_do_everything(
    engine: Engine, queued: list[str]
) -> None:
    app = Flask(__name__)
    app.secret_key = "console-roles-" + uuid.uuid4().hex
    app.register_blueprint(console_blueprint(engine, guard=guard), url_prefix=BASE)
    _, run, _ = waiting_run(engine, queued, payload=ASKED)
    with app.test_client() as client:
        page = client.get(f"{BASE}/runs/{run.id}", headers=as_user("alice"))
    body = page.get_data(as_text=True)
    assert "Ada Lovelace" in body and 'id="cancel"' in body and MASK not in body
    assert views(engine) == [("alice", run.id)]


def test_a_failed_model_calls_error_is_masked_where_the_page_says_why_it_waits(
    client: FlaskClient, engine: Engine, pg_store: PostgresStore
) -> None:
    name = unique("again")
    Agent(name=name, model=ScriptedModel(name, [text("never")]).model)
    run = engine.start(name, {})
    claim = try_claim(pg_store, run.id, "worker-x", 30)
    assert claim is not None
    at = utcnow() + timedelta(minutes=2)
    said = "rate limited for ada@example.com"
    pg_store.defer_retry(
        Fence(run.id, "worker-x", claim.epoch), RetryWait(5, utcnow(), said, at=at)
    )
    page = get(client, f"{BASE}/runs/{run.id}", "viewer")
    assert "attempt 6 at" in page and MASK in page and "ada@example.com" not in page
    assert said in get(client, f"{BASE}/runs/{run.id}", "reader")
