"""Token streaming through the engine (``Agent(stream=True)``): deltas reach
readers live, before the step's journaled ``llm`` event, and add up to its
text; a cancel stops the stream; the journal is as without streaming."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from runner import Agent, Engine
from runner.testing import Request, ScriptedModel, call, text, tools
from store.events import EventType, RunEvent
from store.models import RunStatus
from tests.helpers import joined, unique, wait_for
from tests.integration.test_events import follow, look
from tests.provider import Provider, answer

TEXT = "The build fails because the cache key ignores the lockfile; bump it."


def streaming_agent(*, chunk_delay: float = 0.01) -> str:
    name = unique("stream")

    def script(request: Request) -> Any:
        if request.step == 1:
            return tools(call("look", {"n": 1}))
        return text(TEXT)

    model = ScriptedModel(name, script, chunk_delay=chunk_delay)
    Agent(name=name, model=model.model, tools=[look], stream=True)
    return name


def _tokens_then_llm(events: list[RunEvent], step: int) -> tuple[list[RunEvent], RunEvent]:
    """The token deltas of ``step`` that came before its llm event, and that event."""
    llm = next(
        i
        for i, e in enumerate(events)
        if e.type is EventType.STEP and e.data["kind"] == "llm" and e.data["index"] == step
    )
    tokens = [e for e in events[:llm] if e.type is EventType.TOKEN and e.data["step"] == step]
    return tokens, events[llm]


def test_deltas_arrive_before_the_llm_event_and_add_up_to_its_text(engine: Engine) -> None:
    run = engine.start(streaming_agent())
    reader, got = follow(engine.events(run.id, timeout=30))
    time.sleep(0.2)
    done = engine.execute(run.id)
    reader.join(10)
    assert done is not None and done.status is RunStatus.COMPLETED
    tokens, llm = _tokens_then_llm(got, 2)
    assert len(tokens) >= 2
    journaled = llm.data["output"]["message"]["content"]
    assert "".join(t.data["text"] for t in tokens) == journaled == TEXT
    assert [t.data["n"] for t in tokens] == sorted(t.data["n"] for t in tokens)
    assert {t.data["epoch"] for t in tokens} == {done.claim.epoch if done.claim else 1}
    # Nothing of the deltas is stored: the feed replays without them.
    assert all(e.type is not EventType.TOKEN for e in engine.store.events(run.id))
    assert done.output == TEXT


@pytest.fixture
def slow_provider() -> Iterator[Provider]:
    long_text = "word " * 400

    def script(step: int, body: dict[str, Any]) -> dict[str, Any]:
        return answer(long_text)

    with Provider(script) as server:
        server.stream_delay = 0.02  # 500 events: ten seconds
        yield server


def test_a_cancel_stops_the_stream(engine: Engine, slow_provider: Provider) -> None:
    name = unique("stream-cancel")
    Agent(
        name=name,
        model="openai/loopback",
        model_settings={"api_base": slow_provider.base_url, "api_key": "sk-loopback"},
        stream=True,
    )
    run = engine.start(name)
    reader, got = follow(engine.events(run.id, timeout=30))
    executing = threading.Thread(target=engine.execute, args=(run.id,))
    executing.start()
    deadline = time.monotonic() + 20
    while sum(1 for e in got if e.type is EventType.TOKEN) < 3:
        assert time.monotonic() < deadline, "no deltas"
        time.sleep(0.02)
    engine.cancel(run.id)
    joined(executing, "the cancel did not stop the execution")
    joined(reader, "the run's events did not end with the cancel")
    assert engine.get_run(run.id).status is RunStatus.CANCELLED
    wait_for(lambda: slow_provider.disconnects >= 1, what="the provider's stream's close")
    # Stopped mid-stream: the provider had 500 deltas to send.
    assert sum(1 for e in got if e.type is EventType.TOKEN) < 400
    assert not [s for s in engine.steps(run.id) if s.kind.value == "llm"]  # nothing journaled
