"""The standalone console (runner/console/standalone.py) in process, through
werkzeug's test client: its own sign-in, sessions, CSRF, and
the console's pages behind them."""

from __future__ import annotations

import base64
import html
import logging
import re
from pathlib import Path

import pytest
from werkzeug.test import Client, TestResponse

from runner import Engine, RunStatus
from runner.console.accounts import add_account
from runner.console.assets import CSP
from runner.console.sessions import (
    PRESESSION_COOKIE,
    SESSION_COOKIE,
    Attempt,
    LoginLimiter,
    Sessions,
)
from runner.console.standalone import StandaloneConsole
from runner.core.settings import Settings
from store.models import Decision
from tests.console.conftest import (
    Parcel,
    approval_agent,
    csrf_of,
    execute_all,
    waiting_question,
)
from tests.helpers import snapshot

BASE = "/console"
ALICE = ("alice", "alice's password")
BOB = ("bob", "bob's long password")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def users(tmp_path: Path) -> Path:
    path = tmp_path / "users"
    for name, password in (ALICE, BOB):
        add_account(path, name, password)
    return path


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app(engine: Engine, users: Path, settings: Settings, clock: Clock) -> StandaloneConsole:
    assert settings.secret_key
    return StandaloneConsole(
        engine,
        accounts=users,
        secret_key=settings.secret_key,
        prefix=BASE,
        live_timeout=5,
        limiter=LoginLimiter(clock=clock),
        clock=clock,
    )


@pytest.fixture
def client(app: StandaloneConsole) -> Client:
    return Client(app)


def sign_in(
    client: Client, account: tuple[str, str] = ALICE, *, next: str | None = None
) -> TestResponse:
    login = client.get(f"{BASE}/login", query_string={"next": next} if next else None)
    assert login.status_code == 200
    form = {"name": account[0], "password": account[1], "csrf_token": csrf_of(login.text)}
    if next is not None:
        form["next"] = html.unescape(re.findall(r'name="next" value="([^"]*)"', login.text)[0])
    return client.post(f"{BASE}/login", data=form)


def signed_in(client: Client, account: tuple[str, str] = ALICE) -> Client:
    answer = sign_in(client, account)
    assert answer.status_code == 303, answer.text
    return client


def session_cookie(client: Client) -> str | None:
    cookie = client.get_cookie(SESSION_COOKIE, domain="localhost", path=BASE)
    return None if cookie is None else cookie.value


def set_session(client: Client, value: str) -> None:
    client.set_cookie(SESSION_COOKIE, value, domain="localhost", path=BASE)


def goes_to_login(answer: TestResponse) -> bool:
    return answer.status_code == 303 and answer.headers["Location"].startswith(f"{BASE}/login")


