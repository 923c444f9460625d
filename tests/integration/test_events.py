"""The run-event feed in one process: Postgres, with wake-ups through Redis
pub/sub. Real workers, takeovers and SSE are in tests/e2e/test_live.py."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import runner
from runner import Agent, Engine, tool
from runner.core.errors import InvalidInput, RunNotFound
from runner.core.events import eventstream
from runner.core.events.eventstream import EventStream
from runner.testing import Request, ScriptedModel, call, text, tools
from store.events import EventType, RunEvent
from store.models import Decision, RunStatus
from store.postgres import PostgresStore
from tests.helpers import SAFETY_NET, StreamClock, joined, unique, wait_for


@tool
def look(n: int) -> str:
    """Look something up."""
    return f"seen {n}"


def stepping_agent(steps: int, *, approve: bool = False, delay: float = 0.0) -> str:
    """An agent whose model calls ``look`` ``steps`` times, then answers."""
    name = unique("events")

    def script(request: Request) -> Any:
        if delay:
            time.sleep(delay)
        if request.step <= steps:
            return tools(call("look", {"n": request.step}))
        return text(f"done after {steps}")

    model = ScriptedModel(name, script)
    Agent(name=name, model=model.model, tools=[look], approvals={"look": True} if approve else {})
    return name


def follow(stream: EventStream) -> tuple[threading.Thread, list[RunEvent]]:
    got: list[RunEvent] = []

    def read() -> None:
        got.extend(stream)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader, got


def durable(events: list[RunEvent]) -> list[tuple[int | None, EventType]]:
    return [(e.id, e.type) for e in events if e.durable]


def test_a_live_reader_gets_every_event_once_in_order(engine: Engine) -> None:
    run = engine.start(stepping_agent(4, delay=0.02))
    reader, got = follow(engine.events(run.id, timeout=30))
    time.sleep(0.2)  # the reader is following live before the run starts
    finished = engine.execute(run.id)
    reader.join(10)
    assert finished is not None and finished.status is RunStatus.COMPLETED
    assert not reader.is_alive()
    stored = engine.store.events(run.id)
    assert durable(got) == durable(stored)
    ids = [e.id for e in got]
    assert ids == sorted(set(ids))  # type: ignore[type-var]
    kinds = [e.data.get("kind") for e in got if e.type is EventType.STEP]
    assert kinds.count("llm") == 5 and kinds.count("tool") == 4
    assert got[-1].status is RunStatus.COMPLETED
    assert [e.status for e in got if e.type is EventType.STATUS] == [
        RunStatus.QUEUED,
        RunStatus.RUNNING,
        RunStatus.COMPLETED,
    ]


def test_a_reader_resumes_after_its_last_id_with_no_gap_and_no_duplicate(engine: Engine) -> None:
    run = engine.start(stepping_agent(3))
    engine.execute(run.id)
    everything = list(engine.events(run.id, timeout=5))
    assert everything[-1].ends
    for cut in range(len(everything)):
        last = everything[cut].id
        rest = list(engine.events(run.id, after=last, timeout=5))
        assert durable(everything[: cut + 1] + rest) == durable(everything)


def test_async_iteration_gets_the_same_events(engine: Engine) -> None:
    run = engine.start(stepping_agent(2))

    async def both() -> list[RunEvent]:
        async def read() -> list[RunEvent]:
            return [e async for e in engine.events(run.id, timeout=30)]

        reading = asyncio.create_task(read())
        await asyncio.sleep(0.2)
        await engine.execute_async(run.id)
        return await asyncio.wait_for(reading, 10)

    got = asyncio.run(both())
    assert durable(got) == durable(engine.store.events(run.id))
    assert got[-1].status is RunStatus.COMPLETED


def test_wait_returns_when_the_run_settles(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """wait() hears the settling commit: its clock never reaches its timeout
    and its resync is put past the test's life, so nothing else could end it."""
    clock = StreamClock()
    monkeypatch.setattr(eventstream, "time", clock)
    monkeypatch.setattr(eventstream, "RESYNC_SECONDS", 100 * SAFETY_NET)
    run = engine.start(stepping_agent(2, delay=0.05))
    waited: list[Any] = []
    waiter = threading.Thread(
        target=lambda: waited.append(engine.wait(run.id, timeout=1)), daemon=True
    )
    waiter.start()
    wait_for(lambda: clock.reads >= 2, what="the wait's first wait")  # it read the run before
    worker = threading.Thread(target=engine.execute, args=(run.id,))
    worker.start()
    joined(worker, "the execution never ended")
    joined(waiter, "wait() did not hear the run settle")
    assert waited[0].status is RunStatus.COMPLETED


