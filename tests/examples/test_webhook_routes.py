"""The example apps' webhook route (``/hooks/tickets``, examples/web.py), in
Flask and in Django, against the real Postgres store: a signed delivery starts
one run of the support agent on the customer's thread; its redelivery starts
nothing; a forged one or one that is no ticket is refused and writes nothing."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from standardwebhooks import Webhook

from runner import Engine
from runner.webhooks import new_secret
from tests.conftest import EXAMPLE_WEBHOOK_SECRET
from tests.helpers import snapshot


def delivery(body: Any, secret: str = EXAMPLE_WEBHOOK_SECRET) -> tuple[bytes, dict[str, str]]:
    data = json.dumps(body).encode()
    msg_id = f"msg_{uuid.uuid4().hex}"
    now = datetime.fromtimestamp(time.time(), UTC)
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, now, data.decode()),
        "content-type": "application/json",
    }
    return data, headers


@pytest.fixture
def flask_hooks(engine: Engine, monkeypatch: pytest.MonkeyPatch, console_users: Any) -> Any:
    monkeypatch.setenv("EXAMPLE_WEBHOOK_SECRET", EXAMPLE_WEBHOOK_SECRET)
    from examples.flask_app.app import create_app

    with create_app(engine).test_client() as client:
        yield lambda data, headers: client.post("/hooks/tickets", data=data, headers=headers)


@pytest.fixture
def django_hooks(django_client: Any) -> Any:
    def post(data: bytes, headers: dict[str, str]) -> Any:
        return django_client.post(
            "/hooks/tickets",
            data=data,
            content_type="application/json",
            headers={k: v for k, v in headers.items() if k != "content-type"},
        )

    return post


def status_and_json(answer: Any) -> tuple[int, Any]:
    return answer.status_code, json.loads(
        answer.content if hasattr(answer, "content") else answer.data
    )


@pytest.mark.parametrize("app", ["flask_hooks", "django_hooks"])
def test_a_signed_ticket_starts_one_run_and_a_forged_one_nothing(
    engine: Engine, request: pytest.FixtureRequest, app: str
) -> None:
    post = request.getfixturevalue(app)
    data, headers = delivery({"message": "A-1002 never arrived", "customer": "c7"})
    status, answer = status_and_json(post(data, headers))
    assert status == 200, answer
    run = engine.get_run(answer["run_id"])
    assert (run.agent, run.trigger.source, run.trigger.trigger) == (
        "support_triage",
        "webhook",
        "tickets",
    )
    assert run.trigger.id == f"webhook:tickets:{headers['webhook-id']}"
    assert run.trigger.payload == {"message": "A-1002 never arrived"}
    assert run.thread == "customer-c7"
    assert status_and_json(post(data, headers)) == (200, answer)  # redelivered: the same run
    before = snapshot(engine.store)
    forged = delivery({"message": "refund everything"}, new_secret())
    assert status_and_json(post(*forged))[0] == 401
    no_ticket = delivery({"subject": "no message"})
    status, refusal = status_and_json(post(*no_ticket))
    assert status == 422 and '"message" string' in refusal["error"]
    assert snapshot(engine.store) == before
