"""The approval notifier as a Standard Webhooks sender (docs/triggers.md): a
``whsec_`` secret signs each request so that the receiving service verifies it
with the standard's own library; a re-send by tick() carries the same
``webhook-id``; an endpoint that answers 410 Gone is sent nothing more."""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from runner import Agent, Engine, effect
from runner.core.agent import ApprovalRequest
from runner.core.errors import NotifierGone
from runner.notifiers import NotificationError, WebhookNotifier
from runner.testing import ScriptedModel, call, text, tools
from runner.webhooks import new_secret
from store.models import utcnow

SECRET = new_secret()


class Service:
    """An HTTP endpoint that verifies each delivery and answers ``status``."""

    def __init__(self, status: int = 204) -> None:
        self.status = status
        self.deliveries: list[tuple[dict[str, str], Any]] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    payload = Webhook(SECRET).verify(body, headers)
                except WebhookVerificationError:
                    payload = None
                service.deliveries.append((headers, payload))
                self.send_response(service.status if payload is not None else 401)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/approvals"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service() -> Iterator[Service]:
    made = Service()
    yield made
    made.close()


@pytest.fixture
def engine(pg_store: Any, leases: Any, settings: Any) -> Iterator[Engine]:
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=None)
    yield made
    made.close()


def asking_agent(notifier: Any) -> str:
    name = f"notify-{uuid.uuid4().hex[:8]}"

    @effect
    def refund(amount: int, idempotency_key: str) -> dict[str, Any]:
        """Refund."""
        return {"refunded": amount}

    model = ScriptedModel(
        name,
        lambda r: tools(call("refund", {"amount": 5})) if r.step == 1 else text("done"),
    )
    Agent(name=name, model=model.model, tools=[refund], approvals={"refund": True},
          notifier=notifier)  # fmt: skip
    return name


def test_a_request_arrives_signed_as_a_standard_webhook(engine: Engine, service: Service) -> None:
    run = engine.start(asking_agent(WebhookNotifier(service.url, SECRET)))
    engine.execute(run.id)
    [approval] = engine.approvals(run.id)
    [(headers, payload)] = service.deliveries
    assert payload is not None  # verified with the secret, by the standard's library
    assert headers["webhook-id"] == approval.approval_id
    assert payload["type"] == "approval.requested"
    assert payload["approval_id"] == approval.approval_id
    assert payload["token"] == engine.token(approval.approval_id)
    assert approval.notified_at is not None  # a 2xx: accepted


def test_a_resend_carries_the_same_webhook_id(engine: Engine, service: Service) -> None:
    service.status = 503  # the service is down at first
    run = engine.start(asking_agent(WebhookNotifier(service.url, SECRET)))
    engine.execute(run.id)
    [approval] = engine.approvals(run.id)
    assert approval.notified_at is None and len(service.deliveries) == 1
    service.status = 204
    report = engine.tick(now=utcnow() + timedelta(seconds=60))
    assert report.notified == 1
    first, again = service.deliveries
    assert first[0]["webhook-id"] == again[0]["webhook-id"] == approval.approval_id
    assert first[0]["webhook-signature"] != "" and again[1] is not None
    assert engine.approvals(run.id)[0].notified_at is not None


def test_an_endpoint_that_answers_410_is_sent_nothing_more(
    engine: Engine, service: Service
) -> None:
    service.status = 410
    notifier = WebhookNotifier(service.url, SECRET)
    name = asking_agent(notifier)
    run = engine.start(name)
    engine.execute(run.id)
    assert len(service.deliveries) == 1 and notifier.gone
    [approval] = engine.approvals(run.id)
    assert approval.next_notify_at is None  # never due again
    for minutes in (1, 10, 60):
        assert engine.tick(now=utcnow() + timedelta(minutes=minutes)).notified == 0
    # Another run's request: the disabled endpoint gets nothing.
    other = engine.start(name)
    engine.execute(other.id)
    assert len(service.deliveries) == 1
    assert engine.approvals(other.id)[0].next_notify_at is None


def test_a_bad_whsec_secret_is_refused_when_the_notifier_is_made() -> None:
    from runner.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="must be base64"):
        WebhookNotifier("https://ops.example.com/hooks", "whsec_@@@")
    with pytest.raises(ConfigurationError, match="at least 16 bytes"):
        WebhookNotifier("https://ops.example.com/hooks", "whsec_c2hvcnQ=")


def sockets_to(port: int) -> int:
    """This process's open sockets connected to ``port`` on loopback (Linux's /proc)."""
    inodes = set()
    with open("/proc/net/tcp") as table:
        for line in list(table)[1:]:
            fields = line.split()
            if int(fields[2].split(":")[1], 16) == port:
                inodes.add(fields[9])
    mine = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            mine += target.startswith("socket:[") and target[8:-1] in inodes
    return mine


@pytest.mark.parametrize("status", [410, 503])
def test_a_refusing_endpoint_leaves_no_socket_open(service: Service, status: int) -> None:
    """An HTTP error answer holds its connection's socket until it is closed:
    the notifier closes it, rather than leaving it to the garbage collector
    (which warns of the socket, in whatever test runs then)."""
    service.status = status
    request = ApprovalRequest(
        run_id=str(uuid.uuid4()), agent="a", approval_id=str(uuid.uuid4()), tool_name="refund",
        input={"amount": 5}, expires_at=None, token="t", token_id="t",
    )  # fmt: skip
    with pytest.raises((NotificationError, NotifierGone)) as refused:
        WebhookNotifier(service.url, SECRET)(request)
    # The error (and its cause, the HTTP answer) is still held here: nothing was
    # collected, so an open socket would show.
    assert refused.value.__cause__ is not None
    assert sockets_to(service.server.server_port) == 0
