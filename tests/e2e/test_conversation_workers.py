"""Threads as conversations on real ``celery worker`` processes
(docs/conversations.md): two messages 50 ms apart under each
``on_new_message`` policy, a worker killed with SIGKILL while a message
interrupts its run, and 100 messages sent at once to one thread."""

from __future__ import annotations

import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

import tests.agents_threads  # noqa: F401  (the agents, for this process's engine)
from runner import Engine
from runner.core.errors import ThreadBusy
from store.models import RunStatus
from tests.agents import read_effect_log
from tests.e2e.cluster import Cluster, Proc, wait_until

AGENTS = "tests.agents,tests.agents_threads"


def _worker(cluster: Cluster, name: str) -> Proc:
    return cluster.worker(name, concurrency=4, RUNWRIGHT_AGENTS=AGENTS)


def _ended(engine: Engine, thread: str, runs: int, timeout: float = 90) -> None:
    wait_until(
        lambda: len(engine.thread(thread).runs) == runs and engine.thread(thread).active is None,
        timeout,
        f"the {runs} run(s) of thread {thread} to end",
    )


def _no_effect_twice(cluster: Cluster) -> None:
    keys = Counter(e["key"] for e in read_effect_log(str(cluster.workdir / "effects.jsonl")))
    assert keys and max(keys.values()) == 1, keys


def _before_second(engine: Engine, thread: str) -> list[str]:
    """The roles of the last run's history before the message "second"."""
    messages = engine.thread(thread).messages
    at = next(i for i, m in enumerate(messages) if m.get("content") == "second")
    return [m["role"] for m in messages[:at]]


def test_two_messages_50_ms_apart_under_each_policy(cluster: Cluster) -> None:
    _worker(cluster, "w1")
    engine = cluster.engine()
    try:
        sent = {}
        for policy in ("enqueue", "reject", "interrupt", "rollback"):
            thread = f"t-{policy}"
            first = engine.send(thread, "first", agent=f"thread-{policy}", by="ada")
            time.sleep(0.05)
            try:
                second = engine.send(thread, "second", agent=f"thread-{policy}", by="ada")
            except ThreadBusy:
                second = None
            sent[policy] = (first, second)
        assert sent["reject"][1] is None
        for policy, (_, second) in sent.items():
            _ended(engine, f"t-{policy}", 1 if second is None else 2)

        enqueue = engine.thread("t-enqueue")
        assert [r.status for r in enqueue.runs] == [RunStatus.COMPLETED] * 2
        assert enqueue.runs[1].output == "seen: first | second"
        assert _before_second(engine, "t-enqueue")[-1] == "assistant"  # the first answered

        reject = engine.thread("t-reject")
        assert [r.output for r in reject.runs] == ["seen: first"]

        for policy in ("interrupt", "rollback"):
            view = engine.thread(f"t-{policy}")
            assert [r.status for r in view.runs] == [RunStatus.CANCELLED, RunStatus.COMPLETED]
            assert view.runs[1].output == "seen: first | second"
        # A rollback drops the interrupted answer: no assistant turn before "second".
        assert "assistant" not in _before_second(engine, "t-rollback")
        _no_effect_twice(cluster)
    finally:
        engine.close()


@pytest.mark.parametrize("policy", ["interrupt", "rollback"])
def test_a_worker_killed_while_a_message_interrupts_loses_no_message_and_repeats_no_effect(
    cluster: Cluster, policy: str
) -> None:
    worker = _worker(cluster, "w1")
    cluster.beat()
    engine = cluster.engine()
    effects = str(cluster.workdir / "effects.jsonl")
    try:
        thread = f"kill-{policy}"
        first = engine.send(thread, "first", agent=f"thread-{policy}")
        wait_until(lambda: read_effect_log(effects), 60, "the first run's charge to run")
        second = engine.send(thread, "second", agent=f"thread-{policy}")
        worker.signal(signal.SIGKILL)
        worker.wait(10)
        _worker(cluster, "w2")
        _ended(engine, thread, 2, timeout=120)
        assert engine.get_run(first.id).status is RunStatus.CANCELLED
        done = engine.get_run(second.id)
        assert done.status is RunStatus.COMPLETED and done.output == "seen: first | second"
        _no_effect_twice(cluster)
        assert len(read_effect_log(effects)) == 2  # the first run's charge, the second's
    finally:
        engine.close()


def test_100_messages_sent_at_once_to_one_thread_lose_none(cluster: Cluster) -> None:
    _worker(cluster, "w1")
    engine = cluster.engine()
    try:
        texts = [f"quick {n}" for n in range(100)]
        with ThreadPoolExecutor(max_workers=20) as pool:
            runs = list(pool.map(lambda t: engine.send("busy", t, agent="thread-enqueue"), texts))
        assert len({r.id for r in runs}) == 100
        _ended(engine, "busy", 100, timeout=240)
        view = engine.thread("busy")
        assert {r.status for r in view.runs} == {RunStatus.COMPLETED}
        said = [m["content"] for m in view.messages if m.get("role") == "user"]
        assert sorted(said) == sorted(texts)  # each once
        last = view.runs[-1].output  # what the last run's model was sent: all 100
        assert isinstance(last, str)
        assert sorted(last.removeprefix("seen: ").split(" | ")) == sorted(texts)
    finally:
        engine.close()
