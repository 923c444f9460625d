"""The testing kit as a user meets it: the ``runwright_engine`` fixture of the
pytest plugin (found through its entry point), running agents in-process on a
database of the test's own, deciding approvals by tool name (with edited
arguments, or for the rest of the run), answering the model's questions, moving the clock
instead of sleeping, and crashing a run at each named point to prove that its
effects ran at most once and its history is whole."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pydantic
import pytest

from runner import Agent, ApprovalPolicy, effect, tool
from runner.core.errors import InvalidApprovalInput, InvalidInput, ModelRequestsBlocked
from runner.testing import (
    Request,
    ScriptedModel,
    TestEngine,
    call,
    output,
    rate_limited,
    text,
    tools,
)
from store.models import EffectStatus, RunStatus
from tests.helpers import snapshot


class Refund(pydantic.BaseModel):
    order: str
    refunded: bool


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Shop:
    """An agent with a read tool, an approval-gated effect and a structured
    output; ``refunds`` is the effect's own evidence of what it did."""

    def __init__(
        self,
        script: list[object] | None = None,
        *,
        approval: bool | ApprovalPolicy = False,
        at_least_once: bool = False,
    ) -> None:
        self.name = unique("shop")
        self.refunds: list[str] = []

        @tool
        def lookup(order: str) -> dict[str, object]:
            """Look an order up."""
            return {"order": order, "paid": 30}

        @effect(retry="at_least_once" if at_least_once else "at_most_once")
        def refund(order: str, idempotency_key: str) -> str:
            """Refund an order."""
            self.refunds.append(order)
            return f"refunded {order}"

        self.model = ScriptedModel(
            self.name,
            script
            or [
                tools(call("lookup", {"order": "A1"})),
                tools(call("refund", {"order": "A1"})),
                output(Refund(order="A1", refunded=True)),
            ],
        )
        self.agent = Agent(
            name=self.name,
            model="openai/gpt-4o-mini",  # what production uses; tests override it
            tools=[lookup, refund],
            approvals={"refund": approval} if approval else {},
            output=Refund,
        )


def test_a_scripted_run_completes_with_its_output(runwright_engine: TestEngine) -> None:
    shop = Shop()
    with shop.agent.override(model=shop.model):
        run = runwright_engine.run(shop.agent, {"order": "A1"})
    assert run.status is RunStatus.COMPLETED
    assert run.output_as(Refund) == Refund(order="A1", refunded=True)
    assert shop.refunds == ["A1"]
    assert [c.name for c in runwright_engine.tool_calls(run.id)] == [
        "lookup",
        "refund",
        "final_result",
    ]
    assert [(e.tool, e.status) for e in runwright_engine.effects(run.id)] == [
        ("refund", EffectStatus.COMPLETED)
    ]
    shop.model.assert_complete()
    assert shop.agent.model == "openai/gpt-4o-mini"  # the override ended with the block


def test_an_override_ends_when_its_block_raises_and_overrides_nest() -> None:
    shop = Shop()
    other = ScriptedModel(unique("other"), [text("hi")])
    with pytest.raises(RuntimeError), shop.agent.override(model=shop.model):
        with shop.agent.override(model=other):
            assert shop.agent.model == other.model
        assert shop.agent.model == shop.model.model
        raise RuntimeError("the test failed inside the block")
    assert shop.agent.model == "openai/gpt-4o-mini"
    refused = pytest.raises(InvalidInput, match="takes a litellm model string or a ScriptedModel")
    with refused, shop.agent.override(model=42):  # type: ignore[arg-type]
        pass


def test_approve_and_deny_by_tool_name(runwright_engine: TestEngine) -> None:
    shop = Shop(approval=True)
    with shop.agent.override(model=shop.model):
        run = runwright_engine.run(shop.agent)
        assert run.status is RunStatus.WAITING and shop.refunds == []
        assert [a.tool_name for a in runwright_engine.pending(run.id)] == ["refund"]
        with pytest.raises(
            InvalidInput, match=r"no pending approval of 'lookup' \(pending: refund\)"
        ):
            runwright_engine.approve(run.id, "lookup")
        done = runwright_engine.approve(run.id, "refund")
    assert done.status is RunStatus.COMPLETED and shop.refunds == ["A1"]

    denied = Shop(
        approval=True,
        script=[tools(call("refund", {"order": "B2"})), output(Refund(order="B2", refunded=False))],
    )
    with denied.agent.override(model=denied.model):
        run = runwright_engine.run(denied.agent)
        done = runwright_engine.deny(run.id, "refund", reason="not this one")
    assert done.status is RunStatus.COMPLETED and denied.refunds == []
    told = denied.model.calls[-1].tool_results()[-1]["content"]
    assert "denied" in told and "not this one" in told


