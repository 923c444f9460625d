"""The webhook notifier never follows a redirect (runner/notifiers.py): a 3xx
answer is a failed delivery, logged with its status and re-sent by tick()
with the notifier's backoff. Followed, a 301, 302 or 303 turned the POST into
a GET without its body, whose 2xx from the other host counted as delivered,
and the notifier's own headers (its Authorization, the signature) went with
it. Two HTTP servers on loopback: the notifier's endpoint, which redirects,
and the host it redirects to."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from runner import Agent, Engine, effect
from runner.notifiers import WebhookNotifier
from runner.testing import ScriptedModel, call, text, tools
from runner.webhooks import new_secret
from store.models import utcnow

SECRET = new_secret()
TOKEN = "Bearer do-not-leak-" + uuid.uuid4().hex


class Host:
    """An HTTP server on loopback that records every request, whatever its
    method, and answers ``status`` (with ``location``, if set)."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.location: str | None = None
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        host = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                host.requests.append((self.command, headers, body))
                self.send_response(host.status)
                if host.location is not None:
                    self.send_header("Location", host.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = do_HEAD = _answer

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/approvals"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def elsewhere() -> Iterator[Host]:
    made = Host(200)
    yield made
    made.close()


@pytest.fixture
def endpoint(elsewhere: Host) -> Iterator[Host]:
    made = Host()
    made.location = elsewhere.url
    yield made
    made.close()


@pytest.fixture
def engine(pg_store: Any, leases: Any, settings: Any) -> Iterator[Engine]:
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=None)
    yield made
    made.close()


def asking_agent(notifier: Any) -> str:
    name = f"redirected-{uuid.uuid4().hex[:8]}"

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


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_a_failed_delivery_and_is_not_followed(
    engine: Engine,
    endpoint: Host,
    elsewhere: Host,
    status: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    endpoint.status = status
    notifier = WebhookNotifier(endpoint.url, SECRET, headers={"Authorization": TOKEN})
    caplog.set_level(logging.WARNING)
    run = engine.start(asking_agent(notifier))
    engine.execute(run.id)

    [(method, headers, body)] = endpoint.requests
    assert method == "POST" and headers["authorization"] == TOKEN and body
    assert elsewhere.requests == []  # nothing reached the other host: no header leaked
    [approval] = engine.approvals(run.id)
    assert approval.notified_at is None  # not delivered
    assert approval.next_notify_at is not None  # due again, with the backoff
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(approval.approval_id in line and str(status) in line for line in said), said

    # tick() re-sends it once the backoff has passed, and the redirect fails again.
    caplog.clear()
    report = engine.tick(now=utcnow() + timedelta(seconds=60))
    assert report.notify_failed == 1 and report.notified == 0
    assert len(endpoint.requests) == 2 and elsewhere.requests == []
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(approval.approval_id in line and str(status) in line for line in said), said
    assert engine.approvals(run.id)[0].notified_at is None

    # The endpoint is fixed: the next re-send is delivered.
    endpoint.status, endpoint.location = 204, None
    report = engine.tick(now=utcnow() + timedelta(minutes=10))
    assert report.notified == 1 and len(endpoint.requests) == 3
    assert engine.approvals(run.id)[0].notified_at is not None
    assert elsewhere.requests == []
