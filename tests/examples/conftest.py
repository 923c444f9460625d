"""Shared by the example apps' tests: the clients of both apps and an
approvers' inbox of each test's own (Django's setup, ``django_db``, is in
tests/conftest.py: the console's tests use it too)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from examples import agents
from runner import Engine, set_default_engine
from runner.console.accounts import add_account


@pytest.fixture(autouse=True)
def inbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The notifier's inbox file, inside the test's temporary directory."""
    path = tmp_path / "inbox.txt"
    monkeypatch.setenv("EXAMPLE_INBOX", str(path))
    agents.refunds.clear()
    agents.sent_links.clear()
    return path


CONSOLE_PASSWORD = "correct horse battery"


@pytest.fixture
def console_users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The Flask example's console accounts file (alice), named before the app is made."""
    path = tmp_path / "console-users"
    add_account(path, "alice", CONSOLE_PASSWORD)
    monkeypatch.setenv("EXAMPLE_CONSOLE_USERS", str(path))
    return path


@pytest.fixture
def flask_client(engine: Engine, console_users: Path) -> Iterator[FlaskClient]:
    from examples.flask_app.app import create_app

    with create_app(engine).test_client() as made:
        yield made


@pytest.fixture
def django_client(django_db: None, engine: Engine) -> Iterator[Any]:
    from django.test import Client

    from examples.django_app.tickets.models import Ticket

    Ticket.objects.all().delete()
    set_default_engine(engine)
    try:
        yield Client()
    finally:
        set_default_engine(None)