def test_sign_in_sign_out(client: Client, engine: Engine) -> None:
    answer = client.get(f"{BASE}/approvals?agent=x")
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"{BASE}/login?next=%2Fconsole%2Fapprovals%3Fagent%3Dx"
    assert answer.headers["Cache-Control"] == "no-store"
    assert answer.headers["X-Content-Type-Options"] == "nosniff"

    login = client.get(answer.headers["Location"])
    assert login.status_code == 200 and "Sign in" in login.text
    assert login.headers["Content-Security-Policy"] == CSP  # the console's, by hash
    assert login.headers["X-Frame-Options"] == "DENY"
    assert login.text.count("<script") == 1 and "style=" not in login.text
    assert 'name="next" value="/console/approvals?agent=x"' in login.text

    answer = sign_in(client, next="/console/approvals?agent=x")
    assert answer.status_code == 303
    assert answer.headers["Location"] == "/console/approvals?agent=x"
    cookies = answer.headers.getlist("Set-Cookie")
    [session] = [c for c in cookies if c.startswith(SESSION_COOKIE + "=")]
    for flag in ("HttpOnly", "SameSite=Strict", f"Path={BASE}", "Max-Age=43200"):
        assert flag in session.split("; ")
    assert "Secure" not in session
    assert any(c.startswith(PRESESSION_COOKIE + "=;") and "Max-Age=0" in c for c in cookies)

    inbox = client.get(f"{BASE}/approvals")
    assert inbox.status_code == 200
    assert '<span class="user">alice</span>' in inbox.text
    assert f'action="{BASE}/logout"' in inbox.text
    # Already signed in: the sign-in page sends on.
    assert client.get(f"{BASE}/login").headers["Location"] == f"{BASE}/"

    stolen = session_cookie(client)
    assert stolen is not None
    refused = client.post(f"{BASE}/logout", data={"csrf_token": "forged"})
    assert refused.status_code == 403
    assert client.get(f"{BASE}/").status_code == 200  # still signed in
    out = client.post(f"{BASE}/logout", data={"csrf_token": csrf_of(inbox.text)})
    assert out.status_code == 303 and out.headers["Location"] == f"{BASE}/login"
    assert session_cookie(client) is None
    assert goes_to_login(client.get(f"{BASE}/"))
    # The cookie as it was, sent again (copied before signing out): still out.
    set_session(client, stolen)
    assert goes_to_login(client.get(f"{BASE}/"))


def test_a_wrong_password_or_unknown_name_is_refused_alike(client: Client) -> None:
    wrong = sign_in(client, ("alice", "not alice's password"))
    unknown = sign_in(client, ("mallory", "alice's password"))
    swapped = sign_in(client, ("alice", BOB[1]))
    for answer in (wrong, unknown, swapped):
        assert answer.status_code == 403
        assert "The name or the password is wrong." in answer.text
        assert not any(
            c.startswith(SESSION_COOKIE + "=") for c in answer.headers.getlist("Set-Cookie")
        )
    assert session_cookie(client) is None
    assert goes_to_login(client.get(f"{BASE}/"))


def test_failed_sign_ins_are_slowed_down(
    app: StandaloneConsole, client: Client, clock: Clock
) -> None:
    for _ in range(5):
        assert sign_in(client, ("alice", "guess guess")).status_code == 403
    # The next attempt must wait, even with the right password.
    limited = sign_in(client, ALICE)
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "2" and "try again in 2 s" in limited.text
    assert session_cookie(client) is None
    # Another name from the same address is not held up by alice's count.
    assert sign_in(Client(app), BOB).status_code == 303
    clock.now += 3
    assert sign_in(client, ("alice", "guess again")).status_code == 403
    assert sign_in(client, ALICE).status_code == 429  # 4 s now
    clock.now += 5
    assert sign_in(client, ALICE).status_code == 303


def fail(limiter: LoginLimiter, name: str, address: str) -> None:
    attempt = limiter.reserve(name, address)
    assert isinstance(attempt, Attempt), f"{name} from {address} must wait {attempt} s"
    limiter.failed(attempt)


def test_the_limiter_counts_by_name_and_by_address() -> None:
    clock = Clock()
    limiter = LoginLimiter(clock=clock, max_keys=100)
    for number in range(20):  # one address tries many names
        fail(limiter, f"user{number}", "10.0.0.1")
    assert limiter.reserve("anyone", "10.0.0.1") == 2
    fail(limiter, "anyone", "10.0.0.2")  # the address's count is its own
    fail(limiter, "anyone", "10.0.0.2")
    clock.now += 2
    fail(limiter, "anyone", "10.0.0.1")
    assert limiter.reserve("nobody", "10.0.0.1") == 4  # the address's wait doubled
    right = limiter.reserve("anyone", "10.0.0.2")
    assert isinstance(right, Attempt)
    limiter.succeeded(right)  # forgives 10.0.0.2's failures for the name, not the address
    assert limiter.reserve("anyone", "10.0.0.1") == 4
    clock.now += 900  # the window passes: forgotten
    assert isinstance(limiter.reserve("nobody", "10.0.0.1"), Attempt)
    for number in range(500):  # a flood of names stays bounded
        fail(limiter, f"flood{number}", f"10.1.{number // 256}.{number % 256}")
    assert len(limiter._seen) <= 100


