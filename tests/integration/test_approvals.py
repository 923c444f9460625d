"""Approvals: wait points, tokens, notifications, decisions, expiry (docs/approvals.md)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import sqlalchemy as sa

from runner import Agent, ApprovalError, ApprovalPolicy, ApprovalRequest, Engine, effect
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from runner.notifiers import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WebhookNotifier,
    verify_signature,
)
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import Decision, RunStatus, StepKind, utcnow
from store.postgres import PostgresStore
from tests.agents import lookup
from tests.helpers import expire_approval, force_status, snapshot


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Inbox:
    """A notifier that records requests, failing the first ``fail`` times."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.attempts: list[ApprovalRequest] = []
        self.accepted: list[ApprovalRequest] = []
        self.lock = threading.Lock()

    def __call__(self, request: ApprovalRequest) -> None:
        with self.lock:
            self.attempts.append(request)
            if len(self.attempts) <= self.fail:
                raise ConnectionError("notification service is down")
            self.accepted.append(request)


class Refunds:
    def __init__(self) -> None:
        self.done: list[tuple[int, str]] = []

    def tool(self) -> Any:
        @effect
        def refund(amount: int, idempotency_key: str) -> dict[str, Any]:
            """Refund money."""
            self.done.append((amount, idempotency_key))
            return {"refunded": amount}

        return refund


@pytest.fixture
def queued() -> list[str]:
    return []


@pytest.fixture
def approvals_engine(
    pg_store: PostgresStore, leases: Leases, settings: Settings, queued: list[str]
) -> Iterator[Engine]:
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=queued.append)
    yield made
    made.close()


def refund_agent(
    *,
    inbox: Inbox | None = None,
    policy: Any = True,
    script: Any = None,
    refunds: Refunds | None = None,
) -> tuple[str, ScriptedModel, Refunds]:
    name = unique("approve")
    refunds = refunds or Refunds()

    def default(request: Request) -> Any:
        if request.step == 1:
            return tools(call("refund", {"amount": 30}))
        return text("finished: " + request.tool_results()[-1]["content"])

    model = ScriptedModel(name, script or default)
    Agent(
        name=name,
        model=model.model,
        tools=[refunds.tool(), lookup],
        approvals={"refund": policy},
        notifier=inbox,
    )
    return name, model, refunds


def test_approve_with_token_resumes_and_runs_the_tool_once(
    approvals_engine: Engine, queued: list[str]
) -> None:
    engine = approvals_engine
    inbox = Inbox()
    name, model, refunds = refund_agent(inbox=inbox)
    run = engine.start(name, {"order": 1})
    queued.clear()
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    assert refunds.done == []
    [approval] = engine.approvals(run.id)
    assert approval.tool_name == "refund" and approval.input == {"amount": 30}
    assert waiting.waiting is not None and waiting.waiting.approval_id == approval.approval_id
    assert [r.approval_id for r in inbox.accepted] == [approval.approval_id]
    token = inbox.accepted[0].token
    assert token == engine.token(approval.approval_id)
    assert engine.get_run(run.id).waiting.notified_at is not None  # type: ignore[union-attr]
    index_before = engine.checkpoint(run.id).step_index  # type: ignore[union-attr]

    resumed = engine.decide(approval.approval_id, True, "looks right", token=token)
    assert resumed.status is RunStatus.QUEUED
    assert queued == [run.id]  # enqueued
    checkpoint = engine.checkpoint(run.id)
    assert checkpoint is not None and checkpoint.step_index == index_before
    assert checkpoint.messages[-1]["role"] == "approval_response"

    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert refunds.done == [(30, f"{run.id}:{approval.tool_call_id}")]
    assert model.call_count == 2  # the resume made no extra model call for step 1
    assert "refunded" in done.output


def test_deny_with_reason_reaches_the_model_and_the_tool_never_runs(
    approvals_engine: Engine,
) -> None:
    engine = approvals_engine
    name, model, refunds = refund_agent()
    run = engine.start(name)
    engine.execute(run.id)
    [approval] = engine.approvals(run.id)
    engine.decide(approval.approval_id, False, "customer already refunded", trusted=True)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert refunds.done == []
    result = model.calls[1].tool_results()[-1]
    assert result["tool_call_id"] == approval.tool_call_id
    assert json.loads(result["content"]) == {
        "error": "denied by a human reviewer",
        "reason": "customer already refunded",
    }
    assert all(
        m["role"] not in ("approval_request", "approval_response") for m in model.calls[1].messages
    )


