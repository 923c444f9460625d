"""People beyond yes and no (docs/approvals.md): an approval with edited
arguments, a denial that tells the model or ends the run, a question the
model asks and a person answers, a tool approved for the rest of the run, and
several of them in one step decided in any order."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Annotated, Any, Literal

import pydantic
import pytest

from runner import (
    Agent,
    ApprovalError,
    ApprovalPolicy,
    ApprovalRequest,
    AskHuman,
    Budget,
    Engine,
    InvalidApprovalInput,
    effect,
    tool,
)
from runner.core.coordination.leases import Leases
from runner.core.errors import WrongRequestKind
from runner.core.observe import Observer
from runner.core.settings import Settings
from runner.testing import Request, ScriptedModel, call, text, tools
from store.events import EventType
from store.models import Approval, Decision, RequestKind, Run, RunStatus, StepKind
from store.postgres import PostgresStore
from tests.helpers import expire_approval, snapshot


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Ledger:
    """A refund effect and a plain lookup tool that record their calls."""

    def __init__(self) -> None:
        self.refunds: list[tuple[int, str]] = []
        self.lookups: list[str] = []
        self.lock = threading.Lock()

        @effect
        def refund(
            amount: Annotated[int, pydantic.Field(ge=1, le=1000)], idempotency_key: str
        ) -> dict[str, Any]:
            """Refund money to the customer."""
            with self.lock:
                self.refunds.append((amount, idempotency_key))
            return {"refunded": amount}

        @tool
        def lookup(order: str) -> str:
            """Look an order up."""
            self.lookups.append(order)
            return f"order {order}: paid"

        self.tools = [refund, lookup]


class Notes:
    """A notifier that keeps what it is handed."""

    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []

    def __call__(self, request: ApprovalRequest) -> None:
        self.requests.append(request)


def agent(script: Any, **options: Any) -> tuple[str, ScriptedModel, Ledger]:
    name = unique("people")
    ledger = Ledger()
    model = ScriptedModel(name, script)
    options.setdefault("approvals", {"refund": True})
    Agent(name=name, model=model.model, tools=ledger.tools, **options)
    return name, model, ledger


def steps_of(*replies: Any) -> Any:
    """A script: the n-th request gets the n-th reply, the rest ``done``."""

    def script(request: Request) -> Any:
        if request.step <= len(replies):
            return replies[request.step - 1]
        return text("done")

    return script


def calls_in(request: Request) -> dict[str, Any]:
    """The arguments of each tool call the request's history shows, by call id."""
    return {
        c["id"]: json.loads(c["function"]["arguments"])
        for m in request.messages
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or ()
    }


def results_in(request: Request) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request.tool_results()}


# ------------------------------------------------------------- edits


def test_an_edit_runs_the_effect_once_with_the_persons_arguments(
    approvals_engine: Engine, queued: list[str]
) -> None:
    engine = approvals_engine
    name, model, ledger = agent(steps_of(tools(call("refund", {"amount": 125}))))
    run = engine.start(name, {"ticket": 7})
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    [asked] = engine.approvals(run.id)
    assert asked.input == {"amount": 125} and asked.kind is RequestKind.APPROVAL
    assert asked.schema["properties"]["amount"]["maximum"] == 1000  # the tool's own schema

    resumed = engine.decide(
        asked.approval_id, True, trusted=True, by="ada", arguments={"amount": 100}
    )
    assert resumed.status is RunStatus.QUEUED
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED

    # Once, with the person's amount, under the call's own idempotency key.
    assert ledger.refunds == [(100, f"{run.id}:{asked.tool_call_id}")]
    [journaled] = engine.effects(run.id)
    assert journaled.key == f"{run.id}:{asked.tool_call_id}" and journaled.input == {"amount": 100}
    decided = engine.approvals(run.id)[0]
    assert (decided.input, decided.arguments, decided.decided_by) == (
        {"amount": 125},
        {"amount": 100},
        "ada",
    )
    assert decided.edited and decided.decision is Decision.APPROVED
    # The model's next request shows the call as it ran, and its result says why.
    after = model.calls[1]
    assert calls_in(after)[asked.tool_call_id] == {"amount": 100}
    told = json.loads(results_in(after)[asked.tool_call_id])
    assert told["asked_for"] == {"amount": 125} and told["result"] == {"refunded": 100}
    assert "person edited the arguments" in told["note"]
    # The history keeps what the model asked for; the tool step what ran.
    [llm] = [s for s in engine.steps(run.id) if s.kind is StepKind.LLM and s.index == 1]
    [made] = llm.output["message"]["tool_calls"]
    assert json.loads(made["function"]["arguments"]) == {"amount": 125}
    [ran] = [s for s in engine.steps(run.id) if s.kind is StepKind.TOOL]
    assert ran.input == {"amount": 100}
    # The event feed has the model's 125, the person's 100, and who.
    [event] = [
        e.data
        for e in engine.events(run.id, timeout=0)
        if e.type is EventType.APPROVAL and e.data["action"] == "decided"
    ]
    assert (event["input"], event["arguments"], event["edited"], event["decided_by"]) == (
        {"amount": 125},
        {"amount": 100},
        True,
        "ada",
    )


