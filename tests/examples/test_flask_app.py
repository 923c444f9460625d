"""The Flask example, through its test client, against the real Postgres store:
its JSON API, the console it mounts (signed in through its own ``/login``),
and the approval links its notifier sends, which open the console's page of
that one approval."""

from __future__ import annotations

import logging
import re
import stat
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from examples import agents
from runner import Engine, RunStatus
from store.models import Decision
from store.postgres import PostgresStore
from tests.helpers import snapshot


@pytest.fixture
def client(flask_client: FlaskClient) -> FlaskClient:
    return flask_client


CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found is not None, "the page has no form"
    return found.group(1)


def link_parts(link: str) -> tuple[str, str]:
    """The path and the token of an approval link."""
    url = urlsplit(link)
    return url.path, parse_qs(url.query)["token"][0]


def start_waiting_run(client: FlaskClient, engine: Engine) -> tuple[str, str, str]:
    """POST /runs, execute until the refund waits; the run id, link path, token."""
    created = client.post(
        "/runs",
        json={"agent": "support_triage", "payload": {"message": "A-1002 never came"}},
    )
    assert created.status_code == 201, created.json
    assert created.json is not None and created.json["status"] == "queued"
    run_id = created.json["run_id"]
    waiting = engine.execute(run_id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    [link] = agents.sent_links
    path, token = link_parts(link)
    return run_id, path, token


def open_link(client: FlaskClient, path: str, token: str) -> tuple[int, str]:
    page = client.get(path, query_string={"token": token})
    return page.status_code, page.get_data(as_text=True)


def decide(client: FlaskClient, path: str, token: str, decision: str, reason: str = "") -> str:
    """Decide as the link's holder does: open its page, send its form."""
    status, html = open_link(client, path, token)
    assert status == 200, html
    form = {"token": token, "decision": decision, "reason": reason, "csrf_token": csrf_of(html)}
    answer = client.post(path, data=form)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return answer.get_data(as_text=True)


def test_approve_through_the_link_then_the_run_completes(
    client: FlaskClient, engine: Engine
) -> None:
    run_id, path, token = start_waiting_run(client, engine)
    shown = client.get(f"/runs/{run_id}").json
    assert shown is not None and shown["status"] == "waiting"
    assert shown["waiting"]["tool_name"] == "refund"
    [approval] = engine.approvals(run_id)
    assert path == f"/console/approvals/{approval.approval_id}"
    assert agents.refunds == []

    status, html = open_link(client, path, token)
    assert status == 200
    assert "refund" in html and "A-1002" in html and "125" in html
    assert f'name="token" value="{token}"' in html

    assert "Approved: refund" in decide(client, path, token, "approve", "ok")
    assert engine.get_run(run_id).status is RunStatus.QUEUED
    [decided] = engine.approvals(run_id)
    assert (decided.decision, decided.decided_by, decided.reason) == (
        Decision.APPROVED,
        "link",
        "ok",
    )

    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert [(r["order_id"], r["amount"]) for r in agents.refunds] == [("A-1002", 125)]
    finished = client.get(f"/runs/{run_id}").json
    assert finished is not None and finished["status"] == "completed"
    assert "refunded" in finished["output"] and finished["waiting"] is None


def test_deny_with_a_reason_completes_without_a_refund(client: FlaskClient, engine: Engine) -> None:
    run_id, path, token = start_waiting_run(client, engine)
    assert "Denied: refund" in decide(client, path, token, "deny", "<dup>")
    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert agents.refunds == []
    status, html = open_link(client, path, token)
    assert status == 200 and "&lt;dup&gt;" in html and "<dup>" not in html


def test_wrong_token_is_refused_and_changes_nothing(
    client: FlaskClient, engine: Engine, pg_store: PostgresStore
) -> None:
    run_id, path, token = start_waiting_run(client, engine)
    before = snapshot(pg_store)
    _, real_page = open_link(client, path, token)
    csrf = csrf_of(real_page)

    for forged in ("forged", "", token[:-2]):
        status, html = open_link(client, path, forged)
        assert status == 403 and "A-1002" not in html
    refused = client.post(path, data={"token": "forged", "decision": "approve", "csrf_token": csrf})
    assert refused.status_code == 403
    no_csrf = client.post(path, data={"token": token, "decision": "approve"})
    assert no_csrf.status_code == 403 and "CSRF" in no_csrf.get_data(as_text=True)
    maybe = {"token": token, "decision": "maybe", "csrf_token": csrf}
    assert client.post(path, data=maybe).status_code == 400

    assert snapshot(pg_store) == before
    assert engine.get_run(run_id).status is RunStatus.WAITING

    decide(client, path, token, "approve")
    again = client.post(path, data={"token": token, "decision": "deny", "csrf_token": csrf})
    assert again.status_code == 409
    assert "already approved" in again.get_data(as_text=True)


def test_a_link_opens_its_approval_and_nothing_else(client: FlaskClient, engine: Engine) -> None:
    run_id, path, token = start_waiting_run(client, engine)
    status, _ = open_link(client, path, token)
    assert status == 200
    # The same client, with the link's session, is not signed in to the console.
    for page in ("/console/", "/console/approvals", f"/console/runs/{run_id}"):
        answer = client.get(page)
        assert answer.status_code == 303 and answer.headers["Location"].startswith("/login?next=")
    assert client.get(f"/console/runs/{run_id}/events").status_code == 303


def test_bad_start_requests_are_400(client: FlaskClient) -> None:
    def error(body: object) -> str:
        response = client.post("/runs", json=body)
        assert response.status_code == 400
        assert response.json is not None
        message: str = response.json["error"]
        return message

    assert "no agent named 'nobody'" in error({"agent": "nobody", "payload": {}})
    assert "JSON object" in error({"agent": "support_triage", "payload": [1, 2]})
    assert "JSON object" in error(["support_triage"])
    assert "limit" in error({"agent": "support_triage", "payload": {"text": "x" * 300_000}})
    not_json = client.post("/runs", data="agent=support_triage", content_type="application/json")
    assert not_json.status_code == 400


def test_start_is_idempotent_on_id(client: FlaskClient) -> None:
    body = {"agent": "support_triage", "payload": {"message": "A-1001"}, "id": "order-a-1001"}
    first, second = client.post("/runs", json=body), client.post("/runs", json=body)
    assert first.json is not None and second.json is not None
    assert first.json["run_id"] == second.json["run_id"]


def test_unknown_run_and_approval(client: FlaskClient) -> None:
    assert client.get("/runs/0190a5f2-0000-7000-8000-000000000000").status_code == 404
    assert client.get("/runs/not-a-run").status_code == 404
    status, html = open_link(client, "/console/approvals/not-an-approval", "x")
    assert status == 403 and "not valid" in html


def test_the_link_page_escapes_tool_input(client: FlaskClient, engine: Engine) -> None:
    agents.ORDERS["A-666"] = {"order_id": "<script>alert(1)</script>", "total": 1}
    try:
        created = client.post(
            "/runs", json={"agent": "support_triage", "payload": {"message": "A-666"}}
        )
        assert created.json is not None
        engine.execute(created.json["run_id"])
        path, token = link_parts(agents.sent_links[-1])
        status, html = open_link(client, path, token)
        assert status == 200 and "<script>alert" not in html and "&lt;script&gt;" in html
    finally:
        del agents.ORDERS["A-666"]


def test_a_waiting_runs_json_never_shows_what_it_asks_for(
    client: FlaskClient, engine: Engine
) -> None:
    run_id, _, token = start_waiting_run(client, engine)
    waiting = engine.get_run(run_id).waiting
    assert waiting is not None
    for query in ({}, {"token": "forged"}, {"token": token}):
        response = client.get(f"/runs/{run_id}", query_string=query)
        assert response.status_code == 200
        body = response.get_data(as_text=True)
        assert waiting.approval_id not in body and "A-1002" not in body and "125" not in body
        assert response.json is not None
        assert response.json["waiting"]["tool_name"] == "refund"
        assert "input" not in response.json["waiting"]


def test_the_notifier_logs_no_token(
    client: FlaskClient,
    engine: Engine,
    inbox: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    run_id, _, token = start_waiting_run(client, engine)
    waiting = engine.get_run(run_id).waiting
    assert waiting is not None
    out, err = capfd.readouterr()
    logged = caplog.text + out + err
    assert f"approval {waiting.approval_id}" in caplog.text
    assert token not in logged and "token=" not in logged
    # The link itself went to the approvers' inbox, readable by its owner only.
    assert inbox.read_text().splitlines() == [agents.approval_link(waiting.approval_id, token)]
    assert stat.S_IMODE(inbox.stat().st_mode) == 0o600


@pytest.fixture
def accounts(console_users: Path) -> Path:
    return console_users


def sign_in(
    client: FlaskClient, password: str = "correct horse battery", **form: str
) -> TestResponse:
    target = form.pop("next", "/console/")
    page = client.get("/login", query_string={"next": target})
    csrf = csrf_of(page.get_data(as_text=True))
    # What the form sends: its hidden next field holds the page it was asked for.
    data = {"name": "alice", "password": password, "csrf_token": csrf, "next": target, **form}
    return client.post("/login", data=data)


def test_an_approver_signs_in_and_decides_in_the_console(
    client: FlaskClient, engine: Engine, accounts: Path
) -> None:
    run_id, _, _ = start_waiting_run(client, engine)
    assert client.get("/console/approvals").status_code == 303  # not signed in yet
    signed = sign_in(client, next="/console/approvals")
    assert signed.status_code == 303 and signed.headers["Location"] == "/console/approvals"
    inbox = client.get("/console/approvals").get_data(as_text=True)
    assert "support_triage asks to call refund" in inbox and "A-1002" in inbox
    [approval] = engine.approvals(run_id)
    form = {"decision": "approve", "reason": "looks right", "csrf_token": csrf_of(inbox)}
    decided = client.post(f"/console/approvals/{approval.approval_id}", data=form)
    assert decided.status_code == 303
    [approval] = engine.approvals(run_id)
    assert (approval.decided_by, approval.reason) == ("alice", "looks right")
    page = client.get(f"/console/runs/{run_id}").get_data(as_text=True)
    assert "approval approved" in page and "by alice · reason: looks right" in page

    logout = client.post("/logout", data={"csrf_token": csrf_of(page)})
    assert logout.status_code == 303
    assert client.get("/console/").status_code == 303


def test_sign_in_refuses_wrong_passwords_stale_forms_and_other_sites(
    client: FlaskClient, accounts: Path
) -> None:
    assert sign_in(client, password="wrong password").status_code == 403
    assert client.get("/console/").status_code == 303
    stale = client.post("/login", data={"name": "alice", "password": "correct horse battery"})
    assert stale.status_code == 403
    assert client.get("/console/").status_code == 303
    for elsewhere in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
        answer = sign_in(client, next=elsewhere)
        assert answer.headers["Location"] == "/console/"
