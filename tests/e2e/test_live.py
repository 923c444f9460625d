"""The run-event feed with real ``celery worker`` processes (issue 14's
acceptance 1 and 3): a reader that follows a run through a SIGKILL and a
takeover, reconnecting with its last id, misses nothing and sees nothing
twice; ``wait()`` hears the settling commit at once; ``runwright watch``
follows a run to its end without polling."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import tests.agents_live  # noqa: F401  (the agents the workers run, known here too)
from runner.core.events import eventstream
from store.events import EventType, RunEvent
from store.models import RunStatus
from tests.e2e.clirun import RUNWRIGHT
from tests.e2e.cluster import Cluster, wait_until
from tests.e2e.test_faults import owner_pid, worker_of
from tests.helpers import SAFETY_NET, StreamClock, finishes, joined, wait_for
from tests.provider import Provider, answer, tool_calls

STREAMED = "Found it: the cache key ignores the lockfile, so the stale cache wins."


def _ids(events: list[RunEvent]) -> list[int]:
    return [e.id for e in events if e.id is not None]


def test_a_reader_misses_nothing_through_a_sigkill_and_a_reconnect(cluster: Cluster) -> None:
    workers = [cluster.worker("w1"), cluster.worker("w2")]
    cluster.beat()
    engine = cluster.engine()
    run = engine.start("steady", {"steps": 10, "latency": 0.3})

    first: list[RunEvent] = []
    second: list[RunEvent] = []
    killed: list[int] = []

    def read() -> None:
        # The first connection: until the run is running under its first
        # execution and two steps are in; then the reader "disconnects".
        for event in engine.events(run.id, timeout=90):
            first.append(event)
            if sum(1 for e in first if e.type is EventType.STEP and e.data["kind"] == "tool") >= 2:
                break
        # Meanwhile the worker executing it is killed; the reader comes back
        # with its last id and follows to the end, through the takeover.
        wait_until(lambda: killed, 30, "the kill")
        after = first[-1].id
        second.extend(engine.events(run.id, after=after, timeout=90))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        claimed = wait_until(
            lambda: (
                (r := engine.get_run(run.id)).status is RunStatus.RUNNING
                and (cp := engine.checkpoint(run.id)) is not None
                and cp.step_index >= 3
                and r
            ),
            60,
            "three steps",
        )
        victim = worker_of(workers, owner_pid(claimed))
        victim.signal(signal.SIGKILL)
        victim.wait(10)
        killed.append(victim.pid)
        reader.join(120)
    finally:
        killed.append(0)
    assert not reader.is_alive()
    done = engine.get_run(run.id)
    assert done.status is RunStatus.COMPLETED

    got = first + second
    stored = engine.store.events(run.id)
    assert _ids(got) == _ids(stored)  # every durable event exactly once, in id order
    assert [(e.id, e.type, e.data) for e in got if e.type is not EventType.STEP] == [
        (e.id, e.type, e.data) for e in stored if e.type is not EventType.STEP
    ]
    executions = [e.data for e in got if e.type is EventType.EXECUTION]
    assert len(executions) >= 2 and any(x["takeover"] for x in executions), executions
    assert got[-1].status is RunStatus.COMPLETED


def test_wait_hears_the_settling_commit(
    shared_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no timeout and the streams' resync put past the test's life,
    only the worker's wake-up could end the wait."""
    monkeypatch.setattr(eventstream, "RESYNC_SECONDS", 100 * SAFETY_NET)
    engine = shared_cluster.engine()
    run = engine.start("steady", {"steps": 3, "latency": 0.2})
    done = finishes(lambda: engine.wait(run.id), "wait() did not hear the run settle")
    assert done.status is RunStatus.COMPLETED


def test_wait_on_a_waiting_run_returns_at_its_timeout(
    shared_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeout ends the wait once the streams' clock passes it, not before."""
    engine = shared_cluster.engine()
    run = engine.start("approve", {"amount": 5})
    paused = engine.wait(run.id, timeout=60, until="waiting")
    assert paused.status is RunStatus.WAITING
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


def test_watch_follows_a_run_to_its_end(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    engine = cluster.engine()
    run = engine.start("steady", {"steps": 4, "latency": 0.3})
    watched = subprocess.run(
        [RUNWRIGHT, "watch", run.id, "--timeout", "60"],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert watched.returncode == 0, watched.stderr
    lines = watched.stdout.splitlines()
    assert "-- completed" in lines
    assert sum(1 for line in lines if " tool  charge(" in line) == 3
    assert any(line.startswith("-- execution 1 started by ") for line in lines)
    assert lines[-1] == 'output: "steady done"'
    # A settled run: watch replays it and exits at once.
    again = subprocess.run(
        [RUNWRIGHT, "watch", run.id, "--json"],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.count('"type": "step"') == len(engine.steps(run.id))


@pytest.fixture
def streaming_provider() -> Iterator[Provider]:
    def script(step: int, body: dict[str, Any]) -> dict[str, Any]:
        if step == 1:
            return tool_calls(("call_1", "lookup", {"q": "build"}))
        return answer(STREAMED)

    with Provider(script) as server:
        server.stream_delay = 0.03
        yield server


def test_a_streaming_model_text_reaches_readers_before_its_step(
    cluster: Cluster, streaming_provider: Provider
) -> None:
    """Acceptance 2: a worker streams from a loopback server; the reader sees
    the text's deltas before the step's llm event, and they add up to it."""
    cluster.worker(
        "w1",
        RUNWRIGHT_AGENTS="tests.agents,tests.agents_live",
        RUNWRIGHT_TEST_PROVIDER_URL=streaming_provider.base_url,
    )
    engine = cluster.engine()
    run = engine.start("live-stream")
    got = list(engine.events(run.id, timeout=60))
    assert got[-1].status is RunStatus.COMPLETED
    llm = next(
        i
        for i, e in enumerate(got)
        if e.type is EventType.STEP and e.data["kind"] == "llm" and e.data["index"] == 2
    )
    deltas = [e for e in got[:llm] if e.type is EventType.TOKEN and e.data["step"] == 2]
    assert len(deltas) >= 2
    journaled = got[llm].data["output"]["message"]["content"]
    assert "".join(d.data["text"] for d in deltas) == journaled == STREAMED
    assert not any(e.type is EventType.TOKEN for e in got[llm:])
    assert _ids(got) == _ids(engine.store.events(run.id))
