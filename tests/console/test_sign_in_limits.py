"""The standalone console's sign-in under attack, served by its own threaded
server (runner/console/server.py) over real sockets: bursts of concurrent
guesses, an attacker who locks a known name, and request bodies cut short."""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.client import HTTPConnection
from urllib.parse import urlencode

import pytest
from werkzeug.test import Client, TestResponse

from runner import Engine
from runner.console.accounts import Accounts, hash_password
from runner.console.server import make_server
from runner.console.sessions import SESSION_COOKIE, LoginLimiter
from runner.console.standalone import StandaloneConsole
from runner.core.settings import Settings
from store.postgres import PostgresStore
from tests.console.conftest import csrf_of

PASSWORD = "alice's long password"
BURST = 60


class CountingAccounts(Accounts):
    """Accounts that count the passwords checked."""

    def __init__(self, hashes: dict[str, str]) -> None:
        super().__init__(hashes)
        self.checked = 0
        self._lock = threading.Lock()

    def check(self, name: str, password: str) -> str | None:
        with self._lock:
            self.checked += 1
        return super().check(name, password)


@pytest.fixture
def engine(pg_store: PostgresStore, settings: Settings) -> Iterator[Engine]:
    # Signing in never reaches the engine.
    made = Engine(pg_store, settings=settings, enqueue=None)
    yield made
    made.close()


@pytest.fixture
def accounts() -> CountingAccounts:
    # Other names need no account: an unknown name's password is checked
    # against a hash of the same cost.
    return CountingAccounts({"alice": hash_password(PASSWORD)})


@contextmanager
def served(app: StandaloneConsole, **options: float) -> Iterator[int]:
    """``app`` on the console's own server, in a thread; its port."""
    server = make_server(app, "127.0.0.1", 0, **options)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


COOKIE = re.compile(r"^([^=;]+)=([^;]*)")


def login_form(port: int) -> tuple[str, str]:
    """A visitor's pre-session cookie and the sign-in form's CSRF token."""
    connection = HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/login")
        answer = connection.getresponse()
        page = answer.read().decode()
        [cookie] = answer.headers.get_all("Set-Cookie") or []
    finally:
        connection.close()
    found = COOKIE.match(cookie)
    assert found is not None
    return f"{found.group(1)}={found.group(2)}", csrf_of(page)


