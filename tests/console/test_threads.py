"""The console's threads (docs/conversations.md): the list, a thread read as
a conversation, sending it a message from the page and through the JSON
API, the refusal of a busy thread (409), and the roles: a viewer reads the
conversation masked and may not send; a message is escaped."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient

from runner import Agent, Engine
from runner.testing import Request, ScriptedModel, text
from tests.console.conftest import BASE, csrf_of, execute_all, role_headers


@pytest.fixture
def client(role_client: FlaskClient) -> FlaskClient:
    return role_client


headers = role_headers


def chat(policy: str = "enqueue") -> str:
    name = f"console-chat-{uuid.uuid4().hex[:6]}"

    def script(request: Request) -> Any:
        users = [m["content"] for m in request.messages if m.get("role") == "user"]
        return text(f"you said {users[-1]}")

    Agent(name=name, model=ScriptedModel(name, script).model, on_new_message=policy)
    return name


def test_a_thread_is_listed_read_and_sent_a_message_from_its_page(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent = chat()
    engine.send("t-page", "<b>hi</b>", agent=agent, by="ada")
    execute_all(engine, queued)
    listing = client.get(f"{BASE}/threads", headers=headers()).get_data(as_text=True)
    assert f'href="{BASE}/threads/t-page"' in listing and agent in listing
    page = client.get(f"{BASE}/threads/t-page", headers=headers()).get_data(as_text=True)
    assert "&lt;b&gt;hi&lt;/b&gt;" in page and "<b>hi</b>" not in page  # escaped
    assert "you said &lt;b&gt;hi&lt;/b&gt;" in page
    sent = client.post(
        f"{BASE}/threads/t-page",
        data={"message": "and more", "agent": agent, "csrf_token": csrf_of(page)},
        headers=headers(),
    )
    assert sent.status_code == 303 and "note=sent" in sent.headers["Location"]
    execute_all(engine, queued)
    view = engine.thread("t-page")
    assert [m["content"] for m in view.messages if m["role"] == "user"] == ["<b>hi</b>", "and more"]
    assert view.runs[-1].trigger.payload["by"] == "alice"
    assert [e.action for e in engine.audit_log()].count("viewed_payloads") >= 1


def test_the_json_api_reads_a_thread_and_sends_to_it_and_a_busy_thread_is_409(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent = chat("reject")
    earlier = engine.send("t-api", "zero", agent=agent)
    execute_all(engine, queued)
    # The session's CSRF token, as a page of the console carries it.
    token = csrf_of(client.get(f"{BASE}/threads/t-api", headers=headers()).get_data(as_text=True))
    path = f"{BASE}/api/threads/t-api/messages"
    first = client.post(
        path, data={"message": "one", "agent": agent, "csrf_token": token}, headers=headers()
    )
    assert first.status_code == 202 and first.content_type == "application/json"
    run_id = first.get_json()["run"]
    busy = client.post(
        path, data={"message": "two", "agent": agent, "csrf_token": token}, headers=headers()
    )
    assert busy.status_code == 409
    assert "on_new_message='reject'" in busy.get_json()["message"]
    no_token = client.post(path, data={"message": "two", "agent": agent}, headers=headers())
    assert no_token.status_code == 403
    execute_all(engine, queued)
    read = client.get(f"{BASE}/api/threads/t-api", headers=headers())
    data = json.loads(read.get_data(as_text=True))
    assert data["status"] == "idle" and [r["id"] for r in data["runs"]] == [earlier.id, run_id]
    said = [m["content"] for m in data["messages"]]
    assert said == ["zero", "you said zero", "one", "you said one"]


def test_a_viewer_reads_a_conversation_masked_and_may_not_send(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent = chat()
    engine.send("t-secret", "my card is 4111", agent=agent)
    execute_all(engine, queued)
    views_before = [e.action for e in engine.audit_log()].count("viewed_payloads")
    page = client.get(f"{BASE}/threads/t-secret", headers=headers("vic", "viewer"))
    body = page.get_data(as_text=True)
    assert page.status_code == 200 and "4111" not in body and "[masked]" in body
    assert "<textarea" not in body  # no box to send
    data = client.get(f"{BASE}/api/threads/t-secret", headers=headers("vic", "viewer")).get_json()
    assert "4111" not in json.dumps(data) and data["messages"][0]["role"] == "user"
    assert [e.action for e in engine.audit_log()].count("viewed_payloads") == views_before
    # A token of the session (a decider's page): the refusal is the viewer's role's.
    decider_page = client.get(f"{BASE}/threads/t-secret", headers=headers())
    token = csrf_of(decider_page.get_data(as_text=True))
    refused = client.post(
        f"{BASE}/api/threads/t-secret/messages",
        data={"message": "x", "agent": agent, "csrf_token": token},
        headers=headers("vic", "viewer"),
    )
    assert refused.status_code == 403
    assert len(engine.thread("t-secret").runs) == 1
