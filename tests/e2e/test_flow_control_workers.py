"""Flow control on real ``celery worker``s (issue 51's acceptance): two
processes never take a model past the requests and tokens per minute that
its provider enforces; a parked run holds no worker thread; cancel ends a
parked run at once, and its call is never made; a worker SIGKILLed while runs
are parked loses none and repeats no effect; a provider's 429 to one process
holds back the other's calls until the pause it asked for is over.

Real Postgres, Redis and workers; the agents are tests/agents_flow.py, their
provider the loopback server of tests/provider.py, which counts every
request. A test that needs a limit saturated takes its slot from this
process, as another worker would (``Limiter.acquire``).
"""

from __future__ import annotations

import dataclasses
import importlib
import signal
import time
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis

from runner import Engine, Run
from runner.core.limits import Limiter
from runner.core.limits.limiter import Grant
from runner.core.limits.model_limits import ModelLimit
from store.models import RunStatus
from tests.agents import read_effect_log
from tests.agents_flow import (  # and the agents, which this process starts by name
    BLOCKED,
    EFFECT,
    LIMITS,
    MAX_TOKENS,
    SLOTTED,
    TOKENS,
    TOKENS_RUNS,
    limits_json,
)
from tests.e2e.cluster import Cluster, Proc, completed_by, wait_until
from tests.provider import Provider, Served, answer, tool_calls

AGENTS = "tests.agents,tests.agents_flow"


def _script(step: int, body: dict[str, Any]) -> dict[str, Any]:
    if body.get("model") == EFFECT.removeprefix("openai/") and step == 1:
        return tool_calls(("call_ship", "ship", {"order": "A1"}))
    return answer("done")


@pytest.fixture
def provider() -> Iterator[Provider]:
    importlib.import_module("litellm")  # its token counter, loaded before the first request
    with Provider(_script) as served:
        yield served


@pytest.fixture
def flow(cluster: Cluster, provider: Provider) -> Cluster:
    """The cluster, its workers (and this process's engine) under the limits
    of tests/agents_flow.py, calling the loopback provider."""
    cluster.overrides.update(
        RUNWRIGHT_AGENTS=AGENTS,
        RUNWRIGHT_MODEL_LIMITS=limits_json(),
        RUNWRIGHT_TEST_PROVIDER_URL=provider.base_url,
    )
    return cluster


@pytest.fixture
def engine(flow: Cluster) -> Iterator[Engine]:
    made = flow.engine()
    yield made
    made.close()


@pytest.fixture
def limiter(flow: Cluster) -> Iterator[Limiter]:
    """The limits as another process sees them, in the workers' Redis."""
    client = redis.Redis.from_url(flow.redis_url)
    yield Limiter(client)
    client.close()


def _ended(engine: Engine, run_ids: list[str], timeout: float = 60) -> list[Run]:
    def every() -> list[Run] | None:
        runs = [engine.get_run(run_id) for run_id in run_ids]
        return runs if all(r.status.ended for r in runs) else None

    try:
        found: list[Run] = wait_until(every, timeout, f"{len(run_ids)} runs to end", interval=0.2)
    except AssertionError as exc:
        left = [engine.get_run(run_id) for run_id in run_ids]
        raise AssertionError(
            f"{exc}: "
            + ", ".join(f"{r.status.value} {r.parked_key} {r.parked_until}" for r in left)
        ) from None
    return found


def _parked(engine: Engine, run_id: str, key: str) -> Run:
    found: Run = wait_until(
        lambda: (r := engine.get_run(run_id)).parked_key == key and r,
        30,
        f"run {run_id} to park on {key}",
        interval=0.05,
    )
    return found


def _workers(*started: Proc) -> Proc:
    """Workers started side by side, once each is ready: the last of them."""
    for proc in started:
        proc.wait_for(" ready.", timeout=90)
    return started[-1]


def _logged_completed(worker: Proc, run_ids: list[str]) -> None:
    """``worker`` says it completed the runs (it logs a task's end a moment
    after the run's end is committed)."""
    wait_until(
        lambda: set(run_ids) <= completed_by(worker), 10, f"{worker.name} to log the runs' ends"
    )


def _hold_slot(limiter: Limiter, model: str, seconds: float) -> Grant:
    """Take ``model``'s one slot for ``seconds``, as a call elsewhere would."""
    grant = limiter.acquire(model, ModelLimit(max_concurrent=1), 0, "test", hold_seconds=seconds)
    assert isinstance(grant, Grant), grant
    return grant