def test_an_edit_that_breaks_the_schema_is_refused_and_decides_nothing(
    approvals_engine: Engine,
) -> None:
    engine = approvals_engine
    notes = Notes()
    name, _, ledger = agent(steps_of(tools(call("refund", {"amount": 125}))), notifier=notes)
    run = engine.start(name)
    engine.execute(run.id)
    [asked] = engine.approvals(run.id)
    token = notes.requests[0].token

    def refused(match: str, **kwargs: Any) -> None:
        before = snapshot(engine.store)
        with pytest.raises(InvalidApprovalInput, match=match):
            engine.decide(asked.approval_id, kwargs.pop("approve", True), **kwargs)
        assert snapshot(engine.store) == before

    refused(
        "at amount, 'lots' is not of type 'integer'", trusted=True, arguments={"amount": "lots"}
    )
    refused("at amount, 5000 is greater than the maximum of 1000", trusted=True,
            arguments={"amount": 5000})  # fmt: skip
    refused("'amount' is a required property", trusted=True, arguments={})
    refused("Additional properties are not allowed", trusted=True,
            arguments={"amount": 5, "to": "me"})  # fmt: skip
    refused("must be a JSON object", trusted=True, arguments=[5])  # type: ignore[arg-type]
    refused("a NUL character", trusted=True, arguments={"amount": 5, "x": "a\x00b"})
    refused("not JSON", trusted=True, arguments={"amount": float("nan")})
    refused("not a denial", approve=False, trusted=True, arguments={"amount": 5})
    refused("not a denial", approve=False, trusted=True, for_run=True)
    # A forged or another approval's token with an edit is refused like any forgery.
    before = snapshot(engine.store)
    with pytest.raises(ApprovalError, match="not valid"):
        engine.decide(asked.approval_id, True, token="forged", arguments={"amount": 1})
    assert snapshot(engine.store) == before

    engine.decide(asked.approval_id, True, token=token, by="link", arguments={"amount": 90})
    # The link replayed with another edit: decided once, nothing changes.
    before = snapshot(engine.store)
    with pytest.raises(ApprovalError, match="already approved"):
        engine.decide(asked.approval_id, True, token=token, arguments={"amount": 999})
    assert snapshot(engine.store) == before
    engine.execute(run.id)
    assert [amount for amount, _ in ledger.refunds] == [90]


# ------------------------------------------------------------- denials


def test_a_denial_reaches_the_model_as_a_persons_refusal(approvals_engine: Engine) -> None:
    engine = approvals_engine
    name, model, ledger = agent(steps_of(tools(call("refund", {"amount": 40}))))
    run = engine.start(name)
    engine.execute(run.id)
    [asked] = engine.approvals(run.id)
    engine.decide(asked.approval_id, False, "refund the shipping only", trusted=True, by="bo")
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert ledger.refunds == []
    assert json.loads(results_in(model.calls[1])[asked.tool_call_id]) == {
        "error": "denied by a human reviewer",
        "reason": "refund the shipping only",
    }


@pytest.mark.parametrize(
    ("agent_rule", "policy_rule", "fails"),
    [("fail", None, True), ("continue", "fail", True), ("fail", "continue", False)],
)
def test_on_deny_fail_ends_the_run_on_a_persons_denial(
    approvals_engine: Engine, agent_rule: str, policy_rule: str | None, fails: bool
) -> None:
    engine = approvals_engine
    name, model, ledger = agent(
        steps_of(tools(call("refund", {"amount": 40}), call("lookup", {"order": "7"}))),
        on_deny=agent_rule,
        approvals={"refund": ApprovalPolicy(on_deny=policy_rule)},  # type: ignore[arg-type]
    )
    run = engine.start(name)
    engine.execute(run.id)
    [asked] = engine.approvals(run.id)
    after = engine.decide(asked.approval_id, False, "no refunds today", trusted=True, by="bo")
    if fails:
        assert after.status is RunStatus.FAILED and after.error is not None
        assert after.error.code == "approval_denied"
        assert after.error.message.startswith("bo denied refund")
        assert "no refunds today" in after.error.message
        assert model.call_count == 1  # the model is not asked again
    else:
        assert after.status is RunStatus.QUEUED
        done = engine.execute(run.id)
        assert done is not None and done.status is RunStatus.COMPLETED
    assert ledger.refunds == [] and ledger.lookups == ["7"]  # the step's other call ran


