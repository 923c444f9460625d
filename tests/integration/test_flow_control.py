"""Flow control in an execution (docs/flow-control.md): a model call takes its
model's limit in Redis first; a call that cannot go soon parks its run
(queued, no lease, no worker) until it may; a provider's 429 lowers the limit
for every process; a call larger than a minute's tokens fails at once.

Real Postgres, real Redis, litellm's OpenAI path against the loopback provider
(tests/provider.py), which counts every request it is sent.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runner import Agent, Engine, InvalidInput, RunStatus
from runner.core.coordination.leases import Leases
from runner.core.limits import Limiter
from runner.core.settings import Settings
from store.postgres import PostgresStore
from tests.provider import Provider, answer


@pytest.fixture
def provider() -> Iterator[Provider]:
    with Provider(lambda step, body: answer("done")) as served:
        yield served


def _engine(
    pg_store: PostgresStore, leases: Leases, model: str, limit: dict[str, int], **more: Any
) -> Engine:
    settings = Settings(
        lease_ttl_seconds=3,
        secret_key="test:test-secret-for-runwright-tests-only",
        model_limits=json.dumps({model: limit}),
        **more,
    )
    return Engine(pg_store, leases=leases, settings=settings, model_retries=0)


def _agent(provider: Provider, **more: Any) -> tuple[str, str]:
    name = f"flow-{uuid.uuid4().hex[:8]}"
    model = f"openai/{name}"
    Agent(
        name=name,
        model=model,
        model_settings={"api_base": provider.base_url, "api_key": "sk-loopback"},
        **more,
    )
    return name, model


def test_a_call_over_its_limit_parks_the_run_and_makes_no_call(
    pg_store: PostgresStore, leases: Leases, provider: Provider
) -> None:
    name, model = _agent(provider)
    engine = _engine(pg_store, leases, model, {"rpm": 1})
    try:
        first = engine.execute(engine.start(name, {"n": 1}).id)
        assert first is not None and first.status is RunStatus.COMPLETED
        began = datetime.now(UTC)
        parked = engine.execute(engine.start(name, {"n": 2}).id)
        assert parked is not None and parked.status is RunStatus.QUEUED
        assert parked.parked_key == model and parked.claim is None
        assert parked.parked_until is not None
        # Within the minute of the first call, and not at once.
        assert began + timedelta(seconds=30) < parked.parked_until
        assert parked.parked_until < began + timedelta(seconds=61)
        assert len(provider.requests) == 1  # the parked run's call never went out
        assert parked.steps_used == 0
        events = [e for e in engine.events(parked.id, timeout=0.5) if e.type.value == "status"]
        assert events[-1].data["status"] == "queued" and events[-1].data["parked_on"] == model
        # It cannot be executed before its time: nothing is claimed, nothing sent.
        assert engine.execute(parked.id) is None
        assert len(provider.requests) == 1
        # A cancel reaches the parked run at once.
        engine.cancel(parked.id)
        done = engine.get_run(parked.id)
        assert done.status is RunStatus.CANCELLED and done.parked_key is None
    finally:
        engine.close()


def test_a_parked_run_goes_when_its_limit_lets_it(
    pg_store: PostgresStore, leases: Leases, provider: Provider
) -> None:
    """The run comes back at its time, makes its call once, and completes."""
    name, model = _agent(provider)
    engine = _engine(pg_store, leases, model, {"max_concurrent": 1}, limit_wait_seconds=0.0)
    holder = Limiter(leases.redis)
    from runner.core.limits import ModelLimit

    # Another process holds the one slot for a moment.
    held = holder.acquire(model, ModelLimit(max_concurrent=1), 10, "elsewhere", hold_seconds=1)
    try:
        run = engine.start(name)
        parked = engine.execute(run.id)
        assert parked is not None and parked.status is RunStatus.QUEUED, parked
        assert parked.parked_key == model and len(provider.requests) == 0
        assert parked.parked_until is not None
        deadline = time.monotonic() + 15
        done = parked
        while done.status is not RunStatus.COMPLETED and time.monotonic() < deadline:
            time.sleep(0.2)
            done = engine.execute(run.id) or engine.get_run(run.id)
        assert done.status is RunStatus.COMPLETED, done
        assert len(provider.requests) == 1
        assert held is not None
    finally:
        engine.close()


def test_a_call_that_can_go_soon_waits_in_place(
    pg_store: PostgresStore, leases: Leases, provider: Provider
) -> None:
    """Two runs of one model with one slot at once: the second waits for the
    first's call in place (well within the short wait) instead of parking."""
    name, model = _agent(provider)
    engine = _engine(pg_store, leases, model, {"max_concurrent": 1}, limit_wait_seconds=5.0)
    provider.latency = 0.4
    try:
        runs = [engine.start(name, {"n": n}).id for n in range(2)]
        results: dict[str, Any] = {}

        def execute(run_id: str) -> None:
            results[run_id] = engine.execute(run_id)

        threads = [threading.Thread(target=execute, args=(run_id,)) for run_id in runs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert [results[r].status for r in runs] == [RunStatus.COMPLETED] * 2
        assert all(engine.get_run(r).parked_key is None for r in runs)
        # One at a time: the provider never had two calls in flight.
        starts = sorted(r.at for r in provider.requests)
        assert len(starts) == 2 and starts[1] - starts[0] >= 0.35
    finally:
        engine.close()


def test_a_429_lowers_the_limit_that_another_process_sees(
    pg_store: PostgresStore, leases: Leases, provider: Provider
) -> None:
    name, model = _agent(provider)
    engine = _engine(pg_store, leases, model, {"rpm": 600})
    provider.fail(429, retry_after=7, times=1)
    try:
        run = engine.start(name)
        before = datetime.now(UTC)
        back = engine.execute(run.id)
        after = datetime.now(UTC)
        assert back is not None and back.status is RunStatus.QUEUED
        assert back.retry is not None and back.retry.at is not None
        # The retry waits on the shared limit: what the provider asked for
        # (7 s), not the policy's own backoff.
        asked = timedelta(seconds=7)
        assert before + asked <= back.retry.at <= after + asked
        other = Limiter(leases.redis)  # another process's client
        from runner.core.limits import Grant, ModelLimit

        denied = other.acquire(model, ModelLimit(rpm=600), 1, "other")
        assert not isinstance(denied, Grant) and denied.reason.value == "blocked"
        assert denied.retry_after <= 7  # blocked until the time the provider named
        assert denied.at + denied.retry_after >= before.timestamp() + 7
        assert len(provider.requests) == 1  # the 429 was not retried in the call
    finally:
        engine.close()


def test_a_call_larger_than_a_minute_of_tokens_fails_at_its_first_step(
    pg_store: PostgresStore, leases: Leases, provider: Provider
) -> None:
    name, model = _agent(provider)
    engine = _engine(pg_store, leases, model, {"tpm": 50})
    try:
        done = engine.execute(engine.start(name, {"text": "x" * 400}).id)
        assert done is not None and done.status is RunStatus.FAILED
        assert done.error is not None and done.error.code == "call_too_large"
        assert "50" in done.error.message
        assert provider.requests == []
    finally:
        engine.close()


def test_a_tenant_function_that_fails_is_one_clear_error_and_no_run(
    engine: Engine, provider: Provider
) -> None:
    def broken(trigger: Any) -> str:
        raise KeyError("org")

    raising, _ = _agent(provider, tenant=broken)
    with pytest.raises(InvalidInput, match="tenant function raised KeyError"):
        engine.start(raising, id="t-raise")
    numbered, _ = _agent(provider, tenant=lambda trigger: 7)
    with pytest.raises(InvalidInput, match="must return a string or None, not int"):
        engine.start(numbered, id="t-int")
    with pytest.raises(InvalidInput, match="tenant must be a function"):
        Agent(name=f"flow-{uuid.uuid4().hex[:8]}", model="openai/x", tenant="org")  # type: ignore[arg-type]
    assert (
        engine.store.list_runs(agent=raising) == [] and engine.store.list_runs(agent=numbered) == []
    )


def test_tenant_and_priority_are_the_run_s(engine: Engine, provider: Provider) -> None:
    name, _ = _agent(provider, tenant=lambda trigger: trigger.keys.get("org"))
    run = engine.start(name, keys={"org": "acme"}, priority=7)
    assert (run.tenant, run.priority) == ("acme", 7)
    with pytest.raises(InvalidInput, match="priority"):
        engine.start(name, id="p-high", priority=10)


def _at_once(engine: Engine, run_ids: list[str]) -> dict[str, Any]:
    results: dict[str, Any] = {}

    def execute(run_id: str) -> None:
        results[run_id] = engine.execute(run_id)

    threads = [threading.Thread(target=execute, args=(run_id,)) for run_id in run_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def _most_in_flight(provider: Provider) -> int:
    """The most calls the provider held at once (each for its latency)."""
    edges = sorted(
        [(r.at - provider.latency, 1) for r in provider.requests]
        + [(r.at, -1) for r in provider.requests]
    )
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_max_running_parks_the_run_over_it_and_its_end_wakes_it(
    pg_store: PostgresStore, leases: Leases, provider: Provider
) -> None:
    from runner import Concurrency  # noqa: F401  (the public name exists)

    name, model = _agent(provider, max_running=1)
    engine = _engine(pg_store, leases, model, {"rpm": 1000}, limit_wait_seconds=0.0)
    provider.latency = 0.5
    try:
        runs = [engine.start(name, {"n": n}).id for n in range(2)]
        results = _at_once(engine, runs)
        statuses = sorted(results[r].status.value for r in runs)
        assert statuses == ["completed", "queued"], statuses
        parked = next(results[r] for r in runs if results[r].status is RunStatus.QUEUED)
        assert parked.parked_key == f"agent:{name}" and len(provider.requests) == 1
        # The first run's end gave back its slot and woke the parked one:
        # claimable now, not at the end of its park.
        woken = engine.get_run(parked.id)
        assert woken.parked_until is not None
        assert woken.parked_until <= datetime.now(UTC) + timedelta(seconds=1)
        done = engine.execute(parked.id)
        assert done is not None and done.status is RunStatus.COMPLETED
        assert len(provider.requests) == 2
    finally:
        engine.close()


def test_a_concurrency_limit_of_two_runs_two_of_a_key_at_once(
    pg_store: PostgresStore, leases: Leases, provider: Provider
) -> None:
    from runner import Concurrency

    name, model = _agent(
        provider, concurrency=Concurrency(key=lambda t: t.keys.get("org"), limit=2)
    )
    engine = _engine(pg_store, leases, model, {"rpm": 1000}, limit_wait_seconds=10.0)
    provider.latency = 0.5
    try:
        runs = [engine.start(name, {"n": n}, keys={"org": "acme"}).id for n in range(4)]
        results = _at_once(engine, runs)
        assert [results[r].status for r in runs] == [RunStatus.COMPLETED] * 4
        assert _most_in_flight(provider) == 2
        # Another key is not held back by acme's: its run goes at once.
        other = engine.execute(engine.start(name, keys={"org": "globex"}).id)
        assert other is not None and other.status is RunStatus.COMPLETED
    finally:
        engine.close()


def test_bad_concurrency_declarations_are_one_clear_error(provider: Provider) -> None:
    from runner import Concurrency

    with pytest.raises(InvalidInput, match="limit must be a whole number of 1 or more"):
        Concurrency(key=lambda t: "k", limit=0)
    with pytest.raises(InvalidInput, match="max_running must be a whole number"):
        _agent(provider, max_running=0)
    with pytest.raises(InvalidInput, match="not both"):
        _agent(
            provider,
            concurrency=Concurrency(key=lambda t: "k", limit=2),
            concurrency_key=lambda t: "k",
        )


def test_a_run_s_priority_goes_to_an_enqueue_that_takes_it(
    pg_store: PostgresStore, provider: Provider
) -> None:
    name, _ = _agent(provider)
    sent: list[tuple[str, int | None]] = []

    def enqueue(run_id: str, *, priority: int | None = None) -> None:
        sent.append((run_id, priority))

    engine = Engine(pg_store, enqueue=enqueue)
    try:
        urgent = engine.start(name, {"n": 1}, priority=9)
        plain = engine.start(name, {"n": 2})
        assert sent == [(urgent.id, 9), (plain.id, 0)]
        # An enqueue that takes no priority is called as before.
        bare: list[str] = []
        other = Engine(pg_store, enqueue=bare.append)
        try:
            other.start(name, {"n": 3})
        finally:
            other.close()
        assert len(bare) == 1
    finally:
        engine.close()


def test_the_provider_s_headers_lower_the_limit_before_it_answers_429(
    pg_store: PostgresStore, leases: Leases, provider: Provider
) -> None:
    """Runwright was told 100 requests a minute; the provider allows 2 and
    says so in its x-ratelimit-* headers. After its second answer says none
    remain, the third call parks instead of drawing a 429."""
    name, model = _agent(provider)
    provider.limit(rpm=2, count=lambda body: 10)
    engine = _engine(pg_store, leases, model, {"rpm": 100}, limit_wait_seconds=0.0)
    try:
        for n in range(2):
            done = engine.execute(engine.start(name, {"n": n}).id)
            assert done is not None and done.status is RunStatus.COMPLETED
        third = engine.execute(engine.start(name, {"n": 3}).id)
        assert third is not None and third.status is RunStatus.QUEUED
        assert third.parked_key == model
        assert provider.throttled == 0 and len(provider.requests) == 2
    finally:
        engine.close()


def test_a_run_refused_its_turn_wakes_the_parked_run_whose_turn_it_is(
    pg_store: PostgresStore, leases: Leases, provider: Provider
) -> None:
    """The head of the line is parked and the limit has room again, but no
    call is in flight whose end would wake it. The next run refused for its
    turn parks (holding no thread) and wakes the head, which goes at once;
    its end wakes the other. Without that, every thread spins on refusals
    while the head waits for its time (bench/flow.py saw admission stall)."""
    from runner.core.limits import ModelLimit

    name, model = _agent(provider)
    engine = _engine(pg_store, leases, model, {"max_concurrent": 1}, limit_wait_seconds=0.0)
    elsewhere = Limiter(leases.redis)
    held = elsewhere.acquire(model, ModelLimit(max_concurrent=1), 10, "elsewhere")
    try:
        head = engine.execute(engine.start(name, {"n": 1}).id)
        assert head is not None and head.status is RunStatus.QUEUED and head.parked_key == model
        assert head.parked_until is not None
        assert head.parked_until > datetime.now(UTC) + timedelta(seconds=60)  # the hold's end
        elsewhere.release(held)  # room again, and nobody to say so
        second = engine.execute(engine.start(name, {"n": 2}).id)
        assert second is not None and second.status is RunStatus.QUEUED
        assert second.parked_key == model and len(provider.requests) == 0
        woken = engine.get_run(head.id)
        assert woken.parked_until is not None
        assert woken.parked_until <= datetime.now(UTC) + timedelta(seconds=1)
        done = engine.execute(head.id)
        assert done is not None and done.status is RunStatus.COMPLETED
        # The head's end woke the second run: claimable now, not in 5 s.
        after = engine.get_run(second.id)
        assert after.parked_until is not None
        assert after.parked_until <= datetime.now(UTC) + timedelta(seconds=1)
        finished = engine.execute(second.id)
        assert finished is not None and finished.status is RunStatus.COMPLETED
        assert len(provider.requests) == 2
    finally:
        engine.close()