def _called(provider: Provider, model: str) -> list[Served]:
    return [r for r in provider.requests if r.body.get("model") == model.removeprefix("openai/")]


def _parked_on(engine: Engine, run_id: str) -> set[str]:
    """The keys the run was parked on, from its events."""
    return {
        e.data["parked_on"]
        for e in engine.events(run_id, timeout=1)
        if e.type.value == "status" and e.data.get("parked_on")
    }


def test_two_workers_together_stay_inside_the_providers_requests_and_tokens_a_minute(
    flow: Cluster, provider: Provider, engine: Engine
) -> None:
    # The provider enforces the limits the workers are given. Each call
    # reserves its prompt and its output cap (MAX_TOKENS): two fit in a
    # minute's 1,000 tokens at once, a third does not, so the calls of 8
    # threads contend for the tokens; each run makes one request, and the
    # minute has exactly as many.
    limit = LIMITS[TOKENS]
    provider.limit(rpm=limit["rpm"], tpm=limit["tpm"])
    provider.latency = 0.3
    _workers(
        flow.worker("w1", concurrency=4, wait=False), flow.worker("w2", concurrency=4, wait=False)
    )
    runs = [engine.start("flow_tokens", {"n": n}).id for n in range(TOKENS_RUNS)]
    done = _ended(engine, runs)
    assert [r.status for r in done] == [RunStatus.COMPLETED] * TOKENS_RUNS, [r.error for r in done]
    assert provider.throttled == 0
    assert provider.limits is not None and provider.limits.overdrawn == 0
    assert len(provider.requests) == TOKENS_RUNS  # one call each, none refused
    assert all(r.body["max_tokens"] == MAX_TOKENS for r in provider.requests)
    # Contended: two calls' reservations fit in the minute's tokens, three
    # do not (the provider would have refused the third), and runs waited
    # for their turn parked, holding no thread.
    reserved = {provider.limits.count(r.body) + MAX_TOKENS for r in provider.requests}
    assert all(2 * each <= limit["tpm"] < 3 * each for each in reserved), reserved
    assert any(_parked_on(engine, run_id) == {TOKENS} for run_id in runs)


def test_a_parked_run_holds_no_thread_and_another_agents_runs_go_meanwhile(
    flow: Cluster, provider: Provider, engine: Engine, limiter: Limiter
) -> None:
    # One thread; a call over its limit parks at once rather than wait in place.
    worker = flow.worker("w1", concurrency=1, RUNWRIGHT_LIMIT_WAIT_SECONDS="0")
    grant = _hold_slot(limiter, SLOTTED, 6)
    parked = _parked(engine, engine.start("flow_slotted").id, SLOTTED)
    assert parked.status is RunStatus.QUEUED and parked.claim is None
    assert parked.parked_until is not None
    others = [engine.start("flow_free", {"n": n}).id for n in range(3)]
    assert [r.status for r in _ended(engine, others)] == [RunStatus.COMPLETED] * 3
    # The worker's one thread served the other agent while the run was parked.
    still = engine.get_run(parked.id)
    assert (still.status, still.parked_key) == (RunStatus.QUEUED, SLOTTED)
    assert datetime.now(UTC) < parked.parked_until
    _logged_completed(worker, others)
    assert _called(provider, SLOTTED) == []
    limiter.release(grant)
    [done] = _ended(engine, [parked.id])
    assert done.status is RunStatus.COMPLETED and done.parked_key is None
    assert len(_called(provider, SLOTTED)) == 1
    _logged_completed(worker, [parked.id])


def test_cancel_ends_a_parked_run_at_once_and_its_call_is_never_made(
    flow: Cluster, provider: Provider, engine: Engine, limiter: Limiter
) -> None:
    worker = flow.worker("w1", concurrency=2, RUNWRIGHT_LIMIT_WAIT_SECONDS="0")
    grant = _hold_slot(limiter, SLOTTED, 4)
    parked = _parked(engine, engine.start("flow_slotted").id, SLOTTED)
    assert parked.parked_until is not None
    assert limiter.state(SLOTTED)["waiters"] == {"-": 1}
    engine.cancel(parked.id)
    cancelled = engine.get_run(parked.id)
    assert cancelled.status is RunStatus.CANCELLED and cancelled.parked_key is None
    assert datetime.now(UTC) < parked.parked_until  # before the time it would have gone
    assert limiter.state(SLOTTED)["waiters"] == {}  # it gave up its turn
    limiter.release(grant)
    # At its parked time its message comes back, and is refused.
    refused = f"run {parked.id} is already cancelled"
    wait_until(lambda: refused in worker.log(), 30, "the parked run's message to be refused")
    # The worker serves the model meanwhile: another run's call goes.
    later = engine.start("flow_slotted").id
    [done] = _ended(engine, [later])
    assert done.status is RunStatus.COMPLETED
    assert len(_called(provider, SLOTTED)) == 1  # the later run's, never the cancelled one's
    assert engine.get_run(parked.id).status is RunStatus.CANCELLED
    assert parked.id not in completed_by(worker)


