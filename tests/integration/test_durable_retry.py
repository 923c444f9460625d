"""Durable retries of a failing model step (runner/core/retry.py).

A transient provider failure that outlasts the in-call retries does not fail
the run and does not keep the execution: the run goes back to ``queued`` with
a not-before time, its attempts and the error; the policy decides when it is
exhausted. The real HTTP path (Retry-After) is tested against a loopback server.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from runner import Agent, Engine
from runner.core.retry import RetryPolicy
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import RunStatus, StepKind, utcnow
from tests.helpers import force_retry_due, unique
from tests.provider import Provider, answer

# Fast enough for a test, slow enough that "not before" is visible.
QUICK = RetryPolicy(initial_backoff=30, max_backoff=60, max_attempts=5, max_elapsed=3600)


class Outage:
    """A scripted model that fails with ``error`` while ``down`` is set."""

    def __init__(self, name: str, error: str = "unavailable") -> None:
        self.down = True
        self.error = error
        self.model = ScriptedModel(name, self.reply)

    def reply(self, request: Request) -> Any:
        if self.down:
            return text("x", error=self.error)
        if request.step == 1:
            return tools(call("lookup", {"q": "crash"}))
        return text(f"done after step {request.step}")


def _agent(name: str, model: ScriptedModel, policy: RetryPolicy | None = QUICK) -> None:
    from tests.agents import lookup

    Agent(name=name, model=model.model, tools=[lookup], retry=policy)


def test_a_transient_failure_queues_the_run_until_its_next_attempt(engine: Engine) -> None:
    name = unique("outage")
    outage = Outage(name)
    _agent(name, outage.model)
    run = engine.start(name)
    before = utcnow()
    left = engine.execute(run.id)

    assert left is not None and left.status is RunStatus.QUEUED
    assert left.claim is None and left.error is None
    assert left.retry is not None and left.retry.attempts == 1
    assert "ServiceUnavailableError" in left.retry.error
    assert left.retry_at is not None
    # The first backoff is 30 s with jitter in its upper half.
    assert before + timedelta(seconds=14) < left.retry_at < utcnow() + timedelta(seconds=31)
    assert engine.get_run(run.id).retry == left.retry
    calls = outage.model.call_count
    assert calls == 3  # the first try and the engine's two in-call retries

    # An early message (a duplicate, an impatient operator) does nothing.
    assert engine.execute(run.id) is None
    assert outage.model.call_count == calls

    outage.down = False
    force_retry_due(engine.store, run.id)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert done.retry is None  # progress cleared the attempts
    llm = [s for s in engine.steps(run.id) if s.kind is StepKind.LLM]
    assert [s.index for s in llm] == [1, 2]


def test_an_exhausted_policy_fails_the_run_with_its_attempts(engine: Engine) -> None:
    name = unique("exhausted")
    outage = Outage(name, error="server_error")
    policy = RetryPolicy(initial_backoff=30, max_backoff=30, max_attempts=3, max_elapsed=None)
    _agent(name, outage.model, policy)
    run = engine.start(name)
    for attempt in (1, 2):
        left = engine.execute(run.id)
        assert left is not None and left.status is RunStatus.QUEUED
        assert left.retry is not None and left.retry.attempts == attempt
        force_retry_due(engine.store, run.id)
    failed = engine.execute(run.id)
    assert failed is not None and failed.status is RunStatus.FAILED
    assert failed.error is not None and failed.error.code == "model_error"
    assert "InternalServerError" in failed.error.message
    assert "gave up after 3 attempt(s)" in failed.error.message
    assert failed.retry is not None and failed.retry.attempts == 3 and failed.retry_at is None
    assert engine.get_run(run.id).retry == failed.retry


def test_max_elapsed_ends_the_retries(engine: Engine) -> None:
    """The next backoff (30 s or more) would end past max_elapsed: no more attempts."""
    name = unique("elapsed")
    outage = Outage(name)
    policy = RetryPolicy(initial_backoff=30, max_backoff=30, max_attempts=None, max_elapsed=10)
    _agent(name, outage.model, policy)
    failed = engine.execute(engine.start(name).id)
    assert failed is not None and failed.status is RunStatus.FAILED
    assert failed.error is not None and "gave up after 1 attempt(s)" in failed.error.message


def test_a_permanent_error_fails_at_once(engine: Engine) -> None:
    name = unique("permanent")
    outage = Outage(name, error="bad_request")
    _agent(name, outage.model)
    failed = engine.execute(engine.start(name).id)
    assert failed is not None and failed.status is RunStatus.FAILED
    assert failed.error is not None and failed.error.code == "model_error"
    assert "BadRequestError" in failed.error.message and "gave up" not in failed.error.message
    assert outage.model.call_count == 1


def test_progress_resets_the_attempts(engine: Engine) -> None:
    """Attempts count failures of the current step: a step that succeeds in
    between starts the count again."""
    name = unique("reset")
    state = {"fail_at": 1}

    def script(request: Request) -> Any:
        if request.step == state["fail_at"]:
            return text("x", error="rate_limit")
        if request.step == 1:
            return tools(call("lookup", {"q": "a"}))
        return text("done")

    model = ScriptedModel(name, script)
    _agent(name, model)
    run = engine.start(name)
    for _ in range(2):
        left = engine.execute(run.id)
        assert left is not None and left.retry is not None
        force_retry_due(engine.store, run.id)
    assert left.retry.attempts == 2
    state["fail_at"] = 2  # step 1 now succeeds, step 2 fails
    left = engine.execute(run.id)
    assert left is not None and left.status is RunStatus.QUEUED
    assert left.retry is not None and left.retry.attempts == 1


def test_a_custom_transient_predicate_decides(engine: Engine) -> None:
    """An agent's policy may count other errors as transient (here: none)."""
    name = unique("predicate")
    outage = Outage(name)
    policy = RetryPolicy(max_attempts=5, transient=lambda exc: False)
    _agent(name, outage.model, policy)
    failed = engine.execute(engine.start(name).id)
    assert failed is not None and failed.status is RunStatus.FAILED
    assert outage.model.call_count == 1  # not even the in-call retries