def test_a_denial_without_a_name_still_ends_a_run_that_fails_on_denials(
    approvals_engine: Engine,
) -> None:
    engine = approvals_engine
    name, _, ledger = agent(steps_of(tools(call("refund", {"amount": 40}))), on_deny="fail")
    run = engine.start(name)
    engine.execute(run.id)
    [asked] = engine.approvals(run.id)
    after = engine.decide(asked.approval_id, False, trusted=True)
    assert after.status is RunStatus.FAILED and after.error is not None
    assert after.error.message.startswith("a person denied refund")
    assert ledger.refunds == []


def test_the_next_run_of_a_thread_sees_an_edited_call_as_it_ran(approvals_engine: Engine) -> None:
    engine = approvals_engine
    name, model, _ = agent(
        lambda request: (
            tools(call("refund", {"amount": 125})) if request.step == 1 else text("done")
        )
    )
    thread = unique("thread")
    first = engine.start(name, thread=thread)
    engine.execute(first.id)
    [asked] = engine.approvals(first.id)
    engine.decide(asked.approval_id, True, trusted=True, arguments={"amount": 100})
    engine.execute(first.id)
    second = engine.start(name, thread=thread)
    engine.execute(second.id)
    assert calls_in(model.calls[2])[asked.tool_call_id] == {"amount": 100}
    assert all(
        m["role"] not in ("approval_request", "approval_response") for m in model.calls[2].messages
    )


def test_on_deny_must_be_continue_or_fail() -> None:
    with pytest.raises(Exception, match="on_deny must be 'continue' or 'fail'"):
        Agent(name=unique("bad"), model="scripted/x", on_deny="explode", register=False)  # type: ignore[arg-type]
    with pytest.raises(Exception, match="on_deny must be 'continue' or 'fail'"):
        ApprovalPolicy(on_deny="later")  # type: ignore[arg-type]


# ----------------------------------------------------------- questions


def test_a_question_waits_for_a_person_and_the_answer_is_its_result(
    approvals_engine: Engine, queued: list[str]
) -> None:
    engine = approvals_engine
    notes = Notes()
    name, model, _ = agent(
        steps_of(tools(call("ask_human", {"question": "Which order is it about?"}))),
        ask_human=True,
        notifier=notes,
    )
    run = engine.start(name)
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    assert waiting.claim is None  # no worker holds it
    assert "ask_human" in model.calls[0].tool_names
    assert waiting.waiting is not None and waiting.waiting.kind == "input"
    [question] = engine.approvals(run.id)
    assert question.kind is RequestKind.INPUT and question.question == "Which order is it about?"
    [note] = notes.requests
    assert (note.kind, note.question, note.approval_id) == (
        "input",
        "Which order is it about?",
        question.approval_id,
    )
    assert note.schema == {"type": "string", "minLength": 1, "maxLength": 20000}
    [item] = engine.inbox(agent=name)
    assert item.approval.question == "Which order is it about?"

    def refused(error: type[Exception], match: str, call: Any) -> None:
        before = snapshot(engine.store)
        with pytest.raises(error, match=match):
            call()
        assert snapshot(engine.store) == before

    refused(WrongRequestKind, "is a question", lambda: engine.decide(question.approval_id, True,
            trusted=True))  # fmt: skip
    refused(WrongRequestKind, "no approval or denial", lambda: engine.decide(
            question.approval_id, False, "no", trusted=True))  # fmt: skip
    refused(InvalidApprovalInput, "should be non-empty|too short",
            lambda: engine.answer(question.approval_id, "", trusted=True))  # fmt: skip
    refused(InvalidApprovalInput, "is not of type 'string'",
            lambda: engine.answer(question.approval_id, 7, trusted=True))  # fmt: skip
    refused(ApprovalError, "not valid",
            lambda: engine.answer(question.approval_id, "7", token="forged"))  # fmt: skip

    queued.clear()
    resumed = engine.answer(question.approval_id, "order 7", token=note.token, by="cy")
    assert resumed.status is RunStatus.QUEUED and queued == [run.id]
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert results_in(model.calls[1])[question.tool_call_id] == "order 7"
    answered = engine.approvals(run.id)[0]
    assert (answered.decision, answered.answer, answered.decided_by) == (
        Decision.ANSWERED,
        "order 7",
        "cy",
    )
    [step] = [s for s in engine.steps(run.id) if s.kind is StepKind.WAIT]
    assert step.name == "input"
    with pytest.raises(ApprovalError, match="already answered"):
        engine.answer(question.approval_id, "again", trusted=True)


