"""``Engine.retry``, ``Engine.fork`` and ``Engine.attempts``: what a retried
or forked run sends to its model and runs of its tools."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from runner import Agent, ApprovalPolicy, Budget, Engine, RunContext, effect, tool
from runner.core import faults
from runner.core.errors import (
    AgentNotFound,
    ForkRepeatsEffects,
    InvalidInput,
    InvalidTransition,
    RanEffect,
)
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from store.models import RunStatus, StepKind
from tests.agents import lookup
from tests.helpers import snapshot, unique
from tests.integration.test_store_recovery import rows_of


def _steps_of(model: ScriptedModel, since: int = 0) -> list[int]:
    return [request.step for request in model.calls[since:]]


def _sent(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as a provider receives them (litellm leaves out empty content)."""
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


class Flaky:
    """An agent of four steps: a lookup, a payment (an effect), a lookup, the
    answer. Step 3's model call fails (a provider error that is not retried)
    while ``failing`` is set."""

    def __init__(self, *, approve_payment: bool = False) -> None:
        self.name = unique("flaky")
        self.failing = True
        self.paid: list[str] = []

        @effect
        def pay(amount: int, idempotency_key: str) -> dict[str, Any]:
            """Pay."""
            self.paid.append(idempotency_key)
            return {"paid": amount}

        self.model = ScriptedModel(self.name, self.script)
        Agent(
            name=self.name,
            model=self.model.model,
            tools=[lookup, pay],
            approvals={"pay": ApprovalPolicy()} if approve_payment else {},
        )

    def script(self, request: Request) -> Reply:
        if request.step == 1:
            return tools(call("lookup", {"q": "order"}))
        if request.step == 2:
            return tools(call("pay", {"amount": 5}))
        if request.step == 3:
            if self.failing:
                return Reply(error="bad_request")
            return tools(call("lookup", {"q": "receipt"}))
        return text("paid")


def test_a_failed_run_retried_goes_on_from_its_last_step(engine: Engine) -> None:
    flaky = Flaky()
    run = engine.start(flaky.name)
    failed = engine.execute(run.id)
    assert failed is not None and failed.status is RunStatus.FAILED
    assert failed.error is not None and failed.error.code == "model_error"
    assert _steps_of(flaky.model) == [1, 2, 3] and len(flaky.paid) == 1
    sent = len(flaky.model.calls)

    flaky.failing = False
    queued = engine.retry(run.id, extra_steps=2)
    assert queued.status is RunStatus.QUEUED and queued.extra_steps == 2
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.output == "paid"
    # Steps 1 and 2 were not sent to the model again, and the payment ran once.
    assert _steps_of(flaky.model, sent) == [3, 4]
    assert len(flaky.paid) == 1
    llm = [s.index for s in engine.steps(run.id) if s.kind is StepKind.LLM]
    assert llm == [1, 2, 3, 4]
    lookups = [s for s in engine.steps(run.id) if s.kind is StepKind.TOOL and s.name == "lookup"]
    assert [s.index for s in lookups] == [1, 3]

    [attempt] = engine.attempts(run.id)
    assert attempt.status is RunStatus.FAILED and attempt.error == failed.error
    assert attempt.steps_used == 2 and attempt.extra_steps == 2
    assert engine.get_run(run.id).error is None


def test_a_cancelled_run_retried_goes_on_where_it_stopped(engine: Engine) -> None:
    name = unique("cancel-retry")
    stops: list[str] = []

    @tool
    def stop_here(ctx: RunContext) -> str:
        """Ask for the run to be cancelled (it stops after this step)."""
        stops.append(ctx.run_id)
        engine.cancel(ctx.run_id)
        return "stopping"

    model = ScriptedModel(
        name, [tools(call("lookup", {"q": "a"})), tools(call("stop_here")), text("resumed")]
    )
    Agent(name=name, model=model.model, tools=[lookup, stop_here])
    run = engine.start(name)
    cancelled = engine.execute(run.id)
    assert cancelled is not None and cancelled.status is RunStatus.CANCELLED
    assert cancelled.cancel_requested and _steps_of(model) == [1, 2]

    queued = engine.retry(run.id)
    assert queued.status is RunStatus.QUEUED and not queued.cancel_requested
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.output == "resumed"
    assert _steps_of(model) == [1, 2, 3] and len(stops) == 1
    [attempt] = engine.attempts(run.id)
    assert attempt.status is RunStatus.CANCELLED and attempt.steps_used == 2


