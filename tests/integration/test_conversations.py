"""A thread as a conversation (docs/conversations.md): ``Engine.send`` under
each ``on_new_message`` policy, what the next run's model is sent, the
thread as its reader sees it, and bad input. Executions run here, one at a
time; tests/e2e/test_conversation_workers.py runs them on real workers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from runner import Agent, ApprovalPolicy, AskHuman, Engine, effect, tool
from runner.core.coordination.leases import Leases
from runner.core.errors import InvalidInput, InvalidTransition, ThreadBusy
from runner.core.settings import Settings
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import RunStatus
from store.postgres import PostgresStore

SEEN: dict[str, list[list[dict[str, Any]]]] = {}


@pytest.fixture
def queued() -> list[str]:
    return []


@pytest.fixture
def engine(
    pg_store: PostgresStore, leases: Leases, settings: Settings, queued: list[str]
) -> Iterator[Engine]:
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=queued.append)
    yield made
    made.close()


def since_last_user(request: Request) -> list[dict[str, Any]]:
    last = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
    return request.messages[last + 1 :]


def chat_agent(policy: str, *, asks: bool = False) -> str:
    """An agent that answers each message with how many user messages it
    has seen; with ``asks``, it answers "refund me" by charging (an effect)
    and then asking to refund (an approval), so its run waits."""
    name = f"chat-{policy}-{uuid.uuid4().hex[:6]}"
    SEEN[name] = []

    @effect
    def charge(amount: int, idempotency_key: str) -> dict[str, int]:
        """Charge."""
        return {"charged": amount}

    @tool
    def refund(amount: int) -> str:
        """Refund."""
        return "refunded"

    def script(request: Request) -> Any:
        SEEN[name].append([dict(m) for m in request.messages])
        done = since_last_user(request)
        users = [m["content"] for m in request.messages if m.get("role") == "user"]
        asked = asks and users[-1] == "refund me"
        if asked and not done:
            return tools(call("charge", {"amount": 5}))
        if asked and len(done) == 2:
            return tools(call("refund", {"amount": 5}))
        return text(f"seen {len(users)}: {users[-1]}")

    Agent(
        name=name,
        model=ScriptedModel(name, script).model,
        tools=[charge, refund],
        approvals={"refund": True},
        on_new_message=policy,
    )
    return name


def thread_id() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def user_texts(messages: Any) -> list[str]:
    return [m["content"] for m in messages if m.get("role") == "user"]


def test_enqueue_runs_each_message_after_the_last_and_continues_its_history(
    engine: Engine,
) -> None:
    agent, thread = chat_agent("enqueue"), thread_id()
    first = engine.send(thread, "hello", agent=agent, by="ada")
    second = engine.send(thread, "and then?", agent=agent, by="ada")
    assert engine.thread(thread).active == first
    assert engine.execute(second.id) is None  # the thread's key: one at a time
    assert engine.execute(first.id).status is RunStatus.COMPLETED  # type: ignore[union-attr]
    done = engine.execute(second.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert done.output == "seen 2: and then?"
    view = engine.thread(thread)
    assert view.status == "idle" and [r.id for r in view.runs] == [first.id, second.id]
    assert [m["role"] for m in view.messages] == ["user", "assistant", "user", "assistant"]
    assert user_texts(view.messages) == ["hello", "and then?"]
    assert first.trigger.payload == {"text": "hello", "by": "ada"}


def test_reject_refuses_a_message_while_a_run_is_in_progress_and_writes_nothing(
    engine: Engine,
) -> None:
    agent, thread = chat_agent("reject"), thread_id()
    first = engine.send(thread, "hello", agent=agent)
    with pytest.raises(ThreadBusy, match="on_new_message='reject'") as refused:
        engine.send(thread, "wait, no", agent=agent)
    assert first.id in refused.value.message
    assert [r.id for r in engine.thread(thread).runs] == [first.id]
    engine.execute(first.id)
    later = engine.send(thread, "now then", agent=agent)
    assert engine.execute(later.id).output == "seen 2: now then"  # type: ignore[union-attr]


def test_interrupt_of_a_queued_run_carries_its_message_into_the_next(engine: Engine) -> None:
    agent, thread = chat_agent("interrupt"), thread_id()
    first = engine.send(thread, "one", agent=agent)
    second = engine.send(thread, "two", agent=agent)
    assert engine.get_run(first.id).status is RunStatus.CANCELLED
    assert second.trigger.payload["interrupt"] == [first.id]
    done = engine.execute(second.id)
    assert done is not None and done.output == "seen 2: two"
    assert user_texts(SEEN[agent][-1]) == ["one", "two"]
    assert user_texts(engine.thread(thread).messages) == ["one", "two"]


def test_interrupt_of_a_waiting_run_keeps_what_ran_and_closes_the_open_call(
    engine: Engine,
) -> None:
    agent, thread = chat_agent("interrupt", asks=True), thread_id()
    first = engine.send(thread, "refund me", agent=agent)
    waiting = engine.execute(first.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    second = engine.send(thread, "actually, stop", agent=agent)
    assert engine.get_run(first.id).status is RunStatus.CANCELLED
    done = engine.execute(second.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    sent = SEEN[agent][-1]
    roles = [m["role"] for m in sent if m["role"] != "system"]
    # m1, the charge and its result, the refund call closed unrun, m2.
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "user"]
    assert "not run" in sent[-2]["content"]
    assert [e.tool for e in engine.store.effects(first.id)] == ["charge"]
    assert engine.store.effects(second.id) == []  # the charge is never run again


def test_rollback_drops_the_interrupted_work_and_tells_the_model_what_ran(
    engine: Engine,
) -> None:
    agent, thread = chat_agent("rollback", asks=True), thread_id()
    first = engine.send(thread, "refund me", agent=agent)
    engine.execute(first.id)
    second = engine.send(thread, "actually, stop", agent=agent)
    assert second.trigger.payload["rollback"] == [first.id]
    done = engine.execute(second.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    sent = [m for m in SEEN[agent][-1] if m["role"] != "system"]
    assert [m["role"] for m in sent] == ["user", "user", "user"]
    assert sent[0]["content"] == "refund me" and sent[2]["content"] == "actually, stop"
    assert "charge" in sent[1]["content"] and "stay done" in sent[1]["content"]
    assert engine.store.effects(second.id) == []
    # The journal keeps everything: the first run's own history is whole.
    checkpoint = engine.checkpoint(first.id)
    assert checkpoint is not None and len(checkpoint.messages) == 5


def test_a_send_with_an_id_is_idempotent_and_bad_input_writes_nothing(engine: Engine) -> None:
    agent, thread = chat_agent("interrupt"), thread_id()
    first = engine.send(thread, "hello", agent=agent, id="m-1")
    again = engine.send(thread, "hello", agent=agent, id="m-1")
    assert again.id == first.id and engine.get_run(first.id).status is RunStatus.QUEUED
    for bad_thread, bad_message in (("", "x"), (thread, ""), (thread, 7), ("t" * 201, "x")):
        with pytest.raises(InvalidInput):
            engine.send(bad_thread, bad_message, agent=agent)  # type: ignore[arg-type]
    assert [r.id for r in engine.thread(thread).runs] == [first.id]
    with pytest.raises(InvalidInput, match="on_new_message"):
        Agent(name=f"bad-{uuid.uuid4().hex[:6]}", model="openai/x", on_new_message="drop")  # type: ignore[arg-type]


def asking_agent(*, question_to: str = "requester", approval_to: str = "requester") -> str:
    """An agent that asks the thread's user a question, then runs a tool that
    needs an approval, then answers with what it was told."""
    name = f"chat-asks-{uuid.uuid4().hex[:6]}"

    @tool
    def ship(item: str) -> str:
        """Ship an item."""
        return f"shipped {item}"

    def script(request: Request) -> Any:
        done = since_last_user(request)
        if not done:
            return tools(call("ask_human", {"question": "Which colour?"}))
        if len(done) == 2:
            return tools(call("ship", {"item": done[1]["content"]}))
        return text(f"done: {done[-1]['content']}")

    Agent(
        name=name,
        model=ScriptedModel(name, script).model,
        tools=[ship],
        ask_human=AskHuman(to=question_to),  # type: ignore[arg-type]
        approvals={"ship": ApprovalPolicy(to=approval_to)},  # type: ignore[arg-type]
    )
    return name


def test_the_threads_user_answers_its_question_by_a_message_and_decides_in_the_thread(
    engine: Engine,
) -> None:
    agent, thread = asking_agent(), thread_id()
    first = engine.send(thread, "a shirt please", agent=agent, by="ada")
    asked = engine.execute(first.id)
    assert asked is not None and asked.status is RunStatus.WAITING
    [question] = engine.approvals(first.id)
    assert question.addressed_to == "requester"
    answered = engine.send(thread, "blue", agent=agent, by="ada")  # answers: no new run
    assert answered.id == first.id and len(engine.thread(thread).runs) == 1
    waiting = engine.execute(first.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    approval = next(a for a in engine.approvals(first.id) if a.pending)
    with pytest.raises(InvalidTransition, match="asks its user no open request"):
        engine.decide_in_thread("another", approval.approval_id, approve=True)
    with pytest.raises(InvalidInput, match="approve=True or False"):
        engine.decide_in_thread(thread, approval.approval_id, answer="yes")
    engine.decide_in_thread(thread, approval.approval_id, approve=True, by="ada")
    done = engine.execute(first.id)
    assert done is not None and done.output == "done: shipped blue"
    decided = next(a for a in engine.approvals(first.id) if a.approval_id == approval.approval_id)
    assert decided.decided_by == "ada" and question.approval_id != approval.approval_id


def test_a_request_for_anyone_is_not_the_threads_users_to_answer(engine: Engine) -> None:
    agent, thread = asking_agent(question_to="anyone", approval_to="anyone"), thread_id()
    first = engine.send(thread, "a shirt please", agent=agent)
    engine.execute(first.id)
    [question] = engine.approvals(first.id)
    assert question.addressed_to is None
    with pytest.raises(InvalidTransition):
        engine.decide_in_thread(thread, question.approval_id, answer="blue")
    later = engine.send(thread, "blue", agent=agent)  # a message, after the run (enqueue)
    assert later.id != first.id and engine.get_run(first.id).status is RunStatus.WAITING
    # Outside a thread, "requester" has nobody to address: anyone decides.
    plain = engine.start(asking_agent(), {"item": "x"})
    engine.execute(plain.id)
    assert [a.addressed_to for a in engine.approvals(plain.id)] == [None]