def test_a_sign_in_without_the_pre_session_token_is_refused(
    app: StandaloneConsole, client: Client
) -> None:
    form = {"name": ALICE[0], "password": ALICE[1]}
    page = client.get(f"{BASE}/login").text
    # No token, a forged one, another visitor's, or the right one without
    # its cookie (a form posted from another site): no session.
    other = Client(app)
    attempts = [
        (client, form),
        (client, {**form, "csrf_token": "x" * 43}),
        (client, {**form, "csrf_token": csrf_of(other.get(f"{BASE}/login").text)}),
        (Client(app), {**form, "csrf_token": csrf_of(page)}),
    ]
    for who, data in attempts:
        answer = who.post(f"{BASE}/login", data=data)
        assert answer.status_code == 403
        assert "stale or was not sent from this console" in answer.text
        assert session_cookie(who) is None
    assert sign_in(client).status_code == 303  # with the form's own token


HOSTILE_NEXT = [
    "//evil.example/console/",
    "https://evil.example/console/",
    "/\\evil.example/console/",
    "/console/\\evil",
    "javascript:alert(1)",
    "/other-app/",
    "/console",
    "/console/login",
    "/console/logout",
    "/console/\r\nSet-Cookie: x=1",
    "/console/\t/evil",
    "http:/console/",
    "/console/caf\u00e9",
]


def test_next_only_goes_to_a_console_page(app: StandaloneConsole) -> None:
    for target in HOSTILE_NEXT:
        answer = sign_in(Client(app), next=target)
        assert answer.status_code == 303
        assert answer.headers["Location"] == f"{BASE}/", target


def test_next_keeps_a_console_path_and_its_query(client: Client) -> None:
    answer = sign_in(client, next="/console/?status=failed&agent=a%20b")
    assert answer.headers["Location"] == "/console/?status=failed&agent=a%20b"


def test_a_tampered_forged_or_expired_session_is_anonymous(
    app: StandaloneConsole, client: Client, clock: Clock
) -> None:
    signed_in(client)
    good = session_cookie(client)
    assert good is not None
    body, mac = good.split(".")
    payload = base64.urlsafe_b64decode(body + "==").decode()
    as_bob = base64.urlsafe_b64encode(payload.replace(":alice", ":bob").encode()).decode()
    later = payload.split(":")
    later[1] = str(int(later[1]) + 10**6)
    longer = base64.urlsafe_b64encode(":".join(later).encode()).decode()
    elsewhere, _ = Sessions("test:another-secret-of-another-server-0123456789", clock=clock).issue(
        "alice", payload.split(":")[3]
    )
    flipped = mac[:-2] + ("A" if mac[-2] != "A" else "B") + mac[-1]
    for value in (
        f"{as_bob.rstrip('=')}.{mac}",  # another name under alice's signature
        f"{longer.rstrip('=')}.{mac}",  # a later expiry
        f"{body}.{flipped}",
        f"{body}.",
        body,
        elsewhere,  # signed with another key
        "",
        "x" * 2000,  # longer than any cookie the console signs
    ):
        set_session(client, value)
        assert goes_to_login(client.get(f"{BASE}/")), value
        assert client.get(f"{BASE}/runs/x/events").status_code == 403
    set_session(client, good)
    assert client.get(f"{BASE}/").status_code == 200
    clock.now += 12 * 3600 - 1
    assert client.get(f"{BASE}/").status_code == 200
    clock.now += 2  # the expiry is in the signed value
    answer = client.get(f"{BASE}/")
    assert goes_to_login(answer)
    assert any(
        c.startswith(SESSION_COOKIE + "=;") for c in answer.headers.getlist("Set-Cookie")
    )  # and the stale cookie is cleared


