"""Issue 9, security items: forged tokens from a base64 key, a removed signing
key stopping tick(), malformed tokens, ids and reasons."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from flask.testing import FlaskClient

from examples import agents as example_agents
from examples.flask_app.app import create_app
from runner import (
    Agent,
    ApprovalError,
    ApprovalPolicy,
    ApprovalRequest,
    Engine,
    RunNotFound,
    RunStatus,
    effect,
)
from runner.core.coordination.leases import Leases
from runner.core.errors import StoreUnavailable
from runner.core.settings import Settings
from runner.notifiers import sign, verify_signature
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import Decision, utcnow
from store.postgres import PostgresStore
from tests.helpers import new_run, snapshot, try_claim

OLD_KEY = "old:" + "o" * 40
NEW_KEY = "new:" + "n" * 40


def padded_base64_key() -> str:
    """A bare secret as ``openssl rand -base64 40`` prints it: ends in ``==``."""
    made = base64.b64encode(os.urandom(40)).decode()
    assert made.endswith("==")
    return made


def forged_token(approval_id: str) -> str:
    """The token the old parser accepted for a key ending in ``==``: HMAC with "="."""
    digest = hmac.new(b"=", approval_id.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class Inbox:
    """A notifier that fails its first ``fail`` calls."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.calls: list[ApprovalRequest] = []

    def __call__(self, request: ApprovalRequest) -> None:
        self.calls.append(request)
        if len(self.calls) <= self.fail:
            raise ConnectionError("the approvers' inbox is down")


def refund_agent(
    *, inbox: Inbox | None = None, policy: Any = True, refunds: list[int] | None = None
) -> str:
    """An agent that asks to refund 30 once, then reports the tool result."""
    name = f"security-{uuid.uuid4().hex[:8]}"
    done = refunds if refunds is not None else []

    @effect
    def refund(amount: int, idempotency_key: str) -> dict[str, int]:
        """Refund money."""
        done.append(amount)
        return {"refunded": amount}

    def script(request: Request) -> Any:
        if request.step == 1:
            return tools(call("refund", {"amount": 30}))
        return text("finished: " + request.tool_results()[-1]["content"])

    Agent(
        name=name,
        model=ScriptedModel(name, script).model,
        tools=[refund],
        approvals={"refund": policy},
        notifier=inbox,
    )
    return name


@pytest.fixture
def queued() -> list[str]:
    return []


def make_engine(store: PostgresStore, leases: Leases, secret_key: str, queued: list[str]) -> Engine:
    return Engine(
        store,
        leases=leases,
        settings=Settings(lease_ttl_seconds=3, secret_key=secret_key, notify_backoff_seconds=5),
        enqueue=queued.append,
    )


@pytest.fixture
def engine_for(pg_store: PostgresStore, leases: Leases, queued: list[str]) -> Iterator[Any]:
    made: list[Engine] = []

    def build(secret_key: str) -> Engine:
        made.append(make_engine(pg_store, leases, secret_key, queued))
        return made[-1]

    yield build
    for engine in made:
        engine.close()


def waiting_approval(engine: Engine, name: str) -> tuple[str, str]:
    """Start a run of ``name`` and execute it to its wait; the run and approval ids."""
    run = engine.start(name)
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    [approval] = engine.approvals(run.id)
    return run.id, approval.approval_id


# ------------------------------------------------------------- 1. forgery


def test_a_token_forged_from_base64_padding_no_longer_verifies(
    engine_for: Any, pg_store: PostgresStore
) -> None:
    engine = engine_for(padded_base64_key())
    refunds: list[int] = []
    run_id, approval_id = waiting_approval(engine, refund_agent(refunds=refunds))
    before = snapshot(pg_store)

    with pytest.raises(ApprovalError, match="not valid"):
        engine.check_token(approval_id, forged_token(approval_id))
    with pytest.raises(ApprovalError, match="not valid"):
        engine.decide(approval_id, True, token=forged_token(approval_id))

    assert snapshot(pg_store) == before
    engine.decide(approval_id, False, "no", token=engine.token(approval_id))
    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and refunds == []


