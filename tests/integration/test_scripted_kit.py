"""The scripted vocabulary through the engine (issue 25), on real Postgres and
Redis: provider errors a run rides out (a 429's Retry-After honoured), a
structured output, a script that does not match its agent caught by
``assert_complete()``, and a real model refused while requests are blocked,
with nothing sent."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pydantic
import pytest

from runner import Agent, Engine
from runner.core import model
from runner.core.clock import Clock
from runner.core.coordination.leases import Leases
from runner.core.errors import ModelError
from runner.core.retry import RetryPolicy
from runner.core.runtime import runtime
from runner.core.settings import Settings
from runner.testing import (
    ScriptedModel,
    UnconsumedModelSteps,
    UnexpectedModelCall,
    block_model_requests,
    call,
    output,
    rate_limited,
    server_error,
    text,
    tools,
)
from store.models import RunStatus, StepKind, utcnow
from store.postgres import PostgresStore
from tests.helpers import unique

BLOCKED = (
    "model requests are blocked in this test, and the run called 'openai/gpt-4o-mini'; "
    "to allow them, mark the test @pytest.mark.runwright_allow_model_requests "
    "or run the code inside runner.testing.allow_model_requests()"
)


class Verdict(pydantic.BaseModel):
    severity: int
    summary: str


def _agent(script: list[object], **kwargs: object) -> tuple[str, ScriptedModel]:
    from tests.agents import lookup

    name = unique("kit")
    scripted = ScriptedModel(name, script)  # type: ignore[arg-type]
    Agent(name=name, model=scripted.model, tools=[lookup], **kwargs)  # type: ignore[arg-type]
    return name, scripted


class Pauses(Clock):
    """The system's time, whose sleeps are written down and skipped."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await asyncio.sleep(0)