class Choice(pydantic.BaseModel):
    """What to do with the order."""

    action: Literal["refund", "replace"]
    note: str = ""


def test_a_structured_answer_fits_the_agents_model(approvals_engine: Engine) -> None:
    engine = approvals_engine
    name, model, _ = agent(
        steps_of(tools(call("ask_human", {"question": "Refund or replace?"}))), ask_human=Choice
    )
    run = engine.start(name)
    engine.execute(run.id)
    [question] = engine.approvals(run.id)
    with pytest.raises(InvalidApprovalInput, match="at action, 'repair' is not one of"):
        engine.answer(question.approval_id, {"action": "repair"}, trusted=True)
    with pytest.raises(InvalidApprovalInput, match="'action' is a required property"):
        engine.answer(question.approval_id, {"note": "x"}, trusted=True)
    engine.answer(question.approval_id, {"action": "replace", "note": "blue"}, trusted=True)
    engine.execute(run.id)
    told = results_in(model.calls[1])[question.tool_call_id]
    assert json.loads(told) == {"action": "replace", "note": "blue"}
    assert "Refund or replace" not in model.calls[0].tools[-1]["function"]["description"]
    asked = next(t for t in model.calls[0].tools if t["function"]["name"] == "ask_human")
    assert '"replace"' in asked["function"]["description"]  # the answer's shape


@pytest.mark.parametrize("on_expire", ["deny", "fail"])
def test_an_unanswered_question_expires_as_an_approval_does(
    approvals_engine: Engine, on_expire: Literal["deny", "fail"]
) -> None:
    engine = approvals_engine
    name, model, _ = agent(
        steps_of(tools(call("ask_human", {"question": "Anyone there?"}))),
        ask_human=AskHuman(expires_in=60, on_expire=on_expire),
    )
    run = engine.start(name)
    engine.execute(run.id)
    [question] = engine.approvals(run.id)
    assert (question.expires_at - question.created_at).total_seconds() == pytest.approx(60, abs=5)
    assert engine.tick().expired == 0
    expire_approval(engine.store, question.approval_id)
    assert engine.tick().expired == 1
    if on_expire == "fail":
        failed = engine.get_run(run.id)
        assert failed.status is RunStatus.FAILED and failed.error is not None
        assert failed.error.code == "question_expired"
        return
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    told = json.loads(results_in(model.calls[1])[question.tool_call_id])
    assert told["error"].startswith("not answered: the question expired at")


def test_ask_human_takes_true_a_model_or_an_askhuman() -> None:
    with pytest.raises(Exception, match="ask_human must be True, a pydantic model class"):
        Agent(name=unique("bad"), model="scripted/x", ask_human="yes", register=False)  # type: ignore[arg-type]
    assert Agent(name="a", model="m", register=False).asks_human is None
    assert Agent(name="a", model="m", ask_human=Choice, register=False).asks_human == AskHuman(
        answer=Choice
    )


# -------------------------------------------------- approve for this run