def test_an_approval_expires_when_the_clock_passes_it(runwright_engine: TestEngine) -> None:
    shop = Shop(
        approval=ApprovalPolicy(expires_in=timedelta(hours=1), on_expire="deny"),
        script=[tools(call("refund", {"order": "C3"})), output(Refund(order="C3", refunded=False))],
    )
    with shop.agent.override(model=shop.model):
        run = runwright_engine.run(shop.agent)
        assert runwright_engine.advance(timedelta(minutes=59)).expired == 0
        assert runwright_engine.get_run(run.id).status is RunStatus.WAITING
        report = runwright_engine.advance(timedelta(minutes=2))
    assert report.expired == 1
    done = runwright_engine.get_run(run.id)
    assert done.status is RunStatus.COMPLETED and shop.refunds == []
    assert "expired" in shop.model.calls[-1].tool_results()[-1]["content"]
    # An hour passed for the run, not for the test: the system's clock is
    # still short of the expiry the kit's clock passed.
    [expired] = runwright_engine.engine.approvals(run.id)
    assert expired.expires_at is not None and datetime.now(UTC) < expired.expires_at


def test_a_durable_retry_wait_is_skipped_not_slept(runwright_engine: TestEngine) -> None:
    """A 429 asking for ten minutes sends the run back to the queue until then
    (longer than a call waits in-process); the kit moves the clock there."""
    model = ScriptedModel(unique("patient"), [rate_limited(retry_after=600), text("done")])
    agent = Agent(name=unique("patient"), model=model.model)
    run = runwright_engine.run(agent)
    assert run.status is RunStatus.COMPLETED and run.output == "done"
    # The wait, less the real time that passed meanwhile: skipped, not slept.
    assert runwright_engine.clock.offset >= timedelta(seconds=590)
    assert len(model.calls) >= 2


def test_a_real_model_call_is_blocked_with_how_to_allow_it(runwright_engine: TestEngine) -> None:
    shop = Shop()
    with pytest.raises(ModelRequestsBlocked) as blocked:
        runwright_engine.run(shop.agent)
    line = str(blocked.value)
    assert "\n" not in line and "openai/gpt-4o-mini" in line
    assert "runwright_allow_model_requests" in line


@pytest.mark.parametrize(
    ("point", "ran"),
    [
        ("after_journal", 1),  # the model asked; nothing ran; the recovery runs it
        ("after_effect_start", 0),  # journaled started, never called: not run again
        ("after_effect_call", 1),  # it ran; its outcome never written: not run again
        ("after_effect_complete", 1),  # its recorded result is reused
        ("after_commit", 1),
    ],
)
def test_a_crash_at_each_point_runs_the_effect_at_most_once(
    runwright_engine: TestEngine, point: str, ran: int
) -> None:
    script = [
        tools(call("lookup", {"order": "A1"}), call("refund", {"order": "A1"})),
        output(Refund(order="A1", refunded=True)),
    ]
    shop = Shop(script=script)
    with shop.agent.override(model=shop.model):
        run = runwright_engine.start(shop.agent)
        crash = runwright_engine.crash(run.id, at=point)
        assert crash.run.status is RunStatus.RUNNING  # it died holding its claim
        with pytest.raises(InvalidInput, match="call take_over"):
            runwright_engine.run_until_ended(run.id)
        done = runwright_engine.take_over(run.id)
    assert done.status is RunStatus.COMPLETED
    runwright_engine.assert_taken_over(run.id)
    assert len(shop.refunds) == ran
    assert runwright_engine.invocations("refund", run.id) == ran
    assert runwright_engine.invocations("lookup", run.id) >= 1


def test_assert_recovered_catches_an_effect_that_ran_twice(runwright_engine: TestEngine) -> None:
    """An effect declared at-least-once runs again after a crash mid-call:
    the check says so, naming it."""
    shop = Shop(
        at_least_once=True,
        script=[tools(call("refund", {"order": "D4"})), output(Refund(order="D4", refunded=True))],
    )
    with shop.agent.override(model=shop.model):
        run = runwright_engine.start(shop.agent)
        runwright_engine.crash(run.id, at="after_effect_call")
        runwright_engine.take_over(run.id)
    assert shop.refunds == ["D4", "D4"]
    with pytest.raises(AssertionError, match="effect refund ran 2 times"):
        runwright_engine.assert_taken_over(run.id)


def test_a_crash_point_the_run_never_reaches_fails_the_test(runwright_engine: TestEngine) -> None:
    model = ScriptedModel(unique("plain"), [text("hello")])
    agent = Agent(name=unique("plain"), model=model.model)
    run = runwright_engine.start(agent)
    with pytest.raises(AssertionError, match="never reached after_effect_start"):
        runwright_engine.crash(run.id, at="after_effect_start")
    with pytest.raises(InvalidInput, match="unknown crash point"):
        runwright_engine.crash(run.id, at="before_breakfast")


