"""The execution engine in-process, on real Postgres and Redis."""

from __future__ import annotations

import threading
from typing import Any

import pydantic
import sqlalchemy as sa

from runner import Agent, Budget, Engine, RunContext, tool
from runner.core import faults
from runner.core.coordination.leases import lease_key
from runner.core.model import warm_up
from runner.core.retry import RetryPolicy
from runner.core.runtime import runtime
from runner.testing import Request, ScriptedModel, call, text, tools
from store.errors import LeaseLostError
from store.models import RunStatus, StepKind, Usage
from tests.agents import lookup
from tests.helpers import SAFETY_NET, joined, run_in_thread, unique, wait_for

SEED_FIRST_MESSAGE = """```json
{
  "source": "manual",
  "trigger": "manual",
  "payload": {
    "title": "App crashes on start"
  }
}
```"""


def test_first_message_is_the_seed_rendering_and_tools_see_the_envelope(engine: Engine) -> None:
    seen: dict[str, Any] = {}

    @tool
    def inspect_trigger(ctx: RunContext) -> str:
        """Look at the trigger."""
        seen.update(
            id=ctx.trigger.id,
            keys=ctx.trigger.keys,
            thread=ctx.trigger.thread,
            received_at=ctx.trigger.received_at,
            run_id=ctx.run_id,
        )
        return "ok"

    name = unique("first")
    model = ScriptedModel(name, [tools(call("inspect_trigger")), text("done")])
    Agent(name=name, model=model.model, tools=[inspect_trigger])
    run = engine.start(
        name,
        {"title": "App crashes on start"},
        keys={"customer": "c-7"},
        thread=None,
        id="evt-123",
    )
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED

    first = model.calls[0].messages
    assert first[0] == {"role": "user", "content": SEED_FIRST_MESSAGE}
    for absent in ("evt-123", "c-7", "received_at", "keys", '"id"'):
        assert absent not in first[0]["content"]
    assert seen["id"] == "evt-123" and seen["keys"] == {"customer": "c-7"}
    assert seen["run_id"] == run.id and seen["received_at"] == run.trigger.received_at
    checkpoint = engine.checkpoint(run.id)
    assert checkpoint is not None and checkpoint.messages[0]["content"] == SEED_FIRST_MESSAGE


def test_checkpoint_after_every_step_and_usage_per_call(engine: Engine) -> None:
    name = unique("steps")
    model = ScriptedModel(
        name,
        [
            tools(call("lookup", {"q": "a"}), usage=(100, 10)),
            tools(call("lookup", {"q": "b"}), call("lookup", {"q": "c"}), usage=(200, 20)),
            text("answer", usage=(300, 30)),
        ],
    )
    Agent(name=name, model=model.model, tools=[lookup])
    run = engine.start(name, {"q": 1})
    seen: list[tuple[int, int]] = []

    def observe(point: str) -> None:
        checkpoint = engine.checkpoint(run.id)
        assert checkpoint is not None
        seen.append((checkpoint.step_index, len(checkpoint.messages)))

    def observe_every(point: str) -> None:
        observe(point)
        faults.arm(faults.AFTER_COMMIT, observe_every, at_hit=1)  # and the next step too

    faults.arm(faults.AFTER_COMMIT, observe_every, at_hit=1)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.output == "answer"
    # user, then (assistant + results) per step, then the final assistant message
    assert seen == [(1, 3), (2, 6), (3, 7)]

    steps = engine.steps(run.id)
    llm = [s for s in steps if s.kind is StepKind.LLM]
    assert [s.index for s in llm] == [1, 2, 3]
    assert [s.usage for s in llm] == [Usage(100, 10), Usage(200, 20), Usage(300, 30)]
    assert [(s.index, s.name) for s in steps if s.kind is StepKind.TOOL] == [
        (1, "lookup"),
        (2, "lookup"),
        (2, "lookup"),
    ]
    assert done.usage == Usage(600, 60)
    assert model.call_count == 3


def test_parallel_tool_calls_run_concurrently(engine: Engine) -> None:
    # Each call returns only once the other has begun: one call at a time, the
    # first would wait alone until its barrier broke, and both would fail.
    both = threading.Barrier(2)

    @tool
    def meet(party: str) -> str:
        """Wait for the other call of the step."""
        both.wait(SAFETY_NET)
        return f"{party} met"

    name = unique("parallel")
    model = ScriptedModel(
        name, [tools(call("meet", {"party": "a"}), call("meet", {"party": "b"})), text("ok")]
    )
    Agent(name=name, model=model.model, tools=[meet])
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    tool_steps = [s for s in engine.steps(run.id) if s.kind is StepKind.TOOL]
    assert [(s.output, s.error) for s in tool_steps] == [("a met", None), ("b met", None)]