def test_a_new_password_ends_the_accounts_sessions(
    users: Path, app: StandaloneConsole, caplog: pytest.LogCaptureFixture
) -> None:
    alice, bob = signed_in(Client(app)), signed_in(Client(app), BOB)
    assert alice.get(f"{BASE}/").status_code == 200
    add_account(users, "alice", "alice's new password")
    assert goes_to_login(alice.get(f"{BASE}/"))
    assert bob.get(f"{BASE}/").status_code == 200  # bob's password did not change
    assert sign_in(alice).status_code == 403  # the old password no longer works
    assert sign_in(alice, ("alice", "alice's new password")).status_code == 303
    # A broken accounts file: nobody is signed in, and nobody can sign in;
    # the log says why, once.
    users.chmod(0o644)
    with caplog.at_level(logging.ERROR, logger="runner.console.standalone"):
        assert goes_to_login(bob.get(f"{BASE}/"))
        assert bob.get(f"{BASE}/login").status_code == 503
    [said] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "nobody can sign in" in said and "chmod 600" in said
    users.chmod(0o600)
    assert bob.get(f"{BASE}/").status_code == 200  # its session held meanwhile


def test_a_post_without_the_sessions_csrf_token_changes_nothing(
    app: StandaloneConsole, client: Client, engine: Engine, queued: list[str]
) -> None:
    agent = approval_agent()
    run = engine.start(agent.name, {})
    execute_all(engine, queued)
    [approval] = engine.approvals(run.id)
    signed_in(client)
    bobs_token = csrf_of(signed_in(Client(app), BOB).get(f"{BASE}/approvals").text)
    decide = {"decision": "approve", "reason": "looks fine"}
    for path, form in [
        (f"/approvals/{approval.approval_id}", decide),
        (f"/runs/{run.id}/steps/{approval.step_index}/decide", decide),
        (f"/runs/{run.id}/cancel", {}),
    ]:
        for token in (None, "", "forged", bobs_token):
            data = form if token is None else {**form, "csrf_token": token}
            answer = client.post(BASE + path, data=data)
            assert answer.status_code == 403, (path, token)
            assert "CSRF" in answer.text
    assert engine.approvals(run.id)[0].pending
    assert engine.get_run(run.id).status is RunStatus.WAITING
    # Nor does one from nobody, with a visitor's token.
    anonymous = Client(app)
    token = csrf_of(anonymous.get(f"{BASE}/login").text)
    answer = anonymous.post(f"{BASE}/runs/{run.id}/cancel", data={"csrf_token": token})
    assert answer.status_code == 403
    assert engine.get_run(run.id).status is RunStatus.WAITING


def test_an_approval_records_who_decided(
    app: StandaloneConsole, client: Client, engine: Engine, queued: list[str]
) -> None:
    agent = approval_agent(calls=2)
    run = engine.start(agent.name, {})
    execute_all(engine, queued)
    first, second = engine.approvals(run.id)
    signed_in(client)
    inbox = client.get(f"{BASE}/approvals")
    assert first.approval_id in inbox.text and "refund" in inbox.text
    form = {
        "decision": "approve",
        "reason": "the mug arrived broken",
        "next": "inbox",
        "csrf_token": csrf_of(inbox.text),
    }
    answer = client.post(f"{BASE}/approvals/{first.approval_id}", data=form)
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"{BASE}/approvals?note=approved"
    again = client.post(f"{BASE}/approvals/{first.approval_id}", data=form)
    assert again.status_code == 409  # once is enough

    bob = signed_in(Client(app), BOB)
    page = bob.get(f"{BASE}/runs/{run.id}")
    assert page.status_code == 200
    answer = bob.post(
        f"{BASE}/approvals/{second.approval_id}",
        data={"decision": "deny", "csrf_token": csrf_of(page.text)},
    )
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"{BASE}/runs/{run.id}?note=denied"
    decided = {a.approval_id: a for a in engine.approvals(run.id)}
    assert (decided[first.approval_id].decided_by, decided[first.approval_id].reason) == (
        "alice",
        "the mug arrived broken",
    )
    assert decided[first.approval_id].decision is Decision.APPROVED
    assert decided[second.approval_id].decided_by == "bob"
    assert decided[second.approval_id].decision is Decision.DENIED
    execute_all(engine, queued)
    assert agent.refunds.done == [30]