def test_a_429s_retry_after_is_waited_out_within_the_call(
    pg_store: PostgresStore,
    leases: Leases,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import tests.agents  # noqa: F401  (registers the shared agents)

    clock = Pauses()
    engine = Engine(
        pg_store,
        leases=leases,
        settings=settings,
        model_retries=2,
        model_backoff_seconds=0.01,
        clock=clock,
    )
    try:
        name, scripted = _agent([rate_limited(retry_after=1), text("ok")])
        run = engine.start(name)
        caplog.set_level(logging.WARNING, logger="runner.core.model")
        done = engine.execute(run.id)
    finally:
        engine.close()

    assert done is not None and done.status is RunStatus.COMPLETED and done.output == "ok"
    # The engine's backoff is 0.01 s: the pause is the provider's.
    retried = [r.getMessage() for r in caplog.records if "RateLimitError" in r.getMessage()]
    assert retried == [f"model {scripted.model}: RateLimitError (attempt 1); retrying in 1.0s"]
    assert clock.slept == [1.0]
    assert scripted.call_count == 2
    scripted.assert_complete()


def test_a_retry_after_longer_than_a_call_waits_is_the_runs_next_attempt(
    engine: Engine,
) -> None:
    """Past runner.core.model.MAX_IN_CALL_WAIT the run goes back to the queue, not
    before the provider's pause: the retry the engine records."""
    name, scripted = _agent(
        [rate_limited(retry_after=120), text("ok")],
        retry=RetryPolicy(initial_backoff=1, max_backoff=5, max_attempts=3, max_elapsed=3600),
    )
    run = engine.start(name)
    before = utcnow()
    left = engine.execute(run.id)

    assert left is not None and left.status is RunStatus.QUEUED
    assert left.retry is not None and left.retry.at is not None and left.retry.attempts == 1
    assert left.retry.at >= before + timedelta(seconds=120)
    assert "RateLimitError" in (left.retry.error or "")
    assert scripted.call_count == 1


def test_a_server_error_then_a_reply_completes(engine: Engine) -> None:
    name, scripted = _agent([server_error(), text("recovered")])
    done = engine.execute(engine.start(name).id)

    assert done is not None and done.status is RunStatus.COMPLETED
    assert done.output == "recovered"
    assert len([s for s in engine.steps(done.id) if s.kind is StepKind.LLM]) == 1
    scripted.assert_complete()


def test_a_tool_step_then_the_structured_output(engine: Engine) -> None:
    expected = Verdict(severity=2, summary="the disk was full")
    name, scripted = _agent(
        [tools(call("lookup", {"q": "disk"})), server_error(), output(expected)], output=Verdict
    )
    run = engine.start(name)
    done = engine.execute(run.id)

    assert done is not None and done.status is RunStatus.COMPLETED
    assert engine.result(run.id, Verdict) == expected
    assert Verdict.model_validate(done.output) == expected
    scripted.assert_complete()


def test_an_agent_that_calls_once_more_than_its_script_is_caught(engine: Engine) -> None:
    # After the tool's result the agent asks again: the script has nothing more.
    name, scripted = _agent([tools(call("lookup", {"q": "x"}))])
    done = engine.execute(engine.start(name).id)

    assert done is not None and done.status is RunStatus.FAILED
    assert done.error is not None and done.error.code == "model_error"
    assert "has 1 replies for 1 step(s); step 2 asked for one more" in done.error.message
    assert scripted.call_count == 2  # not retried: more of the same cannot help
    with pytest.raises(UnexpectedModelCall, match=r"asked for step\(s\) 2$"):
        scripted.assert_complete()


def test_an_agent_that_stops_before_its_script_ends_is_caught(engine: Engine) -> None:
    name, scripted = _agent([text("done early"), tools(call("lookup", {"q": "x"}))])
    done = engine.execute(engine.start(name).id)

    assert done is not None and done.status is RunStatus.COMPLETED
    with pytest.raises(UnconsumedModelSteps, match=r"never served: step 2 tools\(lookup\)"):
        scripted.assert_complete()


# ------------------------------------------------------------ blocked requests


class Listener:
    """A loopback socket of the test's own that counts the connections it gets."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.close()  # no answer: the caller fails with a connection error

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    made = Listener()
    yield made
    made.close()


def test_a_real_model_under_block_fails_the_run_and_sends_nothing(
    engine: Engine, listener: Listener
) -> None:
    settings = {"api_base": listener.url, "api_key": "sk-loopback", "timeout": 5}
    name = unique("real")
    Agent(name=name, model="openai/gpt-4o-mini", model_settings=settings)
    run = engine.start(name)
    with block_model_requests():
        done = engine.execute(run.id)

    assert done is not None and done.status is RunStatus.FAILED
    assert done.error is not None and done.error.code == "model_error"
    assert done.error.message == BLOCKED
    assert done.retry is not None and done.retry.attempts == 1  # failed at once
    assert listener.accepted == 0

    # The listener does see a call that is not blocked (so its 0 above means something).
    messages = [{"role": "user", "content": "hello"}]
    with pytest.raises(ModelError):
        call = model.complete("openai/gpt-4o-mini", messages, [], settings, retries=0)
        runtime().run(call, timeout=60)
    assert listener.accepted >= 1


def test_a_script_that_waits_holds_its_own_thread_and_the_step_before_is_committed(
    engine: Engine, pg_store: PostgresStore
) -> None:
    """Step 2's model call waits for a gate: step 1's commit, in flight when the
    call starts, is in the store meanwhile, and the worker's loop is free."""
    from tests.agents import lookup
    from tests.helpers import SAFETY_NET, run_in_thread

    gate = threading.Event()

    def script(request: object) -> object:
        if getattr(request, "step", 0) == 2:
            assert gate.wait(SAFETY_NET), "the test never opened the gate"
            return text("done")
        return tools(call("lookup", {"query": "orders"}))

    name = unique("kit-gate")
    scripted = ScriptedModel(name, script)  # type: ignore[arg-type]
    Agent(name=name, model=scripted.model, tools=[lookup])
    run = engine.start(name)
    worker, box = run_in_thread(engine, run.id)
    try:
        deadline = time.monotonic() + SAFETY_NET
        while (checkpoint := pg_store.checkpoint(run.id)) is None or checkpoint.step_index < 1:
            assert time.monotonic() < deadline, "step 1 was not committed while step 2 waited"
            time.sleep(0.01)
        assert scripted.call_count == 2  # step 2's call is waiting on the gate
        assert pg_store.get_run(run.id).status is RunStatus.RUNNING
    finally:
        gate.set()
        worker.join(SAFETY_NET)
    assert box["run"].status is RunStatus.COMPLETED