def test_untrusted_model_output_becomes_tool_errors(engine: Engine) -> None:
    @tool
    def explode(x: int) -> int:
        """Always fails."""
        raise ValueError(f"cannot handle {x}")

    name = unique("untrusted")
    model = ScriptedModel(
        name,
        [
            tools(
                call("lookup", '{"q": "unterminated'),
                call("no_such_tool", {"a": 1}),
                call("explode", {"x": 3}),
                call("lookup", {"wrong_field": 1}),
            ),
            text("recovered"),
        ],
        strict=False,  # the unknown tool is the point
    )
    Agent(name=name, model=model.model, tools=[lookup, explode])
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    results = model.calls[1].tool_results()
    assert len(results) == 4
    contents = [r["content"] for r in results]
    assert "not valid JSON" in contents[0]
    assert "unknown tool 'no_such_tool'" in contents[1] and "lookup" in contents[1]
    assert "explode raised ValueError: cannot handle 3" in contents[2]
    assert "invalid arguments for lookup" in contents[3]
    errors = [s.error for s in engine.steps(run.id) if s.kind is StepKind.TOOL]
    assert all(errors)


def test_provider_error_after_retries_fails_the_run(engine: Engine) -> None:
    """With a retry policy of one attempt, the in-call retries are all there is
    (durable retries: tests/integration/test_durable_retry.py)."""
    name = unique("provider")
    model = ScriptedModel(name, lambda request: text("x", error="server_error"))
    Agent(name=name, model=model.model, retry=RetryPolicy(max_attempts=1))
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.FAILED
    assert done.error is not None and done.error.code == "model_error"
    assert "InternalServerError" in done.error.message
    assert model.call_count == 3  # the first try and two retries