def test_wait_on_a_waiting_run_returns_at_its_timeout(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timeout ends the wait once the clock passes it, not before, with
    the run as it is then."""
    run = engine.start(stepping_agent(1, approve=True))
    engine.execute(run.id)
    clock = StreamClock()
    monkeypatch.setattr(eventstream, "time", clock)
    waited: list[Any] = []
    waiter = threading.Thread(
        target=lambda: waited.append(engine.wait(run.id, timeout=1)), daemon=True
    )
    waiter.start()
    wait_for(lambda: clock.reads >= 2, what="the wait's deadline and its first wait")
    clock.now = 0.9
    clock.read_again()
    assert waiter.is_alive(), "the wait ended before its timeout"
    clock.now = 1.0
    joined(waiter, "the wait went on past its timeout")
    assert waited[0].status is RunStatus.WAITING
    monkeypatch.undo()
    assert engine.wait(run.id, until="waiting").status is RunStatus.WAITING  # at once


def test_wait_until_waiting_stops_at_the_approval(engine: Engine) -> None:
    run = engine.start(stepping_agent(1, approve=True, delay=0.05))
    worker = threading.Thread(target=engine.execute, args=(run.id,))
    worker.start()
    paused = engine.wait(run.id, timeout=30, until="waiting")
    worker.join(10)
    assert paused.status is RunStatus.WAITING and paused.waiting is not None
    events = engine.store.events(run.id)
    requested = [e for e in events if e.type is EventType.APPROVAL]
    assert requested and requested[0].data["action"] == "requested"
    assert requested[0].data["approval_id"] == paused.waiting.approval_id


def test_a_settled_run_replays_and_ends(engine: Engine) -> None:
    run = engine.start(stepping_agent(1))
    engine.execute(run.id)
    events: list[RunEvent] = []
    reader = threading.Thread(target=lambda: events.extend(engine.events(run.id)), daemon=True)
    reader.start()
    joined(reader, "the events of an ended run did not end")  # no timeout: it ends by itself
    assert events[-1].ends
    last = events[-1].id
    assert list(engine.events(run.id, after=last)) == []


def test_bad_input_gets_one_clear_error(engine: Engine) -> None:
    with pytest.raises(RunNotFound):
        engine.events("not-a-run")
    with pytest.raises(RunNotFound):
        list(engine.events("0190a8f2-0000-7000-8000-000000000000", timeout=1))
    with pytest.raises(InvalidInput, match="until"):
        engine.wait("0190a8f2-0000-7000-8000-000000000000", until="sleeping")
    with pytest.raises(RunNotFound):
        engine.wait("0190a8f2-0000-7000-8000-000000000000", timeout=0.1)
    run = engine.start(stepping_agent(1))
    for after in (-1, 2**63, 1.5, "7", True):
        with pytest.raises(InvalidInput, match="after must be an event id"):
            engine.events(run.id, after=after)  # type: ignore[arg-type]
    for timeout in (-1, float("nan"), float("inf"), "1"):
        with pytest.raises(InvalidInput, match="timeout must be"):
            engine.wait(run.id, timeout=timeout)  # type: ignore[arg-type]
    assert engine.get_run(run.id).status is RunStatus.QUEUED  # nothing changed


def test_token_deltas_of_an_older_epoch_are_dropped(engine: Engine) -> None:
    run = engine.start(stepping_agent(1, approve=True))
    engine.execute(run.id)  # epoch 1, now waiting
    stream = engine.events(run.id, timeout=2, until="completed")
    reader, got = follow(stream)
    time.sleep(0.3)
    feed = engine.deps.feed
    feed.token(run.id, {"epoch": 2, "step": 2, "attempt": 1, "n": 0, "text": "new "})
    feed.token(run.id, {"epoch": 1, "step": 2, "attempt": 1, "n": 5, "text": "stale"})
    feed.token(run.id, {"epoch": 2, "step": 2, "attempt": 1, "n": 1, "text": "owner"})
    feed.token(run.id, {"nonsense": True})
    reader.join(5)
    texts = [e.data["text"] for e in got if e.type is EventType.TOKEN]
    assert texts == ["new ", "owner"]


def _decide(store: PostgresStore, run_id: str) -> None:
    waiting = store.get_run(run_id).waiting
    assert waiting is not None
    response = {"role": "approval_response", "approval_id": waiting.approval_id}
    store.decide(waiting.approval_id, Decision.APPROVED, "ok", lambda _: response)


def _decide_quietly(engine: Engine, run_id: str) -> None:
    """Approve the run's pending approval through a store of its own, which
    no feed listens to: committed, but nobody is woken (as when a process
    dies between commit and publish)."""
    _decide(PostgresStore(engine.store.engine), run_id)


def _follow_waiting(engine: Engine) -> tuple[str, threading.Thread, list[RunEvent]]:
    run = engine.start(stepping_agent(1, approve=True))
    engine.execute(run.id)
    reader, got = follow(engine.events(run.id, timeout=20, until="queued"))
    wait_until(lambda: any(e.status is RunStatus.WAITING for e in got), 10)
    return run.id, reader, got


def wait_until(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def only_woken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Streams end only when something wakes them: their clock never reaches
    their timeout, and their resync is put past the test's life."""
    monkeypatch.setattr(eventstream, "time", StreamClock())
    monkeypatch.setattr(eventstream, "RESYNC_SECONDS", 100 * SAFETY_NET)


def test_a_write_through_engine_store_wakes_the_followers(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``engine.store`` is no way around the live wake-ups: the store itself
    wakes the feed after the commit, whoever called it."""
    only_woken(monkeypatch)
    run_id, reader, got = _follow_waiting(engine)
    _decide(engine.store, run_id)
    joined(reader, "the decision did not wake the follower")
    assert got[-1].status is RunStatus.QUEUED


def test_a_missed_wake_up_is_caught_by_the_resync(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(eventstream, "RESYNC_SECONDS", 0.5)
    run_id, reader, got = _follow_waiting(engine)
    _decide_quietly(engine, run_id)
    reader.join(10)
    assert not reader.is_alive()
    assert got[-1].status is RunStatus.QUEUED
    assert durable(got) == durable(engine.store.events(run_id))


def test_a_reader_catches_up_after_redis_drops_its_subscription(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    only_woken(monkeypatch)
    run_id, reader, got = _follow_waiting(engine)
    _decide_quietly(engine, run_id)  # committed while nobody would hear it
    assert engine.leases is not None
    killed = engine.leases.redis.client_kill_filter(_type="pubsub")
    assert killed >= 1
    joined(reader, "the reconnect did not make the reader read")
    assert got[-1].status is RunStatus.QUEUED
    assert durable(got) == durable(engine.store.events(run_id))


def test_wait_for_uses_the_default_engine(engine: Engine) -> None:
    run = engine.start(stepping_agent(1))
    engine.execute(run.id)
    runner.set_default_engine(engine)
    try:
        assert runner.wait_for(run.id, timeout=5).status is RunStatus.COMPLETED
    finally:
        runner.set_default_engine(None)
