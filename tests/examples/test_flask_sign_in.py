"""The Flask example's sign-in (``/login``, the way docs/console.md says to
mount the console) under attack, through its test client: guessing, a burst
of hashes, sessions that outlive a sign-out or a new password, and hostile
``next=`` targets. It must hold to the standalone console's rules."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from runner import Engine
from runner.console.accounts import Accounts, add_account
from runner.core.settings import Settings
from store.postgres import PostgresStore
from tests.examples.conftest import CONSOLE_PASSWORD as PASSWORD

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def engine(pg_store: PostgresStore, settings: Settings) -> Iterator[Engine]:
    # Signing in never reaches the engine.
    made = Engine(pg_store, settings=settings, enqueue=None)
    yield made
    made.close()


@pytest.fixture
def users(console_users: Path) -> Path:
    return console_users  # alice, with PASSWORD


@pytest.fixture
def app(engine: Engine, users: Path) -> Flask:
    from examples.flask_app.app import create_app

    return create_app(engine)


@pytest.fixture
def client(app: Flask) -> Iterator[FlaskClient]:
    with app.test_client() as made:
        yield made


def sign_in(
    client: FlaskClient,
    password: str = PASSWORD,
    *,
    name: str = "alice",
    next: str = "/console/",
    address: str = "127.0.0.1",
) -> TestResponse:
    where = {"REMOTE_ADDR": address}
    page = client.get("/login", query_string={"next": next}, environ_base=where)
    found = CSRF.search(page.get_data(as_text=True))
    assert found is not None, page.get_data(as_text=True)
    form = {"name": name, "password": password, "csrf_token": found.group(1), "next": next}
    return client.post("/login", data=form, environ_base=where)


def in_console(client: FlaskClient) -> bool:
    answer = client.get("/console/")
    if answer.status_code == 200:
        return True
    assert answer.status_code == 303 and answer.headers["Location"].startswith("/login?next=")
    return False


def session_cookie(client: FlaskClient) -> str:
    cookie = client.get_cookie("session")
    assert cookie is not None
    return cookie.value


def test_guessing_a_password_is_slowed_down(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed: list[int] = []
    scrypt = hashlib.scrypt

    def counted(*args: Any, **kwargs: Any) -> bytes:
        hashed.append(1)
        return scrypt(*args, **kwargs)

    monkeypatch.setattr(hashlib, "scrypt", counted)
    guesses = [sign_in(client, f"guess number {n}").status_code for n in range(30)]
    # Five failures are free; then each attempt waits, and one that comes
    # during the wait is refused without its password being checked.
    assert guesses == [403] * 5 + [429] * 25, guesses
    right = sign_in(client)
    assert right.status_code == 429 and right.headers["Retry-After"] == "2"
    assert "try again in 2 s" in right.get_data(as_text=True)
    assert not in_console(client)
    assert len(hashed) == 5  # the free failures' hashes: refusals cost none


def test_the_owner_gets_in_from_an_address_that_was_not_guessing(client: FlaskClient) -> None:
    for n in range(10):
        sign_in(client, f"guess number {n}", address="203.0.113.66")
    assert sign_in(client, address="203.0.113.66").status_code == 429
    assert sign_in(client, address="198.51.100.7").status_code == 303
    assert in_console(client)


def test_no_more_than_two_passwords_are_hashed_at_once(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = Accounts.check
    lock = threading.Lock()
    now, most, done = 0, 0, 0

    def slow_check(self: Accounts, name: str, password: str) -> str | None:
        nonlocal now, most, done
        with lock:
            now += 1
            most = max(most, now)
        time.sleep(0.2)  # a slower server: hashes that overlap
        try:
            return check(self, name, password)
        finally:
            with lock:
                now -= 1
                done += 1

    monkeypatch.setattr(Accounts, "check", slow_check)
    start = threading.Barrier(8)

    def visitor(number: int) -> None:
        with app.test_client() as client:
            start.wait()
            sign_in(client, "a wrong password", name=f"user{number}", address=f"10.0.0.{number}")

    threads = [threading.Thread(target=visitor, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert done == 8 and most == 2, (done, most)


def test_signing_out_ends_the_session_not_only_its_cookie(client: FlaskClient) -> None:
    assert sign_in(client).status_code == 303 and in_console(client)
    copied = session_cookie(client)
    page = client.get("/login").get_data(as_text=True)  # a form with the session's token
    found = CSRF.search(page)
    assert found is not None
    assert client.post("/logout", data={"csrf_token": found.group(1)}).status_code == 303
    assert not in_console(client)
    # The cookie as it was before signing out, sent again: still signed out.
    client.set_cookie("session", copied)
    assert not in_console(client)


def test_a_new_password_ends_the_accounts_sessions(client: FlaskClient, users: Path) -> None:
    assert sign_in(client).status_code == 303 and in_console(client)
    add_account(users, "alice", "a new password for alice")
    assert not in_console(client)
    assert sign_in(client).status_code == 403  # the old password no longer works
    assert sign_in(client, "a new password for alice").status_code == 303
    assert in_console(client)


HOSTILE_NEXT = [
    "/\r\nSet-Cookie: x=1",
    "/console/\r\nSet-Cookie: x=1",
    "/console/\nLocation: https://evil.example/",
    "//evil.example/console/",
    "https://evil.example/console/",
    "/\\evil.example/console/",
    "/console/\t/evil",
    "javascript:alert(1)",
    "/console/caf\u00e9",
    "/" + "a" * 5000,
]


@pytest.mark.parametrize("target", HOSTILE_NEXT)
def test_a_hostile_next_goes_to_the_consoles_start_page(client: FlaskClient, target: str) -> None:
    answer = sign_in(client, next=target)
    assert answer.status_code == 303, answer.get_data(as_text=True)[:500]
    assert answer.headers["Location"] == "/console/"
    assert in_console(client)


def test_next_keeps_a_console_page_and_its_query(client: FlaskClient) -> None:
    answer = sign_in(client, next="/console/approvals?agent=a%20b")
    assert answer.status_code == 303
    assert answer.headers["Location"] == "/console/approvals?agent=a%20b"


def test_an_accounts_role_holds_in_the_examples_console(
    client: FlaskClient, users: Path, engine: Engine
) -> None:
    from runner.console.flask import SESSION_KEY

    add_account(users, "vera", "vera's long password", role="viewer")
    assert sign_in(client, "vera's long password", name="vera").status_code == 303
    assert in_console(client)
    with client.session_transaction() as held:
        token = held[SESSION_KEY]
    run_id = "00000000-0000-4000-8000-000000000000"
    refused = client.post(f"/console/runs/{run_id}/cancel", data={"csrf_token": token})
    assert refused.status_code == 403 and "may not decide" in refused.get_data(as_text=True)