def test_an_edit_and_an_answer_go_through_the_standalone_console(
    client: Client, engine: Engine, queued: list[str]
) -> None:
    agent = approval_agent()
    run = engine.start(agent.name, {})
    execute_all(engine, queued)
    [approval] = engine.approvals(run.id)
    signed_in(client)
    token = csrf_of(client.get(f"{BASE}/approvals").text)
    path = f"{BASE}/approvals/{approval.approval_id}"
    edit = {"decision": "approve", "run": run.id, "csrf_token": token}
    before = snapshot(engine.store)
    for bad, says in (("[12]", "must be a JSON object"), ("{", "not JSON")):
        refused = client.post(path, data={**edit, "arguments": bad})
        assert refused.status_code == 400 and says in refused.text
    assert snapshot(engine.store) == before
    # Past 64 KiB the form is refused before anything reads it.
    huge = client.post(path, data={**edit, "arguments": '{"note": "' + "x" * 70_000 + '"}'})
    assert huge.status_code == 413 and snapshot(engine.store) == before

    answer = client.post(path, data={**edit, "arguments": '{"amount": 9, "note": "standalone"}'})
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"{BASE}/runs/{run.id}?note=edited"
    [decided] = engine.approvals(run.id)
    assert (decided.arguments, decided.decided_by) == ({"amount": 9, "note": "standalone"}, "alice")
    execute_all(engine, queued)
    assert agent.refunds.done == [9]

    asked_run, question = waiting_question(engine, queued, ask_human=Parcel)
    answer = client.post(
        f"{BASE}/approvals/{question.approval_id}",
        data={
            "decision": "answer",
            "answer": '{"items": ["mug"]}',
            "run": asked_run.id,
            "next": "inbox",
            "csrf_token": token,
        },
    )
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"{BASE}/approvals?note=answered"
    [answered] = engine.approvals(asked_run.id)
    assert (answered.answer, answered.decided_by) == ({"items": ["mug"]}, "alice")


def test_a_token_link_opens_its_approval_and_nothing_else(
    app: StandaloneConsole, engine: Engine, queued: list[str]
) -> None:
    agent = approval_agent(note="for the broken mug")
    mine = engine.start(agent.name, {"customer": "secret-customer-1"})
    theirs = engine.start(agent.name, {"customer": "secret-customer-2"})
    execute_all(engine, queued)
    [approval] = engine.approvals(mine.id)
    [other] = engine.approvals(theirs.id)
    token = engine.token(approval.approval_id)
    link = f"{BASE}/approvals/{approval.approval_id}?token={token}"
    visitor = Client(app)

    page = visitor.get(link)
    assert page.status_code == 200 and "for the broken mug" in page.text
    assert "secret-customer" not in page.text and f'href="{BASE}/' not in page.text
    # The token opens nothing else: the console's pages want a sign-in.
    for path in (
        f"{BASE}/",
        f"{BASE}/approvals",
        f"{BASE}/runs/{mine.id}",
        f"{BASE}/runs/{theirs.id}",
        f"{BASE}/approvals/{approval.approval_id}",
    ):
        assert goes_to_login(visitor.get(path)), path
    assert visitor.get(f"{BASE}/runs/{mine.id}/events").status_code == 403
    assert visitor.get(f"{BASE}/approvals/{other.approval_id}?token={token}").status_code == 403
    form = {"decision": "approve", "token": token, "csrf_token": csrf_of(page.text)}
    wrong = visitor.post(f"{BASE}/approvals/{other.approval_id}", data=form)
    assert wrong.status_code == 403 and engine.approvals(theirs.id)[0].pending
    no_csrf = visitor.post(link, data={"decision": "approve", "token": token})
    assert no_csrf.status_code == 403 and engine.approvals(mine.id)[0].pending

    done = visitor.post(link, data=form)
    assert done.status_code == 200 and "Approved" in done.text
    [decided] = engine.approvals(mine.id)
    assert (decided.decision, decided.decided_by) == (Decision.APPROVED, "link")
    assert engine.approvals(theirs.id)[0].pending