def test_approve_with_edited_arguments_then_for_the_rest_of_the_run(
    runwright_engine: TestEngine,
) -> None:
    kit = runwright_engine
    shop = Shop(
        approval=True,
        script=[
            tools(call("refund", {"order": "A1"})),
            tools(call("refund", {"order": "B2"})),
            tools(call("refund", {"order": "C3"})),
            output(Refund(order="A1", refunded=True)),
        ],
    )
    with shop.agent.override(model=shop.model):
        run = kit.run(shop.agent)
        before = snapshot(kit.store)
        with pytest.raises(InvalidApprovalInput, match="'order' is a required property"):
            kit.approve(run.id, "refund", arguments={})
        assert snapshot(kit.store) == before and shop.refunds == []

        waiting = kit.approve(run.id, "refund", arguments={"order": "A9"}, by="ada")
        assert waiting.status is RunStatus.WAITING and shop.refunds == ["A9"]  # the edit ran
        [first] = [a for a in kit.engine.approvals(run.id) if not a.pending]
        assert (first.input, first.arguments, first.decided_by) == (
            {"order": "A1"},
            {"order": "A9"},
            "ada",
        )
        done = kit.approve(run.id, for_run=True)  # B2 now, and C3 without asking
    assert done.status is RunStatus.COMPLETED and shop.refunds == ["A9", "B2", "C3"]
    [grant] = kit.engine.standing_approvals(run.id)
    assert (grant.tool_name, grant.granted_by) == ("refund", "test")
    assert [a.standing_from is not None for a in kit.engine.approvals(run.id)] == [
        False,
        False,
        True,
    ]


def test_edited_arguments_are_for_one_call(runwright_engine: TestEngine) -> None:
    shop = Shop(
        approval=True,
        script=[
            tools(call("refund", {"order": "A1"}), call("refund", {"order": "B2"})),
            output(Refund(order="A1", refunded=True)),
        ],
    )
    with shop.agent.override(model=shop.model):
        run = runwright_engine.run(shop.agent)
        before = snapshot(runwright_engine.store)
        with pytest.raises(InvalidInput, match="2 pending calls of refund: edited arguments"):
            runwright_engine.approve(run.id, "refund", arguments={"order": "A2"})
        assert snapshot(runwright_engine.store) == before
        # For the rest of the run: one decision approves both calls.
        done = runwright_engine.approve(run.id, "refund", for_run=True)
    assert done.status is RunStatus.COMPLETED and sorted(shop.refunds) == ["A1", "B2"]


class Choice(pydantic.BaseModel):
    action: str


def asking(answer: object = True, questions: int = 1) -> tuple[Agent, ScriptedModel]:
    """An agent whose model asks ``questions`` questions in its first step,
    then says what it was told."""
    name = unique("asking")

    def script(request: Request) -> object:
        if request.step == 1:
            return tools(
                *(call("ask_human", {"question": f"Question {n}?"}) for n in range(questions))
            )
        return text("told " + " | ".join(r["content"] for r in request.tool_results()))

    model = ScriptedModel(name, script)
    return Agent(name=name, model=model.model, ask_human=answer), model  # type: ignore[arg-type]


def test_answer_the_models_question(runwright_engine: TestEngine) -> None:
    kit = runwright_engine
    agent, _ = asking()
    run = kit.run(agent)
    assert run.status is RunStatus.WAITING
    [question] = kit.questions(run.id)
    assert question.question == "Question 0?" and kit.pending(run.id) == []
    with pytest.raises(InvalidInput, match=r"no pending approval \(pending: none\) \(it waits"):
        kit.approve(run.id)
    before = snapshot(kit.store)
    with pytest.raises(InvalidApprovalInput, match=r"should be non-empty|too short"):
        kit.answer(run.id, "")
    assert snapshot(kit.store) == before

    done = kit.answer(run.id, "order A1", by="cy")
    assert done.status is RunStatus.COMPLETED and done.output == "told order A1"
    assert kit.engine.approvals(run.id)[0].decided_by == "cy"
    assert kit.questions(run.id) == []
    with pytest.raises(InvalidInput, match="has no pending question"):
        kit.answer(run.id, "again")


def test_a_structured_answer_and_several_questions(runwright_engine: TestEngine) -> None:
    kit = runwright_engine
    agent, _ = asking(Choice)
    run = kit.run(agent)
    done = kit.answer(run.id, Choice(action="replace"))  # the model, or its dict
    assert done.output == 'told {"action": "replace"}'

    agent, _ = asking(questions=2)
    run = kit.run(agent)
    assert [q.question for q in kit.questions(run.id)] == ["Question 0?", "Question 1?"]
    before = snapshot(kit.store)
    with pytest.raises(InvalidInput, match="waits for 2 answers"):
        kit.answer(run.id, "both")
    assert snapshot(kit.store) == before
