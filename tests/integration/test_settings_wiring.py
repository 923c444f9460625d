"""Settings that used to be parsed and never used, or settable only through
the ``Engine`` constructor, now reach the engine (issue 10, item 7)."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from runner import Agent, ApprovalPolicy, Engine, RetryPolicy
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from runner.testing import Reply, ScriptedModel, call, text, tools
from store.models import RunStatus
from store.postgres import PostgresStore
from tests.agents import charge


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_approval_expiry_defaults_to_the_setting(
    pg_store: PostgresStore, leases: Leases, settings: Settings
) -> None:
    made = Engine(pg_store, leases=leases, settings=replace(settings, approval_expires_seconds=120))
    name = unique("expiry")
    model = ScriptedModel(
        name, [tools(call("charge", {"amount": 1}), call("charge", {"amount": 2}))]
    )
    Agent(
        name=name,
        model=model.model,
        tools=[charge],
        approvals={"charge": ApprovalPolicy(when=lambda a: a["amount"] == 1)},
    )
    other = unique("expiry-explicit")
    Agent(
        name=other,
        model=ScriptedModel(other, [tools(call("charge", {"amount": 1}))]).model,
        tools=[charge],
        approvals={"charge": ApprovalPolicy(expires_in=30)},
    )
    try:
        for agent, seconds in ((name, 120), (other, 30)):
            waiting = made.execute(made.start(agent).id)
            assert waiting is not None and waiting.status is RunStatus.WAITING
            [approval] = made.approvals(waiting.id)
            lifetime = (approval.expires_at - approval.created_at).total_seconds()
            assert lifetime == pytest.approx(seconds, abs=2)
    finally:
        made.close()


def flaky(name: str) -> ScriptedModel:
    """A provider that fails once with a transient error, then answers."""
    model = ScriptedModel(name, [text("ok")])
    model.script = lambda r: Reply(error="unavailable") if model.call_count == 1 else text("ok")
    return model


@pytest.mark.parametrize(
    ("env_retries", "agent_retries", "status"),
    [
        # Not retried in the call: the run waits in the queue to retry durably.
        ("0", None, RunStatus.QUEUED),
        ("2", None, RunStatus.COMPLETED),
        ("0", 2, RunStatus.COMPLETED),
        ("2", 0, RunStatus.QUEUED),
    ],
)
def test_model_retries_come_from_the_environment_or_the_agent(
    database_url: str,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    env_retries: str,
    agent_retries: int | None,
    status: RunStatus,
) -> None:
    monkeypatch.setenv("RUNWRIGHT_DATABASE_URL", database_url)
    monkeypatch.setenv("RUNWRIGHT_REDIS_URL", redis_url)
    monkeypatch.setenv("RUNWRIGHT_SECRET_KEY", "test:" + "s" * 40)
    monkeypatch.setenv("RUNWRIGHT_MODEL_RETRIES", env_retries)
    monkeypatch.setenv("RUNWRIGHT_MODEL_BACKOFF_SECONDS", "0.01")
    made = Engine.from_env(enqueue=None)
    name = unique("retries")
    policy = None if agent_retries is None else RetryPolicy(in_call_retries=agent_retries)
    Agent(name=name, model=flaky(name).model, retry=policy)
    try:
        done = made.execute(made.start(name).id)
        assert done is not None and done.status is status, done and done.error
    finally:
        made.close()


def test_the_durable_retry_policy_comes_from_the_environment(
    database_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RUNWRIGHT_RETRY_MAX_ATTEMPTS=1: a failed step is not retried later."""
    monkeypatch.setenv("RUNWRIGHT_DATABASE_URL", database_url)
    monkeypatch.setenv("RUNWRIGHT_REDIS_URL", redis_url)
    monkeypatch.setenv("RUNWRIGHT_SECRET_KEY", "test:" + "s" * 40)
    monkeypatch.setenv("RUNWRIGHT_MODEL_RETRIES", "0")
    monkeypatch.setenv("RUNWRIGHT_RETRY_MAX_ATTEMPTS", "1")
    made = Engine.from_env(enqueue=None)
    assert made.deps.retry_policy.max_attempts == 1
    name = unique("no-retries")
    Agent(name=name, model=flaky(name).model)
    try:
        done = made.execute(made.start(name).id)
        assert done is not None and done.status is RunStatus.FAILED
        assert done.error is not None and "gave up after 1 attempt(s)" in done.error.message
    finally:
        made.close()
