"""The Flask example, through its test client, against the real Postgres store."""

from __future__ import annotations

import logging
import stat
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from flask.testing import FlaskClient

from examples import agents
from runner import Engine, RunStatus
from store.postgres import PostgresStore
from tests.helpers import snapshot


@pytest.fixture
def client(flask_client: FlaskClient) -> FlaskClient:
    return flask_client


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


def test_approve_through_the_page_then_the_run_completes(
    client: FlaskClient, engine: Engine
) -> None:
    run_id, path, token = start_waiting_run(client, engine)
    shown = client.get(f"/runs/{run_id}", query_string={"token": token}).json
    assert shown is not None and shown["status"] == "waiting"
    assert shown["waiting"]["tool_name"] == "refund"
    assert shown["waiting"]["input"] == {"order_id": "A-1002", "amount": 125}
    assert path == f"/approvals/{shown['waiting']['approval_id']}"
    assert agents.refunds == []

    page = client.get(path, query_string={"token": token})
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "refund" in html and "A-1002" in html and "125" in html
    assert f'name="token" value="{token}"' in html

    decided = client.post(path, data={"token": token, "decision": "approve", "reason": "ok"})
    assert decided.status_code == 200
    assert "queued" in decided.get_data(as_text=True)
    assert engine.get_run(run_id).status is RunStatus.QUEUED

    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert [(r["order_id"], r["amount"]) for r in agents.refunds] == [("A-1002", 125)]
    finished = client.get(f"/runs/{run_id}").json
    assert finished is not None and finished["status"] == "completed"
    assert "refunded" in finished["output"] and finished["waiting"] is None


def test_deny_with_a_reason_completes_without_a_refund(client: FlaskClient, engine: Engine) -> None:
    run_id, path, token = start_waiting_run(client, engine)
    decided = client.post(path, data={"token": token, "decision": "deny", "reason": "<dup>"})
    assert decided.status_code == 200 and "Denied" in decided.get_data(as_text=True)
    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert agents.refunds == []
    assert "&lt;dup&gt;" in client.get(path, query_string={"token": token}).get_data(as_text=True)


def test_wrong_token_is_refused_and_changes_nothing(
    client: FlaskClient, engine: Engine, pg_store: PostgresStore
) -> None:
    run_id, path, token = start_waiting_run(client, engine)
    before = snapshot(pg_store)

    page = client.get(path, query_string={"token": "forged"})
    assert page.status_code == 400
    html = page.get_data(as_text=True)
    assert "the token is not valid" in html and "A-1002" not in html

    refused = client.post(path, data={"token": "forged", "decision": "approve"})
    assert refused.status_code == 400
    assert "the token is not valid" in refused.get_data(as_text=True)
    missing = client.post(path, data={"decision": "approve"})
    assert missing.status_code == 400
    assert "a token is required" in missing.get_data(as_text=True)
    assert client.post(path, data={"token": token, "decision": "maybe"}).status_code == 400

    assert snapshot(pg_store) == before
    assert engine.get_run(run_id).status is RunStatus.WAITING

    client.post(path, data={"token": token, "decision": "approve"})
    again = client.post(path, data={"token": token, "decision": "deny"})
    assert again.status_code == 400
    assert "already approved" in again.get_data(as_text=True)


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
    not_json = client.post("/runs", data="agent=support_triage")
    assert not_json.status_code == 400


def test_start_is_idempotent_on_id(client: FlaskClient) -> None:
    body = {"agent": "support_triage", "payload": {"message": "A-1001"}, "id": "order-a-1001"}
    first, second = client.post("/runs", json=body), client.post("/runs", json=body)
    assert first.json is not None and second.json is not None
    assert first.json["run_id"] == second.json["run_id"]


def test_unknown_run_and_approval(client: FlaskClient) -> None:
    assert client.get("/runs/0190a5f2-0000-7000-8000-000000000000").status_code == 404
    assert client.get("/runs/not-a-run").status_code == 404
    page = client.get("/approvals/not-an-approval", query_string={"token": "x"})
    assert page.status_code == 400 and "no approval" in page.get_data(as_text=True)


def test_the_page_escapes_tool_input(client: FlaskClient, engine: Engine) -> None:
    agents.ORDERS["A-666"] = {"order_id": "<script>alert(1)</script>", "total": 1}
    try:
        created = client.post(
            "/runs", json={"agent": "support_triage", "payload": {"message": "A-666"}}
        )
        assert created.json is not None
        engine.execute(created.json["run_id"])
        path, token = link_parts(agents.sent_links[-1])
        html = client.get(path, query_string={"token": token}).get_data(as_text=True)
        assert "<script>" not in html and "&lt;script&gt;" in html
    finally:
        del agents.ORDERS["A-666"]


def test_a_waiting_run_shows_its_approval_only_to_the_token_holder(
    client: FlaskClient, engine: Engine
) -> None:
    run_id, _, token = start_waiting_run(client, engine)
    waiting = engine.get_run(run_id).waiting
    assert waiting is not None
    for query in ({}, {"token": "forged"}, {"token": ""}):
        response = client.get(f"/runs/{run_id}", query_string=query)
        assert response.status_code == 200
        body = response.get_data(as_text=True)
        assert waiting.approval_id not in body and "A-1002" not in body and "125" not in body
        assert response.json is not None
        assert response.json["waiting"]["tool_name"] == "refund"
        assert "input" not in response.json["waiting"]
    holder = client.get(f"/runs/{run_id}", query_string={"token": token}).json
    assert holder is not None and holder["waiting"]["approval_id"] == waiting.approval_id
    assert holder["waiting"]["input"] == {"order_id": "A-1002", "amount": 125}


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