@pytest.fixture
def flask_engine(pg_store: PostgresStore, leases: Leases) -> Iterator[Engine]:
    # The example as deployed with RUNWRIGHT_SECRET_KEY=$(openssl rand -base64 40).
    made = Engine(pg_store, leases=leases, settings=Settings(secret_key=padded_base64_key()))
    example_agents.refunds.clear()
    example_agents.sent_links.clear()
    yield made
    made.close()


@pytest.fixture
def flask_client(flask_engine: Engine) -> Iterator[FlaskClient]:
    with create_app(flask_engine).test_client() as made:
        yield made


def start_example_refund(client: FlaskClient, engine: Engine) -> tuple[str, str, str]:
    """POST /runs and execute to the refund's wait; run id, approval path, token."""
    created = client.post(
        "/runs", json={"agent": "support_triage", "payload": {"message": "A-1002 never came"}}
    )
    assert created.status_code == 201 and created.json is not None
    run_id = created.json["run_id"]
    waiting = engine.execute(run_id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    [link] = example_agents.sent_links
    url = urlsplit(link)
    return run_id, url.path, parse_qs(url.query)["token"][0]


def _link_csrf(client: FlaskClient, path: str, token: str) -> str:
    """The session's CSRF token, from the link's real page (as a browser has it)."""
    page = client.get(path, query_string={"token": token}).get_data(as_text=True)
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def test_the_flask_example_refuses_a_forged_token(
    flask_client: FlaskClient, flask_engine: Engine, pg_store: PostgresStore
) -> None:
    run_id, path, token = start_example_refund(flask_client, flask_engine)
    approval_id = path.rsplit("/", 1)[1]
    forged = forged_token(approval_id)
    csrf = _link_csrf(flask_client, path, token)
    before = snapshot(pg_store)

    page = flask_client.get(path, query_string={"token": forged})
    assert page.status_code == 403 and "not valid" in page.get_data(as_text=True)
    assert "A-1002" not in page.get_data(as_text=True)
    form = {"token": forged, "decision": "approve", "csrf_token": csrf}
    refused = flask_client.post(path, data=form)
    assert refused.status_code == 403
    assert "not valid" in refused.get_data(as_text=True)

    assert snapshot(pg_store) == before
    assert example_agents.refunds == []
    assert flask_engine.get_run(run_id).status is RunStatus.WAITING
    # The genuine link still works.
    form = {"token": token, "decision": "deny", "csrf_token": csrf}
    assert flask_client.post(path, data=form).status_code == 200


def test_the_flask_example_answers_malformed_tokens_and_ids_with_one_refusal(
    flask_client: FlaskClient, flask_engine: Engine, pg_store: PostgresStore
) -> None:
    """A malformed token and an id that is only a spelling of the real one get
    the answer a wrong token gets: the link is not valid (403), nothing more."""
    run_id, path, token = start_example_refund(flask_client, flask_engine)
    approval_id = path.rsplit("/", 1)[1]
    csrf = _link_csrf(flask_client, path, token)
    before = snapshot(pg_store)

    for bad in ["é" * 43, "ü" + token[1:], "\u0663" * 43]:
        page = flask_client.get(path, query_string={"token": bad})
        assert page.status_code == 403 and "not valid" in page.get_data(as_text=True)
        form = {"token": bad, "decision": "approve", "csrf_token": csrf}
        posted = flask_client.post(path, data=form)
        assert posted.status_code == 403 and "not valid" in posted.get_data(as_text=True)
    for odd in (f"urn:uuid:{approval_id}", approval_id.upper(), approval_id.replace("-", "")):
        odd_path = f"/console/approvals/{odd}"
        page = flask_client.get(odd_path, query_string={"token": token})
        assert page.status_code == 403 and "not valid" in page.get_data(as_text=True)
        form = {"token": token, "decision": "approve", "csrf_token": csrf}
        posted = flask_client.post(odd_path, data=form)
        assert posted.status_code == 403 and "not valid" in posted.get_data(as_text=True)
    assert flask_client.get(f"/runs/urn:uuid:{run_id}").status_code == 404
    assert flask_client.get(f"/runs/{run_id.upper()}").status_code == 404

    assert snapshot(pg_store) == before
    assert example_agents.refunds == []


# ------------------------------------------------------ 2. removed signing key


def test_a_removed_signing_key_does_not_stop_tick(
    engine_for: Any, pg_store: PostgresStore, queued: list[str]
) -> None:
    # An approval signed with "old", whose first notification failed.
    signed_old = engine_for(OLD_KEY)
    inbox = Inbox(fail=1)
    stuck_run, stuck_approval = waiting_approval(signed_old, refund_agent(inbox=inbox))
    assert len(inbox.calls) == 1

    # The operator rotates to "new" and drops "old". Under the new key: an
    # approval that expires, a run whose worker died, a run whose message was lost.
    engine = engine_for(NEW_KEY)
    expiring_run, _ = waiting_approval(engine, refund_agent(policy=ApprovalPolicy(expires_in=60)))
    lapsed, _ = pg_store.create_run(new_run(agent="security-lapsed"))
    assert try_claim(pg_store, lapsed.id, "dead-worker", 1) is not None
    lost, _ = pg_store.create_run(new_run(agent="security-lost"))
    queued.clear()

    report = engine.tick(now=utcnow() + timedelta(seconds=120))

    assert report.item_errors == 1 and report.failed_jobs == []
    assert len(inbox.calls) == 1  # no link could be signed for it: nothing sent
    assert report.expired == 1
    [expired] = engine.approvals(expiring_run)
    assert expired.decision is Decision.DENIED and expired.reason == "expired"
    assert report.lapsed == [lapsed.id]
    assert report.reenqueued == [lost.id]
    assert sorted(queued) == sorted([expiring_run, lapsed.id, lost.id])
    [stuck] = engine.approvals(stuck_run)
    assert stuck.approval_id == stuck_approval and stuck.decision is None
    assert engine.get_run(stuck_run).status is RunStatus.WAITING

    # The approval nobody can be sent a link for still expires on time.
    later = engine.tick(now=utcnow() + timedelta(days=1, seconds=60))
    assert later.expired == 1 and later.failed_jobs == []
    [stuck] = engine.approvals(stuck_run)
    assert stuck.decision is Decision.DENIED and stuck.reason == "expired"


def test_a_failing_tick_job_does_not_stop_the_others(
    engine_for: Any, pg_store: PostgresStore, queued: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engine_for(NEW_KEY)
    lapsed, _ = pg_store.create_run(new_run(agent="security-lapsed"))
    assert try_claim(pg_store, lapsed.id, "dead-worker", 1) is not None
    lost, _ = pg_store.create_run(new_run(agent="security-lost"))

    def outage(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("the database went away during this query")

    # One job's query fails; a store outage is the realistic cause.
    monkeypatch.setattr(pg_store, "expired_approvals", outage)
    report = engine.tick(now=utcnow() + timedelta(seconds=120))

    assert report.failed_jobs == ["expire_waits"]
    assert report.lapsed == [lapsed.id] and report.reenqueued == [lost.id]
    assert sorted(queued) == sorted([lapsed.id, lost.id])


# ------------------------------------------- 3 and 15. malformed input


def test_malformed_tokens_are_refused_not_type_errors(
    engine_for: Any, pg_store: PostgresStore
) -> None:
    engine = engine_for(NEW_KEY)
    _, approval_id = waiting_approval(engine, refund_agent())
    genuine = engine.token(approval_id)
    before = snapshot(pg_store)
    for bad in ["é" * 43, "ü" + genuine[1:], "\ud800" * 43, "\x00" * 43, "x" * 100_000]:
        with pytest.raises(ApprovalError, match="not valid"):
            engine.check_token(approval_id, bad)
        with pytest.raises(ApprovalError, match="not valid"):
            engine.decide(approval_id, True, token=bad)
    assert snapshot(pg_store) == before


def odd_spellings(approval_id: str) -> list[str]:
    """Forms Python's uuid.UUID() accepts for the same id, and worse."""
    return [
        f"urn:uuid:{approval_id}",
        "{" + approval_id + "}",
        approval_id.upper(),
        approval_id.replace("-", ""),
        f" {approval_id}",
        approval_id + "\n",
        approval_id.replace("0", "\u0660"),  # ARABIC-INDIC DIGIT ZERO
        approval_id[:-1] + "\x00",
        approval_id[:-1] + "\ud800",
        "",
        "x" * 20_000,
    ]


def test_an_odd_approval_id_is_an_approval_error_that_changes_nothing(
    engine_for: Any, pg_store: PostgresStore
) -> None:
    engine = engine_for(NEW_KEY)
    run_id, approval_id = waiting_approval(engine, refund_agent())
    token = engine.token(approval_id)
    before = snapshot(pg_store)

    for odd in odd_spellings(approval_id):
        for attempt in (
            partial(engine.decide, odd, True, token=token),
            partial(engine.decide, odd, True, trusted=True),
            partial(engine.check_token, odd, token),
            partial(engine.token, odd),
        ):
            with pytest.raises(ApprovalError, match="no approval with id") as raised:
                attempt()
            assert len(raised.value.message) < 150  # a 20 KB id is not echoed back

    assert snapshot(pg_store) == before
    assert engine.get_run(run_id).status is RunStatus.WAITING


def test_an_odd_run_id_is_run_not_found(engine_for: Any, pg_store: PostgresStore) -> None:
    engine = engine_for(NEW_KEY)
    run, _ = pg_store.create_run(new_run(agent="security-odd-id"))
    before = snapshot(pg_store)
    for odd in odd_spellings(run.id):
        for read in (
            engine.get_run,
            engine.steps,
            engine.checkpoint,
            engine.approvals,
            engine.cancel,
        ):
            with pytest.raises(RunNotFound, match="no run with id") as raised:
                read(odd)
            assert len(raised.value.message) < 150
    assert snapshot(pg_store) == before
    assert engine.get_run(run.id).status is RunStatus.QUEUED


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("fine\x00", "NUL"),
        ("\x00", "NUL"),
        ("ok \ud800", "lone surrogate"),
        ("\udfff", "lone surrogate"),
        ("x" * 2001, "longer than 2000"),
    ],
)
def test_a_reason_postgres_cannot_store_is_one_clear_error_that_writes_nothing(
    engine_for: Any, pg_store: PostgresStore, reason: str, message: str
) -> None:
    engine = engine_for(NEW_KEY)
    refunds: list[int] = []
    run_id, approval_id = waiting_approval(engine, refund_agent(refunds=refunds))
    before = snapshot(pg_store)

    with pytest.raises(ApprovalError, match=message):
        engine.decide(approval_id, False, reason, token=engine.token(approval_id))
    with pytest.raises(ApprovalError, match=message):
        engine.decide(approval_id, True, reason, trusted=True)

    assert snapshot(pg_store) == before
    # A reason with other Unicode is fine, and the decision goes through.
    engine.decide(approval_id, True, "ok ✓ 😀", token=engine.token(approval_id))
    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED and refunds == [30]


def test_verify_signature_refuses_malformed_headers() -> None:
    secret, body, now = "webhook-secret", b'{"type":"approval.requested"}', time.time()
    stamp = str(int(now))
    good = "sha256=" + sign(secret, stamp, body)
    assert verify_signature(secret, body, stamp, good, now=now)
    for timestamp, signature in [
        (stamp, "sha256=" + "é" * 64),  # compare_digest raised TypeError on this
        (stamp, "\ud800"),
        (stamp, good + "\x00"),
        (None, good),  # a missing header
        (stamp, None),
        ("\uff11" * len(stamp), good),  # FULLWIDTH DIGIT ONE: int() accepts it
        (f" {stamp}", good),
        ("9" * 5000, good),
    ]:
        assert not verify_signature(secret, body, timestamp, signature, now=now)