def test_a_run_cancelled_while_waiting_waits_again_when_retried(engine: Engine) -> None:
    flaky = Flaky(approve_payment=True)
    flaky.failing = False
    run = engine.start(flaky.name)
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.waiting is not None
    approval_id = waiting.waiting.approval_id
    engine.cancel(run.id)
    sent = len(flaky.model.calls)

    engine.retry(run.id)
    paused = engine.execute(run.id)  # re-pauses on the same request, no model call
    assert paused is not None and paused.status is RunStatus.WAITING
    assert paused.waiting is not None and paused.waiting.approval_id == approval_id
    assert len(flaky.model.calls) == sent and flaky.paid == []

    engine.decide(approval_id, True, trusted=True)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert len(flaky.paid) == 1 and _steps_of(flaky.model, sent) == [3, 4]
    assert [a.decision for a in engine.approvals(run.id)] == ["approved"]


def test_a_retry_racing_itself_runs_the_run_once(engine: Engine) -> None:
    flaky = Flaky()
    run = engine.start(flaky.name)
    engine.execute(run.id)
    flaky.failing = False
    sent = len(flaky.model.calls)
    enqueued: list[str] = []
    racer = Engine(
        engine.store,
        leases=engine.leases,
        settings=engine.settings,
        enqueue=enqueued.append,
        model_retries=0,
    )
    barrier = threading.Barrier(2)
    results: list[Any] = []

    refused: list[InvalidTransition] = []

    def retry_and_execute() -> None:
        barrier.wait()
        try:
            results.append(racer.retry(run.id))
        except InvalidTransition as exc:
            # The other thread's retry and execution finished first: the run
            # has completed, and a completed run is not retried.
            refused.append(exc)
            return
        results.append(racer.execute(run.id))

    threads = [threading.Thread(target=retry_and_execute) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    racer.close()
    assert not any(thread.is_alive() for thread in threads)
    # One retry queued it; the other found it live (queued or running), or
    # completed if it came that late.
    assert enqueued == [run.id]
    assert [str(exc) for exc in refused] in (
        [],
        [f"run {run.id} completed; a completed run cannot be retried"],
    )
    assert len(engine.attempts(run.id)) == 1
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    assert _steps_of(flaky.model, sent) == [3, 4] and len(flaky.paid) == 1


def test_a_completed_run_cannot_be_retried(engine: Engine) -> None:
    flaky = Flaky()
    flaky.failing = False
    run = engine.start(flaky.name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    with pytest.raises(InvalidTransition) as refused:
        engine.retry(run.id)
    assert str(refused.value) == f"run {run.id} completed; a completed run cannot be retried"
    assert engine.get_run(run.id) == done and engine.attempts(run.id) == []


@pytest.fixture
def five_steps() -> Iterator[tuple[str, ScriptedModel]]:
    """An agent of five steps: four lookups, then the answer."""
    name = unique("five")

    def script(request: Request) -> Reply:
        if request.step < 5:
            return tools(call("lookup", {"q": f"step {request.step}"}))
        return text("the original's answer")

    model = ScriptedModel(name, script)
    Agent(name=name, model=model.model, tools=[lookup])
    yield name, model


def test_a_fork_after_step_two_shares_that_history_then_goes_its_own_way(
    engine: Engine, five_steps: tuple[str, ScriptedModel]
) -> None:
    name, model = five_steps
    run = engine.start(name)
    original = engine.execute(run.id)
    assert original is not None and original.status is RunStatus.COMPLETED
    history = engine.checkpoint(run.id)
    assert history is not None and history.step_index == 5
    rows = rows_of(engine.store, run.id)  # type: ignore[arg-type]
    calls = len(model.calls)

    other = unique("other")
    other_model = ScriptedModel(other, [text("never used")] * 2 + [text("the fork's answer")])
    Agent(name=other, model=other_model.model, tools=[lookup])
    fork = engine.fork(run.id, 2, agent=other, model=other_model.model, id="fork-1")
    assert fork.status is RunStatus.QUEUED and fork.agent == other
    assert (fork.forked_from, fork.forked_at_step, fork.model) == (run.id, 2, other_model.model)
    assert fork.extra_steps == 2 and fork.usage.total == 0
    assert fork.trigger.id == "fork-1" and fork.trigger.payload == run.trigger.payload
    assert engine.fork(run.id, 2, agent=other, id="fork-1") == fork  # idempotent

    done = engine.execute(fork.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert done.output == "the fork's answer"
    forked = engine.checkpoint(fork.id)
    assert forked is not None and forked.step_index == 3
    # The original's history through step 2 (the trigger and two steps of a
    # call and its result), then the fork's own answer.
    assert forked.messages[:5] == history.messages[:5]
    assert forked.messages[5:] == [{"role": "assistant", "content": "the fork's answer"}]
    assert history.messages[5]["tool_calls"][0]["function"]["name"] == "lookup"
    # One model call, step 3, sent exactly that shared history.
    [request] = other_model.calls
    assert request.step == 3
    assert _sent(request.messages) == _sent(history.messages[:5])
    assert len(model.calls) == calls
    assert [s.index for s in engine.steps(fork.id) if s.kind is StepKind.LLM] == [3]
    assert engine.get_run(fork.id).usage.total == 15

    assert rows_of(engine.store, run.id) == rows  # type: ignore[arg-type]


def test_fork_refusals(engine: Engine, five_steps: tuple[str, ScriptedModel]) -> None:
    name, _ = five_steps
    run = engine.start(name)
    engine.execute(run.id)
    with pytest.raises(InvalidInput, match="steps 1 to 5, not at step 6"):
        engine.fork(run.id, 6)
    with pytest.raises(AgentNotFound, match="no agent named 'nobody'"):
        engine.fork(run.id, 2, agent="nobody")
    with pytest.raises(InvalidInput, match="invalid fork id"):
        engine.fork(run.id, 2, id=7)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="the trigger id contains a NUL"):
        engine.fork(run.id, 2, id="bad\x00id")
    assert [r.id for r in engine.list_runs()] == [run.id]


def test_a_fork_of_a_waiting_run_asks_for_its_own_approval(engine: Engine) -> None:
    """Forked before a step that waits for approval, the new run asks again,
    with an approval of its own; the original keeps waiting for its own."""
    flaky = Flaky(approve_payment=True)
    run = engine.start(flaky.name)
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.waiting is not None
    rows = rows_of(engine.store, run.id)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"no result \(pay\); fork at another step"):
        engine.fork(run.id, 2)

    fork = engine.fork(run.id, 1)
    paused = engine.execute(fork.id)
    assert paused is not None and paused.status is RunStatus.WAITING
    assert paused.waiting is not None
    assert paused.waiting.approval_id != waiting.waiting.approval_id
    assert paused.waiting.tool_name == "pay" and flaky.paid == []
    assert rows_of(engine.store, run.id) == rows  # type: ignore[arg-type]
    assert engine.get_run(run.id).waiting == waiting.waiting


def test_a_fork_past_an_effect_that_ran_is_refused_unless_rerun_effects(engine: Engine) -> None:
    """Issue 23: a fork runs the effects after its step again, under its own
    idempotency keys. So a fork before a payment that was made is refused,
    naming it, and writes nothing; ``rerun_effects=True`` forks, and the
    payment is made again under a key downstream has never seen."""
    flaky = Flaky()
    flaky.failing = False
    run = engine.start(flaky.name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert len(flaky.paid) == 1  # step 2's payment
    before = snapshot(engine.store)  # type: ignore[arg-type]

    with pytest.raises(ForkRepeatsEffects) as refused:
        engine.fork(run.id, 1)
    assert refused.value.effects == [RanEffect("pay", 2, completed=True)]
    assert (refused.value.run_id, refused.value.at_step) == (run.id, 1)
    assert str(refused.value) == (
        f"run {run.id} ran effects after step 1; a fork there would run them again under"
        " new idempotency keys, which downstream deduplication does not catch (fork at a"
        " later step, or pass rerun_effects=True to fork anyway): pay (step 2)"
    )
    assert isinstance(refused.value, InvalidTransition)
    with pytest.raises(ForkRepeatsEffects):
        engine.fork(run.id, 1, id="fork-before-pay")  # with an id of its own, too
    assert snapshot(engine.store) == before  # type: ignore[arg-type]  # no run, no row
    assert [r.id for r in engine.list_runs()] == [run.id]

    after = engine.fork(run.id, 2)  # the payment is in the fork's history: nothing repeats
    assert after.forked_at_step == 2

    fork = engine.fork(run.id, 1, rerun_effects=True)
    assert (fork.forked_from, fork.forked_at_step) == (run.id, 1)
    forked = engine.execute(fork.id)
    assert forked is not None and forked.status is RunStatus.COMPLETED
    # What the refusal warned of: paid again, under a key of the fork's.
    assert len(flaky.paid) == 2 and flaky.paid[1].startswith(f"{fork.id}:")
    assert flaky.paid[0].startswith(f"{run.id}:")


def test_a_fork_past_an_effect_of_unknown_outcome_is_refused(engine: Engine) -> None:
    """An effect that started in a step whose step commit never committed (the process
    died mid-call) may have taken place: a fork at the checkpoint before it
    is refused, and the effect named with its outcome unknown."""
    flaky = Flaky()
    run = engine.start(flaky.name)
    faults.arm(faults.AFTER_EFFECT_START, "raise")
    try:
        with pytest.raises(faults.FaultInjected):
            engine.execute(run.id)
    finally:
        faults.disarm()
    checkpoint = engine.checkpoint(run.id)
    assert checkpoint is not None and checkpoint.step_index == 1  # step 2: journaled only
    assert flaky.paid == []  # the process "died" before the call returned

    with pytest.raises(ForkRepeatsEffects) as refused:
        engine.fork(run.id, 1)
    assert refused.value.effects == [RanEffect("pay", 2, completed=False)]
    assert str(refused.value).endswith(": pay (step 2, outcome unknown)")
    assert [r.id for r in engine.list_runs()] == [run.id]
    assert engine.fork(run.id, 1, rerun_effects=True).forked_from == run.id


def test_an_effect_that_failed_does_not_refuse_a_fork(engine: Engine) -> None:
    """An effect whose call raised did not take place (the journal keeps its
    error): only completed effects, and those whose outcome is unknown, count."""
    name = unique("declined")

    @effect
    def charge(amount: int) -> str:
        """Charge (the card is declined)."""
        raise RuntimeError("card declined")

    script = [tools(call("lookup", {"q": "card"})), tools(call("charge", {"amount": 5}))]
    model = ScriptedModel(name, [*script, text("declined")])
    Agent(name=name, model=model.model, tools=[lookup, charge])
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    [step] = [s for s in engine.steps(run.id) if s.name == "charge"]
    assert step.index == 2 and step.error is not None
    assert engine.fork(run.id, 1).forked_from == run.id


def test_a_fork_on_another_model_calls_that_model(
    engine: Engine, five_steps: tuple[str, ScriptedModel]
) -> None:
    name, original = five_steps
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    other = ScriptedModel(unique("other-model"), lambda request: text("from the other model"))
    fork = engine.fork(run.id, 2, model=other.model)
    assert fork.model == other.model
    calls_before = original.call_count
    forked = engine.execute(fork.id)
    assert forked is not None and forked.status is RunStatus.COMPLETED
    assert forked.output == "from the other model"
    assert original.call_count == calls_before  # the fork never called the agent's model
    assert _steps_of(other) == [3]
    llm = [s for s in engine.steps(fork.id) if s.kind is StepKind.LLM]
    assert [(s.index, s.name) for s in llm] == [(3, other.model)]


def test_extra_steps_let_a_run_over_budget_go_on(engine: Engine) -> None:
    """A run that failed budget_exceeded is retried with more steps and completes."""
    name = unique("budget")
    model = ScriptedModel(
        name,
        lambda r: tools(call("lookup", {"q": str(r.step)})) if r.step < 4 else text("done"),
    )

    Agent(name=name, model=model.model, tools=[lookup], budget=Budget(max_steps=2))
    run = engine.start(name)
    failed = engine.execute(run.id)
    assert failed is not None and failed.status is RunStatus.FAILED
    assert failed.error is not None and failed.error.code == "budget_exceeded"
    assert engine.retry(run.id).status is RunStatus.QUEUED
    again = engine.execute(run.id)  # still 2 steps: fails again at step 3
    assert again is not None and again.error is not None
    assert again.error.code == "budget_exceeded"
    assert engine.retry(run.id, extra_steps=2).extra_steps == 2
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED and done.output == "done"
    assert _steps_of(model) == [1, 2, 3, 4]  # no step was sent twice
    assert [a.status for a in engine.attempts(run.id)] == [RunStatus.FAILED] * 2