def test_routes_methods_and_strict_input(client: Client) -> None:
    assert client.get("/console").headers["Location"] == f"{BASE}/"
    assert client.get("/elsewhere").status_code == 404
    signed_in(client)
    assert client.get(f"{BASE}/no/such/page").status_code == 404
    wrong = client.get(f"{BASE}/runs/abc/cancel")
    assert wrong.status_code == 405 and wrong.headers["Allow"] == "POST"
    assert client.post(f"{BASE}/approvals").headers["Allow"] == "GET, HEAD"
    assert client.get(f"{BASE}/logout").status_code == 405
    head = client.head(f"{BASE}/")
    assert head.status_code == 200 and head.data == b""
    assert int(head.headers["Content-Length"]) > 1000
    # Not UTF-8 (as wsgiref decodes %ff; werkzeug's client would replace it).
    raw = client.get(f"{BASE}/x", environ_overrides={"PATH_INFO": f"{BASE}/\xff"})
    assert raw.status_code == 400
    assert client.get(f"{BASE}/?status=%ff").status_code == 400
    token = csrf_of(client.get(f"{BASE}/").text)
    json_body = client.post(
        f"{BASE}/runs/abc/cancel",
        data=f'{{"csrf_token": "{token}"}}',
        content_type="application/json",
    )
    assert json_body.status_code == 415
    # A path parameter in a redirect stays one header line.
    answer = client.get(f"{BASE}/approvals/a%0d%0aSet-Cookie:%20x=1")
    assert answer.status_code == 303
    assert "\r" not in answer.headers["Location"] and "%0D%0A" in answer.headers["Location"]
    assert not any(c.startswith("x=") for c in answer.headers.getlist("Set-Cookie"))


def test_the_event_stream_streams_to_a_signed_in_user(
    client: Client, engine: Engine, queued: list[str]
) -> None:
    agent = approval_agent()
    run = engine.start(agent.name, {})
    execute_all(engine, queued)
    signed_in(client)
    answer = client.get(f"{BASE}/runs/{run.id}/events", buffered=False)
    try:
        assert answer.status_code == 200 and answer.mimetype == "text/event-stream"
        assert answer.headers["X-Accel-Buffering"] == "no"
        assert "Content-Length" not in answer.headers
        chunks = iter(answer.response)
        assert next(chunks).startswith(b"retry: ")
        first = next(chunks).decode()  # a frame, while the stream is still open
        assert first.startswith("id: ") and "event: status" in first
    finally:
        answer.close()


def test_secure_cookies_are_marked_secure(engine: Engine, users: Path, settings: Settings) -> None:
    assert settings.secret_key
    app = StandaloneConsole(
        engine, accounts=users, secret_key=settings.secret_key, secure_cookies=True
    )
    client = Client(app)
    login = client.get("/login")
    assert "Secure" in login.headers["Set-Cookie"].split("; ")
    assert "Path=/" in login.headers["Set-Cookie"].split("; ")
    form = {"name": ALICE[0], "password": ALICE[1], "csrf_token": csrf_of(login.text)}
    answer = client.post("/login", data=form)
    assert answer.status_code == 303 and answer.headers["Location"] == "/"
    assert all("Secure" in c.split("; ") for c in answer.headers.getlist("Set-Cookie"))