def test_cancel_while_waiting_to_retry_settles_at_once(engine: Engine) -> None:
    name = unique("cancel-retry")
    outage = Outage(name)
    _agent(name, outage.model)
    run = engine.start(name)
    left = engine.execute(run.id)
    assert left is not None and left.status is RunStatus.QUEUED
    result = engine.cancel(run.id)
    assert result.run.status is RunStatus.CANCELLED
    force_retry_due(engine.store, run.id)
    assert engine.execute(run.id) is None


def test_the_run_is_sent_for_its_retry_time(engine: Engine) -> None:
    """An enqueue callable that takes ``eta`` gets the retry time (tasks.enqueue
    passes it to Celery); one that does not leaves the run to tick()."""
    sent: list[tuple[str, datetime | None]] = []

    def enqueue(run_id: str, *, eta: datetime | None = None) -> None:
        sent.append((run_id, eta))

    timed = Engine(engine.store, leases=engine.leases, settings=engine.settings, enqueue=enqueue)
    name = unique("eta")
    outage = Outage(name)
    _agent(name, outage.model)
    run = timed.start(name)
    assert sent == [(run.id, None)]
    left = timed.execute(run.id)
    assert left is not None and left.retry_at is not None
    assert sent[-1] == (run.id, left.retry_at)

    plain: list[str] = []
    untimed = Engine(
        engine.store, leases=engine.leases, settings=engine.settings, enqueue=plain.append
    )
    other = untimed.start(name)
    assert plain == [other.id]
    left = untimed.execute(other.id)
    assert left is not None and left.retry_at is not None
    assert plain == [other.id]  # nothing sent early: the claim would refuse it
    # tick() sends it once due plus the re-enqueue delay (the lost-message path).
    later = left.retry_at + timedelta(seconds=engine.settings.reenqueue_seconds + 1)
    force_retry_due(engine.store, other.id)
    report = untimed.tick(now=later)
    assert other.id in report.reenqueued and other.id in plain[1:]
    timed.close()
    untimed.close()


# ------------------------------------------------------- the real HTTP path


@pytest.fixture
def provider() -> Any:
    with Provider(lambda step, body: answer("recovered")) as server:
        yield server


def _http_agent(name: str, server: Provider, policy: RetryPolicy) -> None:
    Agent(
        name=name,
        model="openai/loopback",
        model_settings={"api_base": server.base_url, "api_key": "sk-loopback"},
        retry=policy,
    )


def test_retry_after_is_honoured_in_the_call(engine: Engine, provider: Provider) -> None:
    """429 with Retry-After: 3: the next request comes no sooner than 3 s later."""
    name = unique("retry-after")
    _http_agent(name, provider, QUICK)
    provider.fail(429, retry_after=3)
    run = engine.start(name)
    box: dict[str, Any] = {}

    import threading

    thread = threading.Thread(target=lambda: box.update(run=engine.execute(run.id)))
    thread.start()
    deadline = time.monotonic() + 10
    while not provider.answered(429) and time.monotonic() < deadline:
        time.sleep(0.05)
    provider.recover()
    thread.join(30)
    done = box["run"]
    assert done is not None and done.status is RunStatus.COMPLETED
    first_429 = provider.answered(429)[0].at
    first_ok = provider.answered(200)[0].at
    assert first_ok - first_429 >= 3.0


def test_a_long_retry_after_waits_in_the_queue(engine: Engine, provider: Provider) -> None:
    """A pause longer than an in-call retry may wait is taken in the queue: the
    run's next attempt is no sooner than the provider asked."""
    name = unique("long-retry-after")
    _http_agent(name, provider, RetryPolicy(initial_backoff=1, max_backoff=2))
    provider.fail(429, retry_after=120)
    started = utcnow()
    left = engine.execute(engine.start(name).id)
    assert left is not None and left.status is RunStatus.QUEUED
    assert left.retry is not None and "RateLimitError" in left.retry.error
    assert left.retry_at is not None and left.retry_at >= started + timedelta(seconds=119)
    assert len(provider.requests) == 1  # no in-call retry sooner than asked


def test_refused_connections_wait_in_the_queue(engine: Engine, provider: Provider) -> None:
    """A provider that is down (nothing listens) is a transient failure too."""
    name = unique("refused")
    _http_agent(name, provider, QUICK)
    provider.stop()
    assert provider.refusing()
    run = engine.start(name)
    left = engine.execute(run.id)
    assert left is not None and left.status is RunStatus.QUEUED
    assert left.retry is not None and left.retry.attempts == 1
    provider.start()  # the same port again
    force_retry_due(engine.store, run.id)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.output == "recovered"
    assert len(provider.answered(200)) == 1
