"""The console's pages end with Runwright's version (issue 49, item 5), in
Flask, in Django and on its own: they share one page (runner/console/render.py).
A page shown to nobody signed in (a sign-in page, a refusal, an approval's
link) does not name it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient
from werkzeug.test import Client

import runner
from runner import Engine
from runner.console.accounts import add_account
from runner.console.standalone import StandaloneConsole
from runner.core.settings import Settings
from tests.console.conftest import BASE, csrf_of, page_text
from tests.console.django_support import client_of, make_user, page

FOOTER = re.compile(r"<footer[^>]*>Runwright ([^<]+)</footer>")


def footer_version(html: str) -> str | None:
    found = FOOTER.findall(html)
    assert len(found) <= 1, found
    return found[0] if found else None


def test_the_flask_console_names_the_version(client: FlaskClient) -> None:
    assert footer_version(page_text(client, f"{BASE}/")) == runner.__version__
    assert footer_version(page_text(client, f"{BASE}/approvals")) == runner.__version__
    assert footer_version(page_text(client, f"{BASE}/", user=None, status=403)) is None


def test_the_standalone_console_names_the_version(
    engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    assert settings.secret_key
    accounts = tmp_path / "users"
    add_account(accounts, "alice", "alice's password")
    client = Client(
        StandaloneConsole(engine, accounts=accounts, secret_key=settings.secret_key, prefix=BASE)
    )
    login = client.get(f"{BASE}/login")
    assert footer_version(login.text) is None
    form = {"name": "alice", "password": "alice's password", "csrf_token": csrf_of(login.text)}
    assert client.post(f"{BASE}/login", data=form).status_code == 303
    assert footer_version(client.get(f"{BASE}/").text) == runner.__version__


def test_the_django_console_names_the_version(django_console: Engine) -> None:
    staff: Any = client_of(make_user())
    assert footer_version(page(staff, f"{BASE}/")) == runner.__version__
