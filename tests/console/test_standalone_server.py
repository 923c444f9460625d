"""``runwright console`` for real: the CLI as a subprocess on a loopback port
(Postgres and Redis of this test), driven over HTTP with http.client the way
a browser would (cookies, forms, an open event stream), then stopped with
SIGTERM. And ``runwright console add-user``, and the refusals to start."""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.client import HTTPConnection, HTTPResponse
from pathlib import Path
from urllib.parse import urlencode

import pytest

from runner import Engine, RunStatus
from runner.console.abilities import Role
from runner.console.accounts import Accounts, add_account
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from store.models import Decision
from store.postgres import PostgresStore
from tests.console.conftest import approval_agent, csrf_of, execute_all
from tests.services import ROOT
from tests.sse_client import Frame, FrameReader

RUNWRIGHT = str(Path(sys.executable).with_name("runwright"))
PASSWORD = "alice's long password"
READY = re.compile(r"console at http://(\S+?):(\d+)(/\S*)? ")


@pytest.fixture
def env(proc_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return {**proc_env, "RUNWRIGHT_HOME": str(tmp_path / "home")}


@pytest.fixture
def users(tmp_path: Path) -> Path:
    path = tmp_path / "conf" / "users"
    add_account(path, "alice", PASSWORD)
    return path


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    host: str
    port: int
    stdout: Path
    stderr: Path

    def output(self) -> tuple[str, str]:
        return self.stdout.read_text(), self.stderr.read_text()


@contextmanager
def console(env: dict[str, str], tmp_path: Path, *args: str) -> Iterator[Server]:
    """``runwright console --port 0 ARGS``, once it listens; killed if the
    test did not stop it."""
    out, err = tmp_path / "console.out", tmp_path / "console.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        process = subprocess.Popen(
            [RUNWRIGHT, "console", "--port", "0", *args],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        while (found := READY.search(out.read_text())) is None:
            assert process.poll() is None, err.read_text()[-3000:]
            assert time.monotonic() < deadline, "the console did not start"
            time.sleep(0.05)
        yield Server(process, found.group(1), int(found.group(2)), out, err)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


@dataclass
class Visitor:
    """A browser, as far as the console needs one: cookies and forms."""

    server: Server
    cookies: dict[str, str] = field(default_factory=dict)

    def _connect(self, timeout: float = 30) -> HTTPConnection:
        return HTTPConnection(self.server.host, self.server.port, timeout=timeout)

    def _headers(self) -> dict[str, str]:
        jar = "; ".join(f"{name}={value}" for name, value in self.cookies.items())
        return {"Cookie": jar} if jar else {}

    def _keep(self, response: HTTPResponse) -> None:
        for line in response.headers.get_all("Set-Cookie") or []:
            name, _, rest = line.partition("=")
            value = rest.split(";", 1)[0]
            if "Max-Age=0" in line.split("; "):
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = value

    def request(
        self, method: str, path: str, form: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], str]:
        connection = self._connect()
        try:
            headers = self._headers()
            body = None
            if form is not None:
                body = urlencode(form)
                headers["Content-Type"] = "application/x-www-form-urlencoded"
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            self._keep(response)
            return response.status, dict(response.headers), response.read().decode()
        finally:
            connection.close()

    def stream(self, path: str) -> tuple[HTTPConnection, HTTPResponse]:
        connection = self._connect(timeout=20)
        connection.request("GET", path, headers=self._headers())
        return connection, connection.getresponse()


def next_frame(response: HTTPResponse, reader: FrameReader) -> Frame:
    """The next frame of an open stream, as soon as it is written."""
    while True:
        line = response.readline()
        assert line, "the stream ended"
        frame = reader.feed(line.decode())
        if frame is not None:
            return frame


@pytest.fixture
def pg_console_engine(
    pg_store: PostgresStore, leases: Leases, settings: Settings, queued: list[str]
) -> Iterator[Engine]:
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=queued.append)
    yield made
    made.close()


