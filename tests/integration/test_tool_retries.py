"""Tool retries in the engine: a raising tool is tried again
with backoff before its error reaches the model, effects only if they are
at-least-once, and an abort during a backoff stops the retrying at once."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from runner import Agent, Engine, effect, tool
from runner.core.errors import ToolInputError
from runner.core.retry import RetryPolicy
from runner.core.runtime import runtime
from runner.testing import ScriptedModel, call, text, tools
from store.models import EffectStatus, RunStatus, StepKind
from tests.helpers import SAFETY_NET, joined, journaled_effect, run_in_thread, unique, wait_for

FAST = RetryPolicy.attempts(2, backoff=0.01)


def tool_steps(engine: Engine, run_id: str) -> list[Any]:
    return [s for s in engine.steps(run_id) if s.kind is StepKind.TOOL]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_tool_that_fails_twice_then_succeeds(
    engine: Engine, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    attempts: list[bool] = []  # per attempt: was it called on a running event loop?

    def attempt(city: str) -> str:
        try:
            asyncio.get_running_loop()
            attempts.append(True)
        except RuntimeError:
            attempts.append(False)
        if len(attempts) < 3:
            raise ConnectionError(f"weather service down ({len(attempts)})")
        return f"sunny in {city}"

    if kind == "sync":

        @tool(name="weather", retries=2)
        def weather(city: str) -> str:
            """Today's weather."""
            return attempt(city)

    else:

        @tool(name="weather", retries=2)
        async def weather(city: str) -> str:
            """Today's weather."""
            return attempt(city)

    name = unique("retry-ok")
    model = ScriptedModel(name, [tools(call("weather", {"city": "Oslo"})), text("done")])
    Agent(name=name, model=model.model, tools=[weather])
    with caplog.at_level(logging.WARNING, logger="runner.core.steps.toolcalls"):
        done = engine.execute(engine.start(name).id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert len(attempts) == 3
    # A sync tool keeps running in the tool executor, an async one on the loop.
    assert attempts == [kind == "async"] * 3
    [result] = model.calls[1].tool_results()
    assert result["content"] == "sunny in Oslo"
    [step] = tool_steps(engine, done.id)
    assert step.output == "sunny in Oslo" and step.error is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    for number, line in enumerate(warnings, start=1):
        assert f"tool weather failed on attempt {number}" in line
        assert "ConnectionError" in line and "retrying in" in line


def test_exhausted_retries_send_the_last_error_to_the_model(engine: Engine) -> None:
    ran: list[int] = []

    @tool(retries=FAST)
    def always(x: int) -> int:
        """Always fails."""
        ran.append(x)
        raise ValueError(f"no luck, try {len(ran)}")

    name = unique("retry-exhausted")
    model = ScriptedModel(name, [tools(call("always", {"x": 1})), text("gave up")])
    Agent(name=name, model=model.model, tools=[always])
    done = engine.execute(engine.start(name).id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.output == "gave up"
    assert len(ran) == 3
    [result] = model.calls[1].tool_results()
    assert "always raised ValueError: no luck, try 3 (after 3 attempts)" in result["content"]
    [step] = tool_steps(engine, done.id)
    assert step.error == "always raised ValueError: no luck, try 3 (after 3 attempts)"


def test_bad_input_and_errors_the_policy_rejects_are_not_retried(engine: Engine) -> None:
    ran: list[str] = []

    @tool(retries=FAST)
    def strict(code: str) -> str:
        """Rejects codes it does not know."""
        ran.append(f"strict {code}")
        raise ToolInputError(f"unknown code {code!r}")

    @tool(retries=RetryPolicy(initial_backoff=0.01, transient=lambda e: isinstance(e, OSError)))
    def picky(code: str) -> str:
        """Retries only OS errors."""
        ran.append(f"picky {code}")
        raise ValueError("not an outage")

    name = unique("retry-refused")
    model = ScriptedModel(
        name,
        [
            tools(
                call("strict", {"wrong_field": 1}),  # never reaches the tool
                call("strict", {"code": "zz"}),
                call("picky", {"code": "a"}),
            ),
            text("ok"),
        ],
    )
    Agent(name=name, model=model.model, tools=[strict, picky])
    done = engine.execute(engine.start(name).id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert sorted(ran) == ["picky a", "strict zz"]
    contents = [r["content"] for r in model.calls[1].tool_results()]
    assert "invalid arguments for strict" in contents[0]
    assert "strict raised ToolInputError: unknown code 'zz'" in contents[1]
    assert "picky raised ValueError: not an outage" in contents[2]
    assert "attempts" not in contents[1] + contents[2]


def test_an_at_least_once_effect_is_retried_under_one_key(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys: list[str] = []
    seen: list[EffectStatus] = []
    store = engine.store
    finished: list[tuple[str, Any, Any]] = []
    finish = store.finish_effect

    def counting_finish(fence: Any, key: str, **kwargs: Any) -> Any:
        finished.append((key, kwargs.get("output"), kwargs.get("error")))
        return finish(fence, key, **kwargs)

    monkeypatch.setattr(store, "finish_effect", counting_finish)

    @effect(retry="at_least_once", retries=FAST)
    def refund(amount: int, idempotency_key: str) -> dict[str, Any]:
        """Refund, retried when the payment service blips."""
        keys.append(idempotency_key)
        run_id = idempotency_key.split(":")[0]
        journaled = journaled_effect(store, run_id, idempotency_key)
        assert journaled is not None
        seen.append(journaled.status)
        if len(keys) < 3:
            raise ConnectionError("payment service down")
        return {"refunded": amount, "attempt": len(keys)}

    name = unique("retry-effect")
    model = ScriptedModel(name, [tools(call("refund", {"amount": 7}, id="r1")), text("done")])
    Agent(name=name, model=model.model, tools=[refund])
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    key = f"{run.id}:r1"
    assert keys == [key] * 3
    # Between attempts the journal says the effect started, never that it ended.
    assert seen == [EffectStatus.STARTED] * 3
    assert finished == [(key, {"refunded": 7, "attempt": 3}, None)]
    journaled = journaled_effect(store, run.id, key)
    assert journaled is not None and journaled.status is EffectStatus.COMPLETED
    assert journaled.output == {"refunded": 7, "attempt": 3} and journaled.error is None
    [result] = model.calls[1].tool_results()
    assert result["content"] == '{"refunded": 7, "attempt": 3}'


def test_an_effect_that_keeps_failing_is_journaled_failed_once(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys: list[str] = []
    store = engine.store
    finished: list[tuple[str, Any]] = []
    finish = store.finish_effect

    def counting_finish(fence: Any, key: str, **kwargs: Any) -> Any:
        finished.append((key, kwargs.get("error")))
        return finish(fence, key, **kwargs)

    monkeypatch.setattr(store, "finish_effect", counting_finish)

    @effect(retry="at_least_once", retries=FAST)
    async def notify(user: str, idempotency_key: str) -> str:
        """Notify the user."""
        keys.append(idempotency_key)
        raise ConnectionError(f"mail server down ({len(keys)})")

    name = unique("retry-effect-fails")
    model = ScriptedModel(name, [tools(call("notify", {"user": "ada"}, id="n1")), text("sorry")])
    Agent(name=name, model=model.model, tools=[notify])
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    key = f"{run.id}:n1"
    message = "notify raised ConnectionError: mail server down (3) (after 3 attempts)"
    assert keys == [key] * 3
    assert finished == [(key, message)]
    journaled = journaled_effect(store, run.id, key)
    assert journaled is not None and journaled.status is EffectStatus.FAILED
    assert journaled.error == message
    [result] = model.calls[1].tool_results()
    assert message in result["content"]


def test_cancel_during_a_backoff_stops_the_run_at_once(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    count: list[int] = []

    # A backoff longer than the safety net: the run ends only if the cancel cuts it short.
    @tool(retries=RetryPolicy.attempts(1, backoff=20 * SAFETY_NET))
    def stuck() -> str:
        """Fails, then waits 10 to 20 minutes before trying again."""
        count.append(1)
        raise ConnectionError("down")

    name = unique("retry-cancel")
    model = ScriptedModel(name, [tools(call("stuck")), text("unreachable")])
    Agent(name=name, model=model.model, tools=[stuck])
    run = engine.start(name)
    with caplog.at_level(logging.WARNING, logger="runner.core.steps.toolcalls"):
        thread, box = run_in_thread(engine, run.id)
        try:
            wait_for(lambda: any("retrying in" in r.getMessage() for r in caplog.records))
            assert engine.cancel(run.id).action == "requested"
        finally:
            joined(thread, "the cancel did not cut the backoff short")
    assert box["run"].status is RunStatus.CANCELLED
    assert engine.get_run(run.id).status is RunStatus.CANCELLED
    assert len(count) == 1
    assert tool_steps(engine, run.id) == []  # abandoned: no result recorded
    assert model.call_count == 1


def test_a_drain_during_a_backoff_leaves_the_effect_to_the_next_execution(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    keys: list[str] = []

    # A backoff longer than the safety net: the execution ends only if the drain cuts it short.
    @effect(retry="at_least_once", retries=RetryPolicy.attempts(1, backoff=20 * SAFETY_NET))
    def refund(amount: int, idempotency_key: str) -> str:
        """Fails the first time, with a long backoff."""
        keys.append(idempotency_key)
        if len(keys) == 1:
            raise ConnectionError("payment service down")
        return "refunded"

    name = unique("retry-drain")
    model = ScriptedModel(name, [tools(call("refund", {"amount": 3}, id="d1")), text("done")])
    Agent(name=name, model=model.model, tools=[refund])
    run = engine.start(name)
    key = f"{run.id}:d1"
    with caplog.at_level(logging.WARNING, logger="runner.core.steps.toolcalls"):
        thread, box = run_in_thread(engine, run.id)
        try:
            wait_for(lambda: any("retrying in" in r.getMessage() for r in caplog.records))
            runtime().drain()
        finally:
            joined(thread, "the drain did not cut the backoff short")
    assert box["run"].status is RunStatus.INTERRUPTED
    journaled = journaled_effect(engine.store, run.id, key)
    assert journaled is not None and journaled.status is EffectStatus.STARTED
    runtime()._draining = False  # a drained worker exits; this test's process goes on

    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert keys == [key, key]
    journaled = journaled_effect(engine.store, run.id, key)
    assert journaled is not None and journaled.status is EffectStatus.COMPLETED
    assert journaled.output == "refunded" and journaled.attempts == 2


def test_backoffs_do_not_block_the_other_calls_of_the_step(engine: Engine) -> None:
    # Each call fails once, then waits 1 to 2 s. Side by side, every call's
    # first attempt comes before any call's second; one backoff at a time (a
    # blocked loop, or calls one after the other), a call would try again
    # before the next one's first attempt.
    policy = RetryPolicy(initial_backoff=2.0, max_attempts=2, max_elapsed=None)
    failed: set[str] = set()
    attempts: list[str] = []

    @tool(retries=policy)
    async def fetch(part: str) -> str:
        """Fetch one part."""
        attempts.append(part)
        if part not in failed:
            failed.add(part)
            raise ConnectionError("blip")
        return part

    name = unique("retry-parallel")
    model = ScriptedModel(
        name,
        [
            tools(
                call("fetch", {"part": "a"}),
                call("fetch", {"part": "b"}),
                call("fetch", {"part": "c"}),
            ),
            text("ok"),
        ],
    )
    Agent(name=name, model=model.model, tools=[fetch])
    done = engine.execute(engine.start(name).id)
    assert done is not None and done.status is RunStatus.COMPLETED
    steps = tool_steps(engine, done.id)
    assert [s.output for s in steps] == ["a", "b", "c"]
    assert sorted(attempts[:3]) == ["a", "b", "c"], attempts
    assert sorted(attempts[3:]) == ["a", "b", "c"], attempts
