"""Cost from litellm's cost map, and ``Budget(max_cost_usd=...)`` (issue 13,
acceptance 5). A scripted model priced at 1e-5 USD per input
token and 2e-5 per output token, answering with 1000 + 500 tokens, costs
exactly 0.02 USD a step."""

from __future__ import annotations

import pytest

from runner import Agent, ApprovalPolicy, Budget, Engine, tool
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from store.models import RunStatus, StepKind
from tests.helpers import unique

PRICE = (0.000_01, 0.000_02)
USAGE = (1000, 500)
STEP_USD = 0.02
BUDGET_USD = 0.05  # crossed by the third step (0.06), not at a step boundary

looked: list[str] = []


@tool
def look(q: str) -> str:
    """Look something up."""
    looked.append(q)
    return f"found {q}"


@tool
def pay(amount: int) -> str:
    """Pay (needs a person's approval)."""
    return f"paid {amount}"


def forever(request: Request) -> Reply:
    """A model that never stops calling tools."""
    return tools(call("look", {"q": f"step {request.step}"}), usage=USAGE)


def priced_agent(script: object, budget: Budget, **kwargs: object) -> tuple[str, ScriptedModel]:
    name = unique("cost")
    model = ScriptedModel(name, script, price=PRICE)  # type: ignore[arg-type]
    Agent(name=name, model=model.model, budget=budget, **kwargs)  # type: ignore[arg-type]
    return name, model


def llm_costs(engine: Engine, run_id: str) -> list[float | None]:
    return [s.cost_usd for s in engine.steps(run_id) if s.kind is StepKind.LLM]


def test_the_budget_fails_the_run_before_the_step_after_the_one_that_crossed_it(
    engine: Engine,
) -> None:
    looked.clear()
    name, model = priced_agent(forever, Budget(max_steps=20, max_cost_usd=BUDGET_USD), tools=[look])
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.FAILED
    assert done.error is not None and done.error.code == "budget_exceeded"
    assert "$0.060000" in done.error.message and "$0.050000" in done.error.message
    # Steps 1 and 2 (0.04) stay under the budget; step 3 crosses it and runs to
    # its end (its tool call included); step 4 is never asked of the model.
    model.assert_called(3)
    assert looked == ["step 1", "step 2", "step 3"]
    assert done.steps_used == 3
    costs = llm_costs(engine, run.id)
    assert costs == [pytest.approx(STEP_USD)] * 3
    stored = engine.get_run(run.id)
    assert stored.cost_usd == pytest.approx(sum(c or 0.0 for c in costs))
    assert stored.cost_usd == pytest.approx(3 * STEP_USD)


def test_the_cost_budget_counts_over_every_execution_of_the_run(engine: Engine) -> None:
    """Two steps (0.04) before an approval pause; the execution after the
    approval starts from the stored cost and stops after one more step."""

    def pay_then_look(request: Request) -> Reply:
        if request.step == 2:
            return tools(call("pay", {"amount": 5}), usage=USAGE)
        return forever(request)

    name, model = priced_agent(
        pay_then_look,
        Budget(max_cost_usd=BUDGET_USD),
        tools=[look, pay],
        approvals={"pay": ApprovalPolicy(expires_in=3600)},
    )
    run = engine.start(name)
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING and waiting.waiting
    assert engine.get_run(run.id).cost_usd == pytest.approx(2 * STEP_USD)
    engine.decide(waiting.waiting.approval_id, True, trusted=True)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.FAILED
    assert done.error is not None and done.error.code == "budget_exceeded"
    model.assert_called(3)
    assert engine.get_run(run.id).cost_usd == pytest.approx(3 * STEP_USD)
    assert llm_costs(engine, run.id) == [pytest.approx(STEP_USD)] * 3


def test_a_priced_run_that_finishes_within_budget_sums_its_steps(engine: Engine) -> None:
    script = [tools(call("look", {"q": "one"}), usage=USAGE), text("done", usage=(300, 40))]
    name, _ = priced_agent(script, Budget(max_cost_usd=1.0), tools=[look])
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    costs = llm_costs(engine, run.id)
    assert costs == [pytest.approx(STEP_USD), pytest.approx(300 * PRICE[0] + 40 * PRICE[1])]
    assert engine.get_run(run.id).cost_usd == pytest.approx(sum(c or 0.0 for c in costs))


def test_an_unpriced_model_records_no_cost_and_never_trips_the_cost_budget(
    engine: Engine,
) -> None:
    name = unique("free")
    script = [tools(call("look", {"q": str(i)}), usage=USAGE) for i in range(6)] + [text("ok")]
    model = ScriptedModel(name, script)
    Agent(
        name=name,
        model=model.model,
        tools=[look],
        budget=Budget(max_cost_usd=0.000_001),  # any charge at all would trip it
    )
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED, done
    model.assert_called(7)
    assert engine.get_run(run.id).cost_usd == 0.0
    assert llm_costs(engine, run.id) == [0.0] * 7  # free, as scripted models are by default


def test_a_scripted_price_must_be_two_numbers_at_least_zero() -> None:
    from runner.core.errors import InvalidInput

    for bad in [(-1e-6, 0.0), (float("nan"), 0.0), (1e-6,), (0.0, float("inf"))]:
        with pytest.raises(InvalidInput, match="price is"):
            ScriptedModel(unique("bad-price"), [text("x")], price=bad)  # type: ignore[arg-type]