def test_transient_provider_error_is_retried(engine: Engine) -> None:
    name = unique("flaky")
    attempts = {"n": 0}

    def flaky(request: Request) -> Any:
        attempts["n"] += 1
        return text("fine") if attempts["n"] > 1 else text("x", error="rate_limit")

    ScriptedModel(name, flaky)
    Agent(name=name, model=f"scripted/{name}")
    done = engine.execute(engine.start(name).id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.output == "fine"
    assert len([s for s in engine.steps(done.id) if s.kind is StepKind.LLM]) == 1


def test_bad_request_is_not_retried(engine: Engine) -> None:
    name = unique("badreq")
    model = ScriptedModel(name, lambda request: text("x", error="bad_request"))
    Agent(name=name, model=model.model)
    done = engine.execute(engine.start(name).id)
    assert done is not None and done.error is not None and done.error.code == "model_error"
    assert model.call_count == 1


def test_max_steps_counts_across_executions(engine: Engine) -> None:
    name = unique("steps-budget")
    model = ScriptedModel(name, lambda r: tools(call("lookup", {"q": str(r.step)})))
    Agent(name=name, model=model.model, tools=[lookup], budget=Budget(max_steps=3))
    run = engine.start(name)

    # Drain the first execution after its second step.
    faults.arm(faults.AFTER_COMMIT, lambda p: runtime().abort(run.id, _drain()), at_hit=2)
    first = engine.execute(run.id)
    assert first is not None and first.status is RunStatus.INTERRUPTED
    assert first.steps_used == 2

    second = engine.execute(run.id)
    assert second is not None and second.status is RunStatus.FAILED
    assert second.error is not None and second.error.code == "budget_exceeded"
    assert model.call_count == 3
    assert second.steps_used == 3


def _drain() -> Any:
    from runner.core.steps.run_context import AbortReason

    return AbortReason.DRAIN


def test_exhausted_budget_settles_without_a_model_call(engine: Engine) -> None:
    name = unique("exhausted")
    model = ScriptedModel(name, lambda r: tools(call("lookup", {"q": "x"})))
    Agent(name=name, model=model.model, tools=[lookup], budget=Budget(max_steps=2))
    run = engine.start(name)
    faults.arm(faults.AFTER_COMMIT, lambda p: runtime().abort(run.id, _drain()), at_hit=2)
    engine.execute(run.id)
    calls_before = model.call_count
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.FAILED
    assert done.error is not None and done.error.code == "budget_exceeded"
    assert model.call_count == calls_before == 2


def test_max_tokens_stops_the_loop(engine: Engine) -> None:
    name = unique("tokens")
    model = ScriptedModel(name, lambda r: tools(call("lookup", {"q": "x"}), usage=(10, 5)))
    Agent(name=name, model=model.model, tools=[lookup], budget=Budget(max_tokens=40))
    done = engine.execute(engine.start(name).id)
    assert done is not None and done.status is RunStatus.FAILED
    assert done.error is not None and done.error.code == "budget_exceeded"
    assert "45 tokens" in done.error.message
    assert model.call_count == 3


def test_timeout_fails_the_run_and_cancels_the_model_call(engine: Engine) -> None:
    name = unique("timeout")
    # The reply would come long after the safety net: the run can end only
    # if the timeout cancels the call.
    model = ScriptedModel(name, lambda r: text("late", latency=10 * SAFETY_NET))
    Agent(name=name, model=model.model, budget=Budget(timeout_ms=300))
    thread, box = run_in_thread(engine, engine.start(name).id)
    joined(thread, "the timeout did not cancel the model call")
    done = box["run"]
    assert done is not None and done.status is RunStatus.FAILED
    assert done.error is not None and done.error.code == "timeout"
    assert not [s for s in engine.steps(done.id) if s.kind is StepKind.LLM]


def test_timeout_applies_afresh_to_each_execution(engine: Engine) -> None:
    name = unique("timeout-fresh")
    model = ScriptedModel(
        name,
        lambda r: tools(call("lookup", {"q": "x"}), latency=0.9) if r.step < 5 else text("ok"),
    )
    Agent(name=name, model=model.model, tools=[lookup], budget=Budget(timeout_ms=3000))
    # litellm imported and warm: in a fresh process its first call alone could
    # take the first execution past its budget.
    warm_up()
    run = engine.start(name)
    faults.arm(faults.AFTER_COMMIT, lambda p: runtime().abort(run.id, _drain()), at_hit=2)
    first = engine.execute(run.id)  # about 1.8 s, then drained
    assert first is not None and first.status is RunStatus.INTERRUPTED
    # 1.8 s more: over three seconds in total, but within each execution's budget.
    second = engine.execute(run.id)
    assert second is not None and second.status is RunStatus.COMPLETED


def test_cancel_while_the_model_call_is_in_flight(engine: Engine) -> None:
    name = unique("cancel-model")
    # The reply would come long after the safety net: the run can end only
    # if the cancel interrupts the call.
    model = ScriptedModel(name, lambda r: text("never", latency=10 * SAFETY_NET))
    Agent(name=name, model=model.model)
    run = engine.start(name)
    thread, box = run_in_thread(engine, run.id)
    wait_for(lambda: model.call_count == 1)
    assert engine.cancel(run.id).action == "requested"
    joined(thread, "the cancel did not interrupt the model call")
    assert box["run"].status is RunStatus.CANCELLED
    assert not [s for s in engine.steps(run.id) if s.kind is StepKind.LLM]
    assert engine.get_run(run.id).status is RunStatus.CANCELLED


def test_cancel_while_tools_run_records_them_first(engine: Engine) -> None:
    running, asked = threading.Event(), threading.Event()

    @tool
    def nap() -> str:
        """Rest until the cancel has been asked for."""
        running.set()
        asked.wait(SAFETY_NET)
        return "rested"

    name = unique("cancel-tools")
    model = ScriptedModel(name, [tools(call("nap", {})), text("unreachable")])
    Agent(name=name, model=model.model, tools=[nap])
    run = engine.start(name)
    thread, box = run_in_thread(engine, run.id)
    wait_for(running.is_set, what="the tool's call")
    engine.cancel(run.id)
    asked.set()  # the tool ends after the cancel, within its grace
    joined(thread, "the cancelled execution never ended")
    assert box["run"].status is RunStatus.CANCELLED
    tool_steps = [s for s in engine.steps(run.id) if s.kind is StepKind.TOOL]
    assert [s.output for s in tool_steps] == ["rested"]
    checkpoint = engine.checkpoint(run.id)
    assert checkpoint is not None and checkpoint.step_index == 1
    assert checkpoint.messages[-1]["role"] == "tool"
    assert model.call_count == 1


def test_takeover_fences_out_the_old_execution(engine: Engine, pg_store: Any) -> None:
    # The takeover is staged by expiring the claim with SQL and deleting the
    # Redis lease, as a dead owner would leave them.
    name = unique("takeover")
    errors: list[BaseException] = []

    def script(request: Request) -> Any:
        # The first execution's first call is slow; the new owner's are quick.
        slow = request.step == 1 and not takeover_started.is_set()
        if request.step < 3:
            return tools(call("lookup", {"q": str(request.step)}), latency=2.0 if slow else 0)
        return text("done by the new owner")

    takeover_started = threading.Event()
    model = ScriptedModel(name, script)
    Agent(
        name=name,
        model=model.model,
        tools=[lookup],
        on_error=lambda run_id, exc: errors.append(exc),
    )
    run = engine.start(name)
    old, old_box = run_in_thread(engine, run.id)
    wait_for(lambda: model.call_count == 1)

    # The old owner looks dead: its claim expired and its lease is gone.
    takeover_started.set()
    with pg_store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE runs SET claim_expires_at = now() - interval '1 second' WHERE id = :id"
            ),
            {"id": run.id},
        )
    engine.leases.redis.delete(lease_key(run.id))
    new_run = engine.execute(run.id)
    assert new_run is not None and new_run.status is RunStatus.COMPLETED
    epoch = engine.get_run(run.id)
    old.join(10)
    assert old_box["run"] is None  # it wrote nothing and settled nothing
    assert len(errors) == 1 and isinstance(errors[0], LeaseLostError)

    steps = engine.steps(run.id)
    assert [s.index for s in steps if s.kind is StepKind.LLM] == [1, 2, 3]
    assert len([s for s in steps if s.kind is StepKind.TOOL]) == 2
    assert epoch.status is RunStatus.COMPLETED and epoch.output == "done by the new owner"


