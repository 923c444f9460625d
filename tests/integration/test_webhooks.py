"""Webhook deliveries on real Postgres (docs/triggers.md): a delivery signed as
the Standard Webhooks specification says starts one run; a redelivery finds
it; every refused delivery gets its 4xx and one line, and writes nothing.
Senders sign with the ``standardwebhooks`` package, as a sender would."""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from standardwebhooks import Webhook

from runner import Agent, Engine
from runner.core.errors import ConfigurationError
from runner.testing import ScriptedModel, text
from runner.webhooks import Delivery, Mapped, WebhookReceiver, new_secret
from store.postgres import PostgresStore
from tests.helpers import snapshot

OLD, NEW = new_secret(), new_secret()


@pytest.fixture
def agent() -> str:
    name = f"hooked-{uuid.uuid4().hex[:8]}"
    Agent(name=name, model=ScriptedModel(name, lambda request: text("ok")).model)
    return name


@pytest.fixture
def engine(pg_store: PostgresStore) -> Iterator[Engine]:
    made = Engine(pg_store, enqueue=None)
    yield made
    made.close()


@pytest.fixture
def receiver(engine: Engine, agent: str) -> WebhookReceiver:
    return WebhookReceiver(
        engine, routes={"github": agent}, secrets={"github": [NEW, OLD]}, max_body_bytes=4096
    )


def signed(
    body: Any,
    secret: str = NEW,
    *,
    msg_id: str | None = None,
    at: float | None = None,
) -> tuple[dict[str, str], bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    when = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    signature = Webhook(secret).sign(msg_id, when, data.decode("utf-8", "replace"))
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": signature,
    }
    return headers, data


def runs(engine: Engine) -> list[Any]:
    return engine.list_runs(limit=100)


def test_a_delivery_starts_one_run_and_its_redelivery_none(
    engine: Engine, receiver: WebhookReceiver, agent: str
) -> None:
    headers, body = signed({"action": "opened", "issue": 7}, msg_id="msg_2c1")
    answer = receiver.handle("github", headers, body)
    assert answer.status == 200
    [run] = runs(engine)
    assert answer.body == {"run_id": run.id, "agent": agent, "status": "queued"}
    trigger = run.trigger
    assert (trigger.source, trigger.trigger, trigger.id, trigger.payload) == (
        "webhook",
        "github",
        "webhook:github:msg_2c1",
        {"action": "opened", "issue": 7},
    )
    assert trigger.keys == {"webhook_id": "msg_2c1"}
    again = receiver.handle("github", headers, body)  # the sender retries
    assert (again.status, again.body["run_id"]) == (200, run.id)
    assert len(runs(engine)) == 1


def test_a_rotated_secret_verifies_beside_the_new_one(
    engine: Engine, receiver: WebhookReceiver
) -> None:
    assert receiver.handle("github", *signed({"n": 1}, OLD)).status == 200
    assert receiver.handle("github", *signed({"n": 2}, NEW)).status == 200
    # Several signatures in one header (a sender mid-rotation): one that matches is enough.
    headers, body = signed({"n": 3}, NEW)
    stranger = Webhook(new_secret()).sign(headers["webhook-id"], datetime.now(UTC), body.decode())
    headers["webhook-signature"] = f"{stranger} {headers['webhook-signature']}"
    assert receiver.handle("github", headers, body).status == 200
    assert len(runs(engine)) == 3


def _tampered() -> tuple[dict[str, str], bytes]:
    headers, _ = signed({"amount": 1})
    return headers, json.dumps({"amount": 1000}).encode()


def _without(name: str) -> tuple[dict[str, str], bytes]:
    headers, body = signed({"n": 1})
    del headers[name]
    return headers, body


def _with(name: str, value: str) -> tuple[dict[str, str], bytes]:
    headers, body = signed({"n": 1})
    headers[name] = value
    return headers, body