def burst(port: int, names: list[str], password: str) -> list[int]:
    """One sign-in for each of ``names`` at once, each from a visitor of its
    own: every connection is open and every form ready before any is sent."""
    visitors = [login_form(port) for _ in names]
    connections = [HTTPConnection("127.0.0.1", port, timeout=60) for _ in names]
    for connection in connections:
        connection.connect()
    start = threading.Barrier(len(names))
    statuses: list[int] = [0] * len(names)

    def attempt(index: int) -> None:
        cookie, csrf = visitors[index]
        body = urlencode({"name": names[index], "password": password, "csrf_token": csrf})
        headers = {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"}
        start.wait()
        connections[index].request("POST", "/login", body=body, headers=headers)
        answer = connections[index].getresponse()
        answer.read()
        statuses[index] = answer.status

    threads = [threading.Thread(target=attempt, args=(index,)) for index in range(len(names))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for connection in connections:
        connection.close()
    return statuses


def frozen_limiter() -> LoginLimiter:
    """The console's limiter, on a clock that stands still: however slowly
    a loaded machine serves the burst, its 2 s wait does not run out."""
    return LoginLimiter(clock=lambda: 1_000.0)


def test_a_burst_of_guesses_for_one_name_checks_at_most_the_limit(
    engine: Engine, accounts: CountingAccounts, settings: Settings
) -> None:
    assert settings.secret_key
    app = StandaloneConsole(
        engine, accounts=accounts, secret_key=settings.secret_key, limiter=frozen_limiter()
    )
    with served(app) as port:
        statuses = burst(port, ["alice"] * BURST, "not alice's password")
    assert set(statuses) <= {403, 429}, statuses
    # Five failures are free for a name; every other attempt of the burst is
    # refused before its password is hashed.
    assert accounts.checked == statuses.count(403) == 5, statuses
    assert statuses.count(429) == BURST - 5


def test_a_burst_of_guesses_from_one_address_checks_at_most_its_limit(
    engine: Engine, accounts: CountingAccounts, settings: Settings
) -> None:
    assert settings.secret_key
    app = StandaloneConsole(
        engine, accounts=accounts, secret_key=settings.secret_key, limiter=frozen_limiter()
    )
    with served(app) as port:
        names = [f"user{number}" for number in range(BURST)]
        statuses = burst(port, names, "a wrong password")
    assert set(statuses) <= {403, 429}, statuses
    assert accounts.checked == statuses.count(403) == 20, statuses  # an address's limit


# ------------------------------------------------- a name locked by an attacker


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def sign_in(app: StandaloneConsole, address: str, password: str) -> TestResponse:
    """A new visitor from ``address`` signs in as alice."""
    visitor = Client(app)
    where = {"REMOTE_ADDR": address}
    page = visitor.get("/login", environ_base=where)
    form = {"name": "alice", "password": password, "csrf_token": csrf_of(page.text)}
    return visitor.post("/login", data=form, environ_base=where)


def signed_in(answer: TestResponse) -> bool:
    cookies = answer.headers.getlist("Set-Cookie")
    made = any(c.startswith(SESSION_COOKIE + "=") and "Max-Age=0" not in c for c in cookies)
    return answer.status_code == 303 and made


def test_an_attacker_who_knows_a_name_does_not_lock_its_owner_out(
    engine: Engine, accounts: CountingAccounts, settings: Settings
) -> None:
    assert settings.secret_key
    clock = Clock()
    app = StandaloneConsole(
        engine, accounts=accounts, secret_key=settings.secret_key, limiter=LoginLimiter(clock=clock)
    )
    attacker = "203.0.113.66"
    answers = [sign_in(app, attacker, f"guess {number}").status_code for number in range(30)]
    assert answers == [403] * 5 + [429] * 25
    # The owner, from an address that has not been failing, gets in.
    assert signed_in(sign_in(app, "198.51.100.7", PASSWORD))
    # The attacker does not, even with the right password, and the owner's
    # sign-in did not give the attacker fresh guesses.
    assert sign_in(app, attacker, PASSWORD).status_code == 429
    clock.now += 2.5  # the attacker's wait (2 s after the fifth failure) is over
    assert sign_in(app, attacker, "guess 31").status_code == 403
    assert sign_in(app, attacker, "guess 32").status_code == 429


def test_fresh_addresses_do_not_buy_an_attacker_more_than_the_limit(
    engine: Engine, accounts: CountingAccounts, settings: Settings
) -> None:
    assert settings.secret_key
    clock = Clock()
    app = StandaloneConsole(
        engine, accounts=accounts, secret_key=settings.secret_key, limiter=LoginLimiter(clock=clock)
    )
    for _ in range(5):
        assert sign_in(app, "203.0.113.1", "guess").status_code == 403
    # Each address that has not failed for the name gets one check past its
    # lock, and only the first five such addresses do: a guesser with many
    # addresses gets five guesses more, not five an address.
    tried = [sign_in(app, f"203.0.113.{number}", "guess").status_code for number in range(2, 12)]
    assert tried == [403] * 4 + [429] * 6
    # Then the name waits for everyone, its owner included (what the docs say).
    assert sign_in(app, "198.51.100.7", PASSWORD).status_code == 429


def test_the_limiter_counts_an_ipv6_network_as_one_address() -> None:
    clock = Clock()
    limiter = LoginLimiter(clock=clock)
    for number in range(20):
        attempt = limiter.reserve(f"user{number}", f"2001:db8::{number:x}")
        assert not isinstance(attempt, float)
        limiter.failed(attempt)
    # Twenty failures from one /64: its next address waits, another network does not.
    assert limiter.reserve("anyone", "2001:db8::ffff") == 2
    assert not isinstance(limiter.reserve("anyone", "2001:db8:0:1::1"), float)
    assert not isinstance(limiter.reserve("anyone", "::ffff:192.0.2.1"), float)
    assert not isinstance(limiter.reserve("anyone", "not an address"), float)


# ------------------------------------------------------------ cut-short bodies


def send_short_body(port: int, *, close: bool) -> tuple[bytes, float]:
    """A POST that says 200 bytes and sends 20; ``close``: then shut the
    socket's write side, as a client that gave up does. The answer and how
    long it took."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        raw.sendall(
            b"POST /login HTTP/1.0\r\nHost: x\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 200\r\n\r\nname=alice&password="
        )
        began = time.monotonic()
        if close:
            raw.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
        return answer, time.monotonic() - began


@pytest.mark.parametrize("close", [True, False], ids=["half-closed", "stalled"])
def test_a_body_shorter_than_its_length_is_one_clear_400(
    engine: Engine,
    accounts: CountingAccounts,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
    close: bool,
) -> None:
    assert settings.secret_key
    app = StandaloneConsole(engine, accounts=accounts, secret_key=settings.secret_key)
    caplog.set_level(logging.INFO)
    # The stalled client waits out the server's socket timeout: 2 s here.
    with served(app, **({} if close else {"timeout": 2})) as port:
        answer, took = send_short_body(port, close=close)
    assert answer.startswith(b"HTTP/1.0 400 "), answer[:200]
    assert b"ended before" in answer
    # A client that closed is answered at once; one that stalls when the
    # server's socket timeout passes.
    assert took < (1 if close else 5), took
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(problems) == 1, [r.getMessage() for r in problems]
    assert "ended before" in problems[0].getMessage() and problems[0].exc_info is None
    assert "Traceback" not in caplog.text