def test_approved_for_the_run_later_calls_run_without_asking_and_a_retry_asks_again(
    approvals_engine: Engine,
) -> None:
    engine = approvals_engine
    name, _, ledger = agent(
        steps_of(
            tools(call("refund", {"amount": 10})),
            tools(call("refund", {"amount": 20})),
            tools(call("refund", {"amount": 30})),
            tools(call("refund", {"amount": 40})),
        ),
        budget=Budget(max_steps=3),
    )
    run = engine.start(name)
    engine.execute(run.id)
    [first] = engine.approvals(run.id)
    engine.decide(first.approval_id, True, trusted=True, by="ada", for_run=True)
    [grant] = engine.standing_approvals(run.id)
    assert (grant.tool_name, grant.granted_by, grant.approval_id) == (
        "refund",
        "ada",
        first.approval_id,
    )
    # Steps 2 and 3 call it again: approved by the grant, without a wait.
    stopped = engine.execute(run.id)
    assert stopped is not None and stopped.status is RunStatus.FAILED
    assert stopped.error is not None and stopped.error.code == "budget_exceeded"
    assert [amount for amount, _ in ledger.refunds] == [10, 20, 30]
    later = engine.approvals(run.id)[1:]
    assert [(a.input, a.decision, a.decided_by, a.standing_from) for a in later] == [
        ({"amount": 20}, Decision.APPROVED, "ada", first.approval_id),
        ({"amount": 30}, Decision.APPROVED, "ada", first.approval_id),
    ]
    assert [s.kind for s in engine.steps(run.id)].count(StepKind.WAIT) == 1

    # A retry asks again: the grant ended with the attempt.
    engine.retry(run.id, extra_steps=1)
    assert engine.standing_approvals(run.id) == []
    again = engine.execute(run.id)
    assert again is not None and again.status is RunStatus.WAITING
    assert again.waiting is not None and again.waiting.input == {"amount": 40}
    assert [amount for amount, _ in ledger.refunds] == [10, 20, 30]


def test_a_call_a_standing_approval_decides_is_told_to_the_observers(
    pg_store: PostgresStore, leases: Leases, settings: Settings
) -> None:
    class Decisions(Observer):
        def __init__(self) -> None:
            self.seen: list[Approval] = []

        def approval_decided(self, run: Run, approval: Approval) -> None:
            self.seen.append(approval)

    told = Decisions()
    engine = Engine(pg_store, leases=leases, settings=settings, enqueue=None, observers=[told])
    try:
        name, _, ledger = agent(
            steps_of(tools(call("refund", {"amount": 1})), tools(call("refund", {"amount": 2})))
        )
        run = engine.start(name)
        engine.execute(run.id)
        [first] = engine.approvals(run.id)
        engine.decide(first.approval_id, True, trusted=True, by="ada", for_run=True)
        engine.execute(run.id)
        assert [(a.input, a.decided_by, a.standing_from) for a in told.seen] == [
            ({"amount": 1}, "ada", None),
            ({"amount": 2}, "ada", first.approval_id),
        ]
        assert [amount for amount, _ in ledger.refunds] == [1, 2]
    finally:
        engine.close()


def test_a_retry_that_keeps_the_standing_approvals_does_not_ask(approvals_engine: Engine) -> None:
    engine = approvals_engine
    name, _, ledger = agent(
        steps_of(tools(call("refund", {"amount": 10})), tools(call("refund", {"amount": 20}))),
        budget=Budget(max_steps=1),
    )
    run = engine.start(name)
    engine.execute(run.id)
    [first] = engine.approvals(run.id)
    engine.decide(first.approval_id, True, trusted=True, by="ada", for_run=True)
    failed = engine.execute(run.id)
    assert failed is not None and failed.status is RunStatus.FAILED
    engine.retry(run.id, extra_steps=2, keep_standing=True)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert [amount for amount, _ in ledger.refunds] == [10, 20]


# -------------------------------------------------------------- parallel


def test_two_approvals_and_a_question_in_one_step_decided_in_reverse_order(
    approvals_engine: Engine,
) -> None:
    engine = approvals_engine
    name, model, ledger = agent(
        steps_of(
            tools(
                call("refund", {"amount": 1}),
                call("refund", {"amount": 2}),
                call("ask_human", {"question": "Which colour?"}),
                call("lookup", {"order": "9"}),
            )
        ),
        ask_human=True,
    )
    run = engine.start(name)
    engine.execute(run.id)
    first, second, question = engine.approvals(run.id)
    assert question.kind is RequestKind.INPUT
    assert ledger.lookups == ["9"]  # the plain call ran before the wait

    assert engine.answer(question.approval_id, "blue", trusted=True, by="cy").status is (
        RunStatus.WAITING
    )
    assert engine.decide(second.approval_id, False, "too much", trusted=True).status is (
        RunStatus.WAITING
    )
    assert engine.execute(run.id) is None  # still waiting: nobody may claim it
    resumed = engine.decide(first.approval_id, True, trusted=True, arguments={"amount": 3})
    assert resumed.status is RunStatus.QUEUED
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert ledger.refunds == [(3, f"{run.id}:{first.tool_call_id}")]
    assert ledger.lookups == ["9"]  # not run again on resume
    results = results_in(model.calls[1])
    assert json.loads(results[first.tool_call_id])["result"] == {"refunded": 3}
    assert json.loads(results[second.tool_call_id])["reason"] == "too much"
    assert results[question.tool_call_id] == "blue"
    assert model.call_count == 2