REFUSED = {
    "a tampered body": (_tampered, "github", 401, "no signature matches"),
    "a wrong secret": (lambda: signed({"n": 1}, new_secret()), "github", 401, "no signature"),
    "an expired timestamp": (
        lambda: signed({"n": 1}, at=time.time() - 600),
        "github",
        401,
        "too old",
    ),
    "a timestamp from the future": (
        lambda: signed({"n": 1}, at=time.time() + 600),
        "github",
        401,
        "too new",
    ),
    "no webhook-id": (lambda: _without("webhook-id"), "github", 400, "missing header webhook-id"),
    "no timestamp": (
        lambda: _without("webhook-timestamp"),
        "github",
        400,
        "missing header webhook-timestamp",
    ),
    "no signature": (
        lambda: _without("webhook-signature"),
        "github",
        400,
        "missing header webhook-signature",
    ),
    "a timestamp that is no number": (
        lambda: _with("webhook-timestamp", "soon"),
        "github",
        400,
        "not a number",
    ),
    "a signature that is no v1 entry": (
        lambda: _with("webhook-signature", "garbage"),
        "github",
        400,
        "'v1,<base64>'",
    ),
    "a signature of bad base64": (
        lambda: _with("webhook-signature", "v1,@@@"),
        "github",
        401,
        "no signature matches",
    ),
    "a header of control characters": (
        lambda: _with("webhook-id", "msg\x00\n1"),
        "github",
        400,
        "printable ASCII",
    ),
    "a body that is not JSON": (lambda: signed(b"not json"), "github", 400, "not JSON"),
    "NaN in the JSON": (lambda: signed(b'{"n": NaN}'), "github", 400, "not JSON"),
    "a body that is not UTF-8": (
        lambda: ({**signed({"n": 1})[0]}, b"\xff\xfe{}"),
        "github",
        400,
        "not UTF-8",
    ),
    "an oversized body": (
        lambda: signed({"blob": "x" * 5000}),
        "github",
        413,
        "over 4096 bytes",
    ),
    "an unknown route": (lambda: signed({"n": 1}), "gitlab", 404, "no webhook route"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_delivery_gets_its_4xx_and_writes_nothing(
    engine: Engine, receiver: WebhookReceiver, case: str
) -> None:
    make, route, status, said = REFUSED[case]
    headers, body = make()  # type: ignore[operator]
    before = snapshot(engine.store)
    answer = receiver.handle(route, headers, body)
    assert answer.status == status, answer.body
    assert said in answer.body["error"]
    assert set(answer.body) == {"error"}
    assert snapshot(engine.store) == before


def test_a_mapper_chooses_the_payload_thread_and_keys(engine: Engine, agent: str) -> None:
    def mapper(delivery: Delivery) -> Mapped:
        issue = delivery.payload["issue"]
        return Mapped({"issue": issue}, thread=f"issue-{issue}", keys={"repo": "shop"})

    receiver = WebhookReceiver(engine, routes={"gh": agent}, secrets={"gh": [NEW]}, mapper=mapper)
    assert receiver.handle("gh", *signed({"issue": 12, "noise": "x"})).status == 200
    [run] = runs(engine)
    assert (run.trigger.payload, run.thread) == ({"issue": 12}, "issue-12")
    assert run.trigger.keys["repo"] == "shop"
    before = snapshot(engine.store)
    answer = receiver.handle("gh", *signed({"no_issue": True}))
    assert answer.status == 422 and "cannot be mapped" in answer.body["error"]
    assert snapshot(engine.store) == before


def test_a_mapper_gives_the_run_its_priority(engine: Engine, agent: str) -> None:
    def mapper(delivery: Delivery) -> Mapped:
        urgent = delivery.payload.get("urgent") is True
        return Mapped(delivery.payload, priority=9 if urgent else 0)

    receiver = WebhookReceiver(engine, routes={"gh": agent}, secrets={"gh": [NEW]}, mapper=mapper)
    assert receiver.handle("gh", *signed({"urgent": True})).status == 200
    [run] = runs(engine)
    assert run.priority == 9
    before = snapshot(engine.store)
    bad = WebhookReceiver(
        engine,
        routes={"gh": agent},
        secrets={"gh": [NEW]},
        mapper=lambda delivery: Mapped(delivery.payload, priority=12),
    )
    answer = bad.handle("gh", *signed({"n": 2}))
    assert answer.status == 422 and "priority" in answer.body["error"]
    assert snapshot(engine.store) == before


def test_the_receiver_refuses_a_bad_configuration(engine: Engine, agent: str) -> None:
    for secrets, match in [
        ({}, "has no secret"),
        ({"r": []}, "has no secret"),
        ({"r": NEW}, "as a list"),
        ({"r": ["plain-secret"]}, "'whsec_'"),
        ({"r": ["whsec_@@@"]}, "must be base64"),
        ({"r": ["whsec_c2hvcnQ="]}, "at least 16 bytes"),
        ({"r": [NEW], "other": [NEW]}, "routes that do not exist"),
    ]:
        with pytest.raises(ConfigurationError, match=match):
            WebhookReceiver(engine, routes={"r": agent}, secrets=secrets)  # type: ignore[arg-type]


def test_a_route_whose_agent_this_process_lacks_is_a_5xx_the_sender_retries(
    engine: Engine,
) -> None:
    receiver = WebhookReceiver(engine, routes={"r": "not-registered"}, secrets={"r": [NEW]})
    before = snapshot(engine.store)
    answer = receiver.handle("r", *signed({"n": 1}))
    assert answer.status == 500 and "cannot start its agent" in answer.body["error"]
    assert snapshot(engine.store) == before


def wsgi(
    receiver: WebhookReceiver, method: str, path: str, headers: dict[str, str], body: bytes
) -> tuple[str, dict[str, Any]]:
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        **{"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()},
    }
    status: list[str] = []
    out = b"".join(receiver.wsgi_app(environ, lambda s, h: status.append(s)))
    return status[0], json.loads(out)


def test_the_wsgi_application_serves_deliveries(engine: Engine, receiver: WebhookReceiver) -> None:
    headers, body = signed({"n": 1})
    status, answer = wsgi(receiver, "POST", "/github", headers, body)
    assert status == "200 OK" and answer["run_id"] == runs(engine)[0].id
    assert wsgi(receiver, "GET", "/github", {}, b"")[0] == "405 Method Not Allowed"
    assert wsgi(receiver, "POST", "/a/b", headers, body)[0] == "404 Not Found"
    big = b"x" * 5000
    status, answer = wsgi(receiver, "POST", "/github", headers, big)
    assert status == "413 Payload Too Large"


def test_the_flask_blueprint_serves_deliveries(engine: Engine, receiver: WebhookReceiver) -> None:
    from flask import Flask

    from runner.webhooks.flask import webhook_blueprint

    app = Flask(__name__)
    app.register_blueprint(webhook_blueprint(receiver), url_prefix="/hooks")
    client = app.test_client()
    headers, body = signed({"n": 1})
    answer = client.post("/hooks/github", data=body, headers=headers)
    assert answer.status_code == 200 and answer.json["run_id"] == runs(engine)[0].id
    assert client.post("/hooks/github", data=body, headers=headers).json["run_id"] == (
        runs(engine)[0].id
    )
    assert client.post("/hooks/github", data=b"x" * 5000, headers=headers).status_code == 413
    assert client.post("/hooks/other", data=body, headers=headers).status_code == 404
    assert client.get("/hooks/github").status_code == 405
    assert len(runs(engine)) == 1