def test_two_approvals_and_a_plain_call_in_one_step(approvals_engine: Engine) -> None:
    engine = approvals_engine

    def script(request: Request) -> Any:
        if request.step == 1:
            return tools(
                call("refund", {"amount": 1}),
                call("lookup", {"q": "order"}),
                call("refund", {"amount": 2}),
            )
        return text("done")

    name, model, refunds = refund_agent(script=script)
    run = engine.start(name)
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    first, second = engine.approvals(run.id)
    checkpoint = engine.checkpoint(run.id)
    assert checkpoint is not None
    # The plain call ran before the wait; its result is in the checkpoint.
    assert [m["role"] for m in checkpoint.messages] == [
        "user",
        "assistant",
        "tool",
        "approval_request",
        "approval_request",
    ]
    assert [s.name for s in engine.steps(run.id) if s.kind is StepKind.TOOL] == ["lookup"]

    after_first = engine.decide(first.approval_id, True, trusted=True)
    assert after_first.status is RunStatus.WAITING  # one decision is not enough
    assert engine.execute(run.id) is None  # a waiting run is not claimable
    after_second = engine.decide(second.approval_id, False, "too much", trusted=True)
    assert after_second.status is RunStatus.QUEUED
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert refunds.done == [(1, f"{run.id}:{first.tool_call_id}")]
    results = {m["tool_call_id"]: m["content"] for m in model.calls[1].tool_results()}
    assert json.loads(results[first.tool_call_id]) == {"refunded": 1}
    assert json.loads(results[second.tool_call_id])["reason"] == "too much"
    assert model.call_count == 2


def test_bad_responses_raise_and_change_nothing(approvals_engine: Engine) -> None:
    engine = approvals_engine
    store = engine.store
    inbox = Inbox()
    name, _, refunds = refund_agent(
        inbox=inbox,
        script=lambda r: (
            tools(call("refund", {"amount": 1}), call("refund", {"amount": 2}))
            if r.step == 1
            else text("done")
        ),
    )
    run = engine.start(name)
    engine.execute(run.id)
    first, second = engine.approvals(run.id)
    token_first, token_second = inbox.accepted[0].token, inbox.accepted[1].token

    def refused(match: str, *args: Any, **kwargs: Any) -> None:
        before = snapshot(store)
        with pytest.raises(ApprovalError, match=match):
            engine.decide(*args, **kwargs)
        assert snapshot(store) == before

    refused("not valid", first.approval_id, True, token="forged-token")
    refused("not valid", first.approval_id, True, token=token_second)  # another approval's
    refused("token is required", first.approval_id, True)
    refused("no approval", str(uuid.uuid4()), True, trusted=True)
    refused("no approval", "not-an-id", True, trusted=True)

    engine.decide(first.approval_id, True, token=token_first)
    refused("already approved", first.approval_id, False, token=token_first)

    # Expired: move its expiry into the past.
    expire_approval(store, second.approval_id)
    refused("expired", second.approval_id, True, token=token_second)

    engine.cancel(run.id)
    refused("cancelled", second.approval_id, True, token=token_second)
    assert refunds.done == []


def test_notifier_retried_with_backoff_until_accepted(approvals_engine: Engine) -> None:
    engine = approvals_engine
    inbox = Inbox(fail=2)
    name, _, _ = refund_agent(inbox=inbox)
    run = engine.start(name)
    engine.execute(run.id)  # first attempt: fails
    [approval] = engine.approvals(run.id)
    assert len(inbox.attempts) == 1 and approval.notified_at is None
    assert approval.attempts == 1

    now = utcnow()
    assert engine.tick(now=now).notified == 0  # not due yet (backoff 5 s)
    assert len(inbox.attempts) == 1
    second = engine.tick(now=now + timedelta(seconds=6))  # second attempt: fails
    assert second.notify_failed == 1 and len(inbox.attempts) == 2
    assert engine.tick(now=now + timedelta(seconds=7)).notify_failed == 0  # backing off
    assert len(inbox.attempts) == 2
    third = engine.tick(now=now + timedelta(seconds=30))  # third attempt: accepted
    assert third.notified == 1 and len(inbox.attempts) == 3
    [approval] = engine.approvals(run.id)
    assert approval.notified_at is not None and approval.attempts == 3
    engine.tick(now=now + timedelta(hours=1))
    assert len(inbox.attempts) == 3  # nothing after acceptance
    assert inbox.accepted[0].token == engine.token(approval.approval_id)


def test_expiry_denies_and_the_run_goes_on(approvals_engine: Engine, queued: list[str]) -> None:
    engine = approvals_engine
    name, model, refunds = refund_agent(policy=ApprovalPolicy(expires_in=60, on_expire="deny"))
    run = engine.start(name)
    engine.execute(run.id)
    queued.clear()
    assert engine.tick().expired == 0
    report = engine.tick(now=utcnow() + timedelta(seconds=61))
    assert report.expired == 1 and queued == [run.id]
    [approval] = engine.approvals(run.id)
    assert approval.decision is Decision.DENIED and approval.reason == "expired"
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    told = json.loads(model.calls[1].tool_results()[-1]["content"])["error"]
    assert told.startswith("not approved: the approval expired at")
    assert refunds.done == []