def test_a_worker_killed_while_runs_are_parked_loses_none_and_repeats_no_effect(
    flow: Cluster, provider: Provider, engine: Engine, limiter: Limiter, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    doomed = flow.worker(
        "w1", concurrency=4, RUNWRIGHT_TEST_FLOW_GATE=str(gate), RUNWRIGHT_LIMIT_WAIT_SECONDS="0.5"
    )
    flow.beat()  # tick() sends the parked runs whose messages died with the worker
    runs = [engine.start("flow_effect", {"n": n}).id for n in range(3)]
    effects = str(flow.workdir / "effects.jsonl")
    # Each run's first step made its call and began its effect, which holds
    # the step until the gate opens; the model's one slot is then taken, so
    # each second step's call parks.
    wait_until(lambda: len(read_effect_log(effects)) == 3, 60, "three effects to begin")
    _hold_slot(limiter, EFFECT, 6)
    gate.touch()
    parked = [_parked(engine, run_id, EFFECT) for run_id in runs]
    assert len(_called(provider, EFFECT)) == 3  # the first steps' calls only
    assert datetime.now(UTC) < min(
        r.parked_until or datetime.min.replace(tzinfo=UTC) for r in parked
    )
    doomed.signal(signal.SIGKILL)  # before any of them may go
    doomed.wait(10)
    flow.worker("w2", concurrency=4, RUNWRIGHT_LIMIT_WAIT_SECONDS="0.5")
    done = _ended(engine, runs, timeout=60)
    assert [r.status for r in done] == [RunStatus.COMPLETED] * 3, [r.error for r in done]
    shipped = [e["key"] for e in read_effect_log(effects) if e["tool"] == "ship"]
    assert sorted(shipped) == sorted(f"{run_id}:call_ship" for run_id in runs)
    # Two calls a run: the first step's, and the parked step's once.
    calls = _called(provider, EFFECT)
    assert sorted(r.step for r in calls) == [1, 1, 1, 2, 2, 2]
    assert all(r.status == 200 for r in calls)


def test_a_429_to_one_worker_holds_back_the_other_workers_calls_until_its_pause_ends(
    flow: Cluster, provider: Provider, engine: Engine, limiter: Limiter
) -> None:
    # Two workers on queues of their own, so that each run goes where the
    # test sends it.
    first = dataclasses.replace(flow, queue="flow-first", procs=[])
    second = dataclasses.replace(flow, queue="flow-second", procs=[])
    other = _workers(
        first.worker("w1", concurrency=2, wait=False),
        second.worker("w2", concurrency=2, wait=False),
    )
    flow.procs += first.procs + second.procs
    provider.fail(429, retry_after=5, times=1)
    with closing(first.engine()) as on_first, closing(second.engine()) as on_second:
        refused = on_first.start("flow_blocked")
        wait_until(lambda: provider.answered(429), 30, "the provider to answer 429")
        back = wait_until(
            lambda: (r := engine.get_run(refused.id)).retry is not None and r,
            30,
            "the refused run to wait for its retry",
        )
        assert back.status is RunStatus.QUEUED
        # This process sees the block too: the limit is shared, not the worker's.
        state = limiter.state(BLOCKED)
        blocked_until = state["blocked_until"]
        assert blocked_until is not None
        assert state["rpm_in_force"] < state["rpm"]
        held = on_second.start("flow_blocked")
        assert time.time() < blocked_until  # it was started during the block
        # The other worker parks it on the block instead of calling.
        assert _parked(engine, held.id, BLOCKED).status is RunStatus.QUEUED
        done = _ended(engine, [refused.id, held.id])
    assert [r.status for r in done] == [RunStatus.COMPLETED] * 2
    _logged_completed(other, [held.id])
    # No request reached the provider during the block: the one refused,
    # then the two after it.
    [refusal, *after] = provider.requests
    assert refusal.status == 429 and [r.status for r in after] == [200, 200]
    assert all(r.at >= blocked_until for r in after)