def test_structured_output_and_state(engine: Engine) -> None:
    class Notes(pydantic.BaseModel):
        seen: int = 0
        label: str = ""

    class Verdict(pydantic.BaseModel):
        severity: int
        summary: str

    name = unique("structured")
    model = ScriptedModel(
        name,
        [
            tools(call("update_state", {"patch": {"seen": 1, "label": "crash"}})),
            tools(call("update_state", {"patch": {"seen": "many"}})),  # invalid: a tool error
            tools(call("final_result", {"severity": 9})),  # missing summary: a tool error
            tools(call("final_result", {"severity": 2, "summary": "restart fixes it"})),
        ],
    )
    Agent(name=name, model=model.model, state=Notes, output=Verdict)
    done = engine.execute(engine.start(name).id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert done.output == {"severity": 2, "summary": "restart fixes it"}
    assert done.state == {"seen": 1, "label": "crash"}
    assert "get_state" in model.calls[0].tool_names
    assert "final_result" in model.calls[0].tool_names
    assert "validation error" in model.calls[2].tool_results()[-1]["content"]
    assert "summary" in model.calls[3].tool_results()[-1]["content"]


def test_thread_continues_the_conversation_and_state(engine: Engine) -> None:
    class Memory(pydantic.BaseModel):
        count: int = 0

    name = unique("thread")

    def script(request: Request) -> Any:
        users = [m for m in request.messages if m["role"] == "user"]
        if request.messages[-1]["role"] == "user":
            return tools(call("update_state", {"patch": {"count": len(users)}}))
        return text(f"seen {len(users)} triggers")

    model = ScriptedModel(name, script)
    Agent(name=name, model=model.model, state=Memory)
    first = engine.start(name, {"n": 1}, thread="t-1")
    second = engine.start(name, {"n": 2}, thread="t-1")
    assert first.concurrency_key == second.concurrency_key == "thread:t-1"
    assert engine.execute(second.id) is None  # the older run on the thread goes first
    assert engine.execute(first.id).output == "seen 1 triggers"  # type: ignore[union-attr]
    done = engine.execute(second.id)
    assert done is not None and done.output == "seen 2 triggers"
    assert done.state == {"count": 2}
    history = engine.checkpoint(second.id)
    assert history is not None
    assert [m["role"] for m in history.messages][:4] == ["user", "assistant", "tool", "assistant"]


def test_instructions_go_as_system_message_and_are_not_stored(engine: Engine) -> None:
    name = unique("system")
    model = ScriptedModel(name, [text("ok")])
    Agent(name=name, model=model.model, instructions="You triage bugs.")
    done = engine.execute(engine.start(name).id)
    assert done is not None
    assert model.calls[0].messages[0] == {"role": "system", "content": "You triage bugs."}
    checkpoint = engine.checkpoint(done.id)
    assert checkpoint is not None
    assert all(m["role"] != "system" for m in checkpoint.messages)


def test_duplicate_execute_is_harmless(engine: Engine) -> None:
    name = unique("dup")
    model = ScriptedModel(name, [tools(call("lookup", {"q": "x"}), latency=0.5), text("ok")])
    Agent(name=name, model=model.model, tools=[lookup])
    run = engine.start(name)
    threads = [run_in_thread(engine, run.id) for _ in range(5)]
    for thread, _ in threads:
        thread.join(10)
    results = [box.get("run") for _, box in threads]
    assert sum(1 for r in results if r is not None) == 1
    assert model.call_count == 2
    assert len([s for s in engine.steps(run.id) if s.kind is StepKind.LLM]) == 2
