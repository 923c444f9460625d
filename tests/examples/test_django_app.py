"""The Django example, through django.test.Client, against the real Postgres store.

Django's own tables live in a throwaway SQLite file; runs live in the test's
Postgres database, through ``set_default_engine``. Approvals are decided in
the console the project mounts (its own tests are tests/console/test_django.py).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

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


CONSOLE = "/console"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def open_waiting_ticket(client: Any, engine: Engine) -> tuple[str, str, str]:
    """POST /tickets/, execute until the refund waits; the run id, the
    approval's console path, and the link's token."""
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
    approval_id = url.path.rsplit("/", 1)[1]
    return run_id, f"{CONSOLE}/approvals/{approval_id}", parse_qs(url.query)["token"][0]


def link_page(client: Any, path: str, token: str) -> tuple[str, str]:
    """The approval link's page in the console; its HTML and CSRF token."""
    page = client.get(path, {"token": token})
    assert page.status_code == 200
    html = page.content.decode()
    found = CSRF.search(html)
    assert found is not None
    return html, found.group(1)


def decide(client: Any, path: str, form: dict[str, str]) -> Any:
    """POST the link page's form, URL-encoded as a browser sends it."""
    return client.post(path, urlencode(form), content_type="application/x-www-form-urlencoded")


def test_ticket_triage_with_an_approval(client: Any, engine: Engine) -> None:
    from django.test import Client

    from examples.django_app.tickets.models import Ticket

    run_id, path, token = open_waiting_ticket(client, engine)
    waiting = engine.get_run(run_id).waiting
    assert waiting is not None and path == f"{CONSOLE}/approvals/{waiting.approval_id}"
    assert agents.refunds == []

    # The approver opens the link in the console, with no account here.
    approver = Client(enforce_csrf_checks=True)
    html, csrf = link_page(approver, path, token)
    assert "refund" in html and "A-1002" in html and "125" in html
    assert f'name="token" value="{token}"' in html
    form = {"token": token, "decision": "approve", "reason": "ok", "csrf_token": csrf}
    decided = decide(approver, path, form)
    assert decided.status_code == 200 and "Approved" in decided.content.decode()
    assert engine.get_run(run_id).status is RunStatus.QUEUED

    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert [(r["order_id"], r["amount"]) for r in agents.refunds] == [("A-1002", 125)]
    [ticket] = Ticket.objects.all()
    shown = client.get(f"/tickets/{ticket.pk}/").json()
    assert shown["run_id"] == run_id and shown["status"] == "completed"
    assert "refunded" in shown["output"]
    [approval] = engine.approvals(run_id)
    assert (approval.decided_by, approval.reason) == ("link", "ok")


def test_wrong_token_is_refused_and_changes_nothing(
    client: Any, engine: Engine, pg_store: PostgresStore
) -> None:
    run_id, path, token = open_waiting_ticket(client, engine)
    _, csrf = link_page(client, path, token)
    before = snapshot(pg_store)
    page = client.get(path, {"token": "forged"})
    assert page.status_code == 403
    assert "This approval link is not valid" in page.content.decode()
    assert "A-1002" not in page.content.decode()
    refused = decide(client, path, {"token": "forged", "decision": "approve", "csrf_token": csrf})
    assert refused.status_code == 403
    assert "This approval link is not valid" in refused.content.decode()
    assert snapshot(pg_store) == before
    assert engine.get_run(run_id).status is RunStatus.WAITING
    assert agents.refunds == []


def test_the_approval_link_post_needs_the_csrf_token(client: Any, engine: Engine) -> None:
    """The link's token says who may decide; the CSRF token that the link's
    page gave this browser says that the form came from that page."""
    from django.test import Client

    run_id, path, token = open_waiting_ticket(client, engine)
    strict = Client(enforce_csrf_checks=True)
    assert strict.post("/tickets/", {"title": "no csrf"}).status_code == 403
    form = {"token": token, "decision": "deny", "reason": "dup"}
    refused = decide(strict, path, form)
    assert refused.status_code == 403 and "CSRF token" in refused.content.decode()
    assert engine.get_run(run_id).status is RunStatus.WAITING
    _, csrf = link_page(strict, path, token)
    assert decide(strict, path, {**form, "csrf_token": csrf}).status_code == 200
    assert engine.get_run(run_id).status is RunStatus.QUEUED


def test_the_console_wants_staff(client: Any, engine: Engine) -> None:
    """Everything but a link's page wants a staff sign-in (the admin's)."""
    from django.contrib.auth.models import User

    run_id, path, _ = open_waiting_ticket(client, engine)
    for page in (f"{CONSOLE}/", f"{CONSOLE}/approvals", f"{CONSOLE}/runs/{run_id}", path):
        answer = client.get(page)
        assert answer.status_code == 302 and answer["Location"].startswith("/admin/login/?next=")
    user = User.objects.create_user("ex-customer", is_staff=False)
    try:
        client.force_login(user)
        assert client.get(f"{CONSOLE}/runs/{run_id}").status_code == 403
        user.is_staff = True
        user.save()
        assert client.get(f"{CONSOLE}/runs/{run_id}").status_code == 403  # no permission yet
        user.is_superuser = True
        user.save()
        assert run_id in client.get(f"{CONSOLE}/runs/{run_id}").content.decode()
    finally:
        client.logout()
        user.delete()


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
    page = client.get(f"{CONSOLE}/approvals/not-an-approval", {"token": "x"})
    assert page.status_code == 403 and "This approval link is not valid" in page.content.decode()
    decided = decide(
        client,
        f"{CONSOLE}/approvals/0190a5f2-0000-7000-8000-000000000000",
        {"token": "x", "decision": "approve"},
    )
    assert decided.status_code == 403
    assert "This approval link is not valid" in decided.content.decode()


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
                with exc:
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
