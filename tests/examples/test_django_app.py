"""The Django example, through django.test.Client, against the real Postgres store.

Django's own tables live in a throwaway SQLite file; runs live in the test's
Postgres database, through ``set_default_engine``.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from examples import agents
from runner import Engine, RunStatus
from store.postgres import PostgresStore
from tests.helpers import snapshot
from tests.services import ROOT


@pytest.fixture
def client(django_client: Any) -> Any:
    return django_client


def ticket_run(ticket_id: int) -> str:
    from examples.django_app.tickets.models import Ticket

    run_id: str = Ticket.objects.get(pk=ticket_id).run_id
    return run_id


def open_waiting_ticket(client: Any, engine: Engine) -> tuple[str, str, str]:
    """POST /tickets/, execute until the refund waits; the run id, link path, token."""
    created = client.post("/tickets/", {"title": "Order A-1002 never arrived"})
    assert created.status_code == 201
    ticket_id = created.json()["ticket_id"]
    run_id = ticket_run(ticket_id)
    run = engine.get_run(run_id)
    assert run.status is RunStatus.QUEUED and run.trigger.id == f"ticket-{ticket_id}"
    waiting = engine.execute(run_id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    [link] = agents.sent_links
    url = urlsplit(link)
    return run_id, url.path, parse_qs(url.query)["token"][0]


def test_ticket_triage_with_an_approval(client: Any, engine: Engine) -> None:
    from examples.django_app.tickets.models import Ticket

    run_id, path, token = open_waiting_ticket(client, engine)
    waiting = engine.get_run(run_id).waiting
    assert waiting is not None and path == f"/approvals/{waiting.approval_id}"
    assert agents.refunds == []

    for url in (path, path + "/"):  # the notifier's link, and Django's usual slash
        page = client.get(url, {"token": token})
        assert page.status_code == 200
        html = page.content.decode()
        assert "refund" in html and "A-1002" in html and "125" in html
        assert f'name="token" value="{token}"' in html

    decided = client.post(path + "/", {"token": token, "decision": "approve", "reason": "ok"})
    assert decided.status_code == 200 and "queued" in decided.content.decode()
    assert engine.get_run(run_id).status is RunStatus.QUEUED

    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert [(r["order_id"], r["amount"]) for r in agents.refunds] == [("A-1002", 125)]
    [ticket] = Ticket.objects.all()
    shown = client.get(f"/tickets/{ticket.pk}/").json()
    assert shown["run_id"] == run_id and shown["status"] == "completed"
    assert "refunded" in shown["output"]


def test_wrong_token_is_refused_and_changes_nothing(
    client: Any, engine: Engine, pg_store: PostgresStore
) -> None:
    run_id, path, _ = open_waiting_ticket(client, engine)
    before = snapshot(pg_store)
    page = client.get(path + "/", {"token": "forged"})
    assert page.status_code == 400
    assert "the token is not valid" in page.content.decode()
    assert "A-1002" not in page.content.decode()
    refused = client.post(path + "/", {"token": "forged", "decision": "approve"})
    assert refused.status_code == 400
    assert "the token is not valid" in refused.content.decode()
    assert snapshot(pg_store) == before
    assert engine.get_run(run_id).status is RunStatus.WAITING
    assert agents.refunds == []


def test_the_approval_post_needs_no_csrf_token(client: Any, engine: Engine) -> None:
    from django.test import Client

    run_id, path, token = open_waiting_ticket(client, engine)
    strict = Client(enforce_csrf_checks=True)
    assert strict.post("/tickets/", {"title": "no csrf"}).status_code == 403
    decided = strict.post(path + "/", {"token": token, "decision": "deny", "reason": "dup"})
    assert decided.status_code == 200
    assert engine.get_run(run_id).status is RunStatus.QUEUED


def test_a_rolled_back_request_starts_no_run(
    client: Any, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import transaction

    from examples.django_app.tickets import views
    from examples.django_app.tickets.models import Ticket

    def fail(ticket: Ticket) -> dict[str, object]:
        raise RuntimeError("the view failed after saving the ticket")

    # Through a request: ATOMIC_REQUESTS rolls the ticket back, so on_commit never fires.
    monkeypatch.setattr(views, "ticket_json", fail)
    client.raise_request_exception = False
    assert client.post("/tickets/", {"title": "Order A-1001"}).status_code == 500

    # And in code: the same helper inside a transaction that rolls back.
    with pytest.raises(RuntimeError), transaction.atomic():
        views.open_ticket("Order A-1001 again")
        raise RuntimeError("roll back")

    assert Ticket.objects.count() == 0
    assert engine.list_runs(agent=agents.AGENT) == []

    # The control: a committed request does start a run.
    monkeypatch.undo()
    assert client.post("/tickets/", {"title": "Order A-1001"}).status_code == 201
    assert len(engine.list_runs(agent=agents.AGENT)) == 1


def test_bad_requests(client: Any) -> None:
    assert client.get("/tickets/404/").status_code == 404
    assert client.post("/tickets/", {"title": "  "}).status_code == 400
    assert client.get("/tickets/").status_code == 405
    page = client.get("/approvals/not-an-approval/", {"token": "x"})
    assert page.status_code == 400 and "no approval" in page.content.decode()
    decided = client.post(
        "/approvals/0190a5f2-0000-7000-8000-000000000000/", {"token": "x", "decision": "approve"}
    )
    assert decided.status_code == 400 and "no approval" in decided.content.decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_a_server_error_shows_no_secrets(tmp_path: Path) -> None:
    """A real ``runserver`` with the default settings: its 500 page must not show
    the environment (runserver's WSGI environ holds it), the database URL first."""
    password = "pw-" + secrets.token_hex(8)
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_DEBUG"}
    env.update(
        RUNWRIGHT_DATABASE_URL=f"postgresql://runwright:{password}@127.0.0.1:1/runwright",
        # A database nobody migrated: every ticket query fails, a plain 500.
        EXAMPLE_DJANGO_DB=str(tmp_path / "unmigrated.sqlite3"),
        DJANGO_SETTINGS_MODULE="examples.django_app.settings",
        PYTHONPATH=str(ROOT),
    )
    port = free_port()
    manage = ROOT / "examples" / "django_app" / "manage.py"
    server = subprocess.Popen(
        [sys.executable, str(manage), "runserver", "--noreload", f"127.0.0.1:{port}"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/tickets/1/", timeout=5)
            except urllib.error.HTTPError as exc:
                status, body = exc.code, exc.read().decode(errors="replace")
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "no server"
                time.sleep(0.2)
        assert status == 500
        assert password not in body
        assert "RUNWRIGHT_DATABASE_URL" not in body and "Traceback" not in body
    finally:
        server.terminate()
        server.wait(timeout=30)