def test_sign_in_follow_a_run_and_decide_over_http(
    env: dict[str, str],
    tmp_path: Path,
    users: Path,
    pg_console_engine: Engine,
    queued: list[str],
) -> None:
    engine = pg_console_engine
    agent = approval_agent()
    run = engine.start(agent.name, {})
    execute_all(engine, queued)
    [approval] = engine.approvals(run.id)

    with console(env, tmp_path, "--users", str(users)) as server:
        assert server.host == "127.0.0.1"  # loopback unless told
        visitor = Visitor(server)
        status, headers, _ = visitor.request("GET", "/approvals")
        assert status == 303 and headers["Location"] == "/login?next=%2Fapprovals"
        status, headers, page = visitor.request("GET", headers["Location"])
        assert status == 200 and "runwright_presession" in visitor.cookies
        assert "Content-Security-Policy" in headers
        form = {
            "name": "alice",
            "password": PASSWORD,
            "next": "/approvals",
            "csrf_token": csrf_of(page),
        }
        status, headers, _ = visitor.request("POST", "/login", form)
        assert status == 303 and headers["Location"] == "/approvals"
        assert "runwright_session" in visitor.cookies

        status, _, inbox = visitor.request("GET", "/approvals")
        assert status == 200 and approval.approval_id in inbox and "refund" in inbox

        # The run's stream: frames arrive while it stays open (the run waits).
        connection, stream = visitor.stream(f"/runs/{run.id}/events")
        try:
            assert stream.status == 200
            assert stream.headers["Content-Type"] == "text/event-stream"
            reader = FrameReader()
            assert next_frame(stream, reader).retry == 3000
            first = next_frame(stream, reader)
            assert first.id is not None and first.event == "status"

            decide = {
                "decision": "approve",
                "reason": "over real HTTP",
                "next": "inbox",
                "csrf_token": csrf_of(inbox),
            }
            status, headers, _ = visitor.request(
                "POST", f"/approvals/{approval.approval_id}", decide
            )
            assert status == 303 and headers["Location"] == "/approvals?note=approved"
            # The decision comes down the open stream, live.
            while True:
                frame = next_frame(stream, reader)
                if frame.event == "approval" and frame.data["data"]["action"] == "decided":
                    break
            assert frame.data["data"]["decided_by"] == "alice"

            # SIGTERM with a stream still open: the console stops without
            # waiting for it (this client never closes it before the exit).
            server.process.send_signal(signal.SIGTERM)
            assert server.process.wait(timeout=60) == 0
        finally:
            connection.close()
        stdout, stderr = server.output()
        assert "console stopped" in stdout
        assert "Traceback" not in stderr
        assert "token=" not in stderr  # the access log leaves queries out

    [decided] = engine.approvals(run.id)
    assert (decided.decision, decided.decided_by, decided.reason) == (
        Decision.APPROVED,
        "alice",
        "over real HTTP",
    )
    assert engine.get_run(run.id).status is RunStatus.QUEUED


def test_a_body_that_ends_before_its_length_is_a_400_at_once(
    env: dict[str, str], tmp_path: Path, users: Path
) -> None:
    with console(env, tmp_path, "--users", str(users)) as server:
        # Shorter than the server's 60 s socket timeout: an answer that waited
        # for it would time this client out first.
        with socket.create_connection((server.host, server.port), timeout=30) as raw:
            raw.sendall(
                b"POST /login HTTP/1.0\r\nHost: x\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\n"
                b"Content-Length: 500\r\n\r\nname=alice&password=alice"
            )
            raw.shutdown(socket.SHUT_WR)  # the client is done sending
            answer = b""
            while chunk := raw.recv(65536):
                answer += chunk
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=10) == 0
        _, stderr = server.output()
    assert answer.startswith(b"HTTP/1.0 400 "), answer[:300]
    assert "Traceback" not in stderr and "ERROR" not in stderr
    lines = [line for line in stderr.splitlines() if "stopping the console" not in line]
    # One line says what happened, and the access log has the request.
    assert len(lines) == 2, lines
    assert "ended before its Content-Length (25 of 500 bytes)" in lines[0]
    assert "127.0.0.1" in lines[0] and "POST /login 400" in lines[1]