def test_expiry_with_fail_policy_fails_the_run(approvals_engine: Engine) -> None:
    engine = approvals_engine
    name, _, _ = refund_agent(policy=ApprovalPolicy(expires_in=60, on_expire="fail"))
    run = engine.start(name)
    engine.execute(run.id)
    engine.tick(now=utcnow() + timedelta(seconds=61))
    failed = engine.get_run(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.error is not None and failed.error.code == "approval_expired"
    [approval] = engine.approvals(run.id)
    assert approval.decision is Decision.WITHDRAWN


def test_executing_a_waiting_run_makes_no_model_call(approvals_engine: Engine) -> None:
    engine = approvals_engine
    name, model, _ = refund_agent()
    run = engine.start(name)
    engine.execute(run.id)
    assert model.call_count == 1
    assert engine.execute(run.id) is None  # e.g. a duplicate task
    assert engine.get_run(run.id).status is RunStatus.WAITING
    # Even if the run were queued again by mistake, the execution re-pauses on the
    # checkpoint's unanswered request without calling the model.
    force_status(engine.store, run.id, RunStatus.QUEUED)
    again = engine.execute(run.id)
    assert again is not None and again.status is RunStatus.WAITING
    assert model.call_count == 1


# The property under test is FOR UPDATE SKIP LOCKED between two processes'
# ticks, and the Redis tick lock.
@pytest.mark.parametrize("with_lock", [True, False])
def test_concurrent_ticks_send_each_notification_once(
    pg_store: PostgresStore, leases: Leases, settings: Settings, with_lock: bool
) -> None:
    inbox = Inbox(fail=0)
    name, _, _ = refund_agent(inbox=None)
    # Several waiting runs whose notifications are due (no notifier at creation).
    creator = Engine(pg_store, leases=leases, settings=settings)
    run_ids = []
    for _ in range(6):
        run = creator.start(name)
        creator.execute(run.id)
        run_ids.append(run.id)
    with pg_store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE approvals SET next_notify_at = now()"))
    from runner import registry

    registry.get(name).notifier = inbox
    engines = [
        Engine(pg_store, leases=leases if with_lock else None, settings=settings) for _ in range(2)
    ]
    barrier = threading.Barrier(2)

    def tick(engine: Engine) -> None:
        barrier.wait()
        engine.tick()

    threads = [threading.Thread(target=tick, args=(e,)) for e in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sent = sorted(r.run_id for r in inbox.attempts)
    assert sent == sorted(run_ids)  # each once


class Receiver:
    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.received: list[tuple[bytes, dict[str, str], bool]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = verify_signature(
                    outer.secret,
                    body,
                    self.headers[TIMESTAMP_HEADER],
                    self.headers[SIGNATURE_HEADER],
                )
                outer.received.append((body, dict(self.headers), ok))
                self.send_response(204 if ok else 401)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/runwright"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_webhook_notifier_signature_verifies(approvals_engine: Engine) -> None:
    engine = approvals_engine
    receiver = Receiver("whsec-test")
    try:
        name, _, _ = refund_agent(inbox=WebhookNotifier(receiver.url, "whsec-test"))  # type: ignore[arg-type]
        run = engine.start(name)
        engine.execute(run.id)
        [approval] = engine.approvals(run.id)
        assert approval.notified_at is not None  # 204: accepted
        [(body, headers, ok)] = receiver.received
        assert ok
        payload = json.loads(body)
        assert payload["approval_id"] == approval.approval_id
        assert payload["token"] == engine.token(approval.approval_id)
        assert payload["tool_name"] == "refund" and payload["input"] == {"amount": 30}
        assert not verify_signature(
            "wrong-secret", body, headers[TIMESTAMP_HEADER], headers[SIGNATURE_HEADER]
        )
        assert not verify_signature(
            "whsec-test", body + b" ", headers[TIMESTAMP_HEADER], headers[SIGNATURE_HEADER]
        )

        # A receiver that refuses (wrong secret): not accepted, so tick re-sends.
        other = Receiver("another-secret")
        try:
            name2, _, _ = refund_agent(inbox=WebhookNotifier(other.url, "whsec-test"))  # type: ignore[arg-type]
            run2 = engine.start(name2)
            engine.execute(run2.id)
            [pending] = engine.approvals(run2.id)
            assert pending.notified_at is None and pending.attempts == 1
        finally:
            other.close()
    finally:
        receiver.close()