def test_a_console_on_another_address_warns_it_is_plain_http(
    env: dict[str, str], tmp_path: Path, users: Path
) -> None:
    with console(
        env, tmp_path, "--users", str(users), "--host", "0.0.0.0", "--prefix", "/ops/console/"
    ) as server:
        server.process.send_signal(signal.SIGINT)
        assert server.process.wait(timeout=10) == 0
        stdout, stderr = server.output()
    assert "/ops/console/ " in stdout
    assert "warning: the console serves plain HTTP on 0.0.0.0" in stderr
    assert "TLS" in stderr


def run_cli(
    env: dict[str, str], *args: str, stdin: str = "", ok: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [RUNWRIGHT, *args],
        env=env,
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,  # no terminal: a hidden prompt reads stdin
    )
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_the_console_refuses_to_start_without_accounts(
    env: dict[str, str], tmp_path: Path, users: Path
) -> None:
    missing = tmp_path / "missing"
    line = one_line_error(run_cli(env, "console", "--users", str(missing), ok=False))
    assert f"no console accounts file at {missing}" in line and "add-user" in line
    empty = tmp_path / "empty"
    empty.touch(mode=0o600)
    line = one_line_error(run_cli(env, "console", "--users", str(empty), ok=False))
    assert "has no accounts" in line
    users.chmod(0o640)
    line = one_line_error(run_cli(env, "console", "--users", str(users), ok=False))
    assert "chmod 600" in line
    users.chmod(0o600)
    line = one_line_error(
        run_cli(env, "console", "--users", str(users), "--prefix", "/a b", ok=False)
    )
    assert "prefix" in line
    for host in ("bad host", "caf\u00e9", "\udcff"):
        done = run_cli(env, "console", "--users", str(users), "--host", host, ok=False)
        assert "--host is an IP address or a host name" in one_line_error(done)


def test_add_user_from_stdin_or_a_prompt(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "new" / "users"
    out = run_cli(
        env,
        "console",
        "add-user",
        "carol",
        "--users",
        str(path),
        "--password-stdin",
        stdin="carol's password\n",
    ).stdout
    assert out.startswith("account carol added to")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Accounts.load(path).check("carol", "carol's password") == "carol"  # no newline kept

    # The group's --users serves its subcommand too; twice-typed at a prompt.
    out = run_cli(
        env,
        "console",
        "--users",
        str(path),
        "add-user",
        "carol",
        stdin="carol's new password\ncarol's new password\n",
    ).stdout
    assert "password of carol set" in out and "sessions end" in out
    assert Accounts.load(path).check("carol", "carol's new password") == "carol"

    for name, password, complaint in [
        ("dave", "short", "8 to 1024 characters"),
        ("da:ve", "long enough password", "account name"),
        ("da ve", "long enough password", "account name"),
    ]:
        done = run_cli(
            env,
            "console",
            "add-user",
            name,
            "--users",
            str(path),
            "--password-stdin",
            stdin=password + "\n",
            ok=False,
        )
        assert complaint in one_line_error(done)
    assert Accounts.load(path).names == ("carol",)
    assert os.listdir(path.parent) == ["users"]


def test_add_user_takes_a_role_and_refuses_an_unknown_one(
    env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "users"
    args = ("console", "add-user", "vera", "--users", str(path), "--password-stdin")
    out = run_cli(env, *args, "--role", "viewer", stdin="vera's password\n").stdout
    assert out.startswith("account vera added to") and "role viewer" in out
    assert Accounts.load(path).role("vera") is Role.VIEWER
    before = path.read_bytes()
    done = run_cli(env, *args, "--role", "admin", stdin="vera's password\n", ok=False)
    assert "a role is one of viewer, reader, approver" in one_line_error(done)
    assert path.read_bytes() == before
