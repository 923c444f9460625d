"""Attacks on the execution engine from model output, tool output and timing
(issue 9: items 6, 7, 9, 10, 11 and 13), on real Postgres and Redis."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runner import Agent, Budget, Engine, effect, tool
from runner.core.agent import ApprovalRequest
from runner.core.coordination.leases import Leases, lease_key
from runner.core.model import warm_up
from runner.core.settings import Settings
from runner.testing import ScriptedModel, call, text, tools
from store.db import dumps
from store.errors import StoreRefused
from store.models import (
    EffectStatus,
    Ended,
    Fence,
    NewRun,
    Outcome,
    RunError,
    RunStatus,
    StepCommit,
    StepKind,
    StepRecord,
    TriggerEnvelope,
    utcnow,
)
from store.postgres import PostgresStore
from tests.agents import charge, lookup, read_effect_log
from tests.helpers import joined, journaled_effect, run_in_thread, try_claim, unique, wait_for
from tests.provider import Provider, answer
from tests.provider import tool_calls as calls

# ------------------------------------------------- 6: tool call ids from the model


@pytest.fixture
def scripted_openai() -> Iterator[Callable[..., Provider]]:
    servers: list[Provider] = []

    def make(script: Callable[[int, dict[str, Any]], dict[str, Any]]) -> Provider:
        server = Provider(script).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


def http_agent(server: Provider, **kwargs: Any) -> str:
    name = unique("ids")
    Agent(
        name=name,
        model="openai/gpt-4o-mini",
        model_settings={"api_base": server.base_url, "api_key": "sk-loopback"},
        **kwargs,
    )
    return name


def test_empty_and_reused_call_ids_never_merge_effects(
    engine: Engine,
    scripted_openai: Callable[..., Provider],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "effects.jsonl"
    monkeypatch.setenv("RUNWRIGHT_TEST_EFFECT_LOG", str(log))

    def script(step: int, body: dict[str, Any]) -> dict[str, Any]:
        if step == 1:  # a provider that sends no ids at all
            return calls(("", "charge", {"amount": 1}), ("", "lookup", {"q": "a"}))
        if step == 2:  # ... and again: litellm's fallback would be call_0 once more
            return calls(("", "charge", {"amount": 2}))
        if step == 3:  # one id twice in one step
            return calls(("dup", "charge", {"amount": 3}), ("dup", "charge", {"amount": 4}))
        if step == 4:  # an id an earlier step used
            return calls(("dup", "charge", {"amount": 5}), ("own_id_7", "lookup", {"q": "b"}))
        return answer("done")

    server = scripted_openai(script)
    name = http_agent(server, tools=[charge, lookup])
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED

    charged = [e["amount"] for e in read_effect_log(str(log)) if e["tool"] == "charge"]
    assert sorted(charged) == [1, 2, 3, 4, 5]  # every effect ran, once
    keys = [e["key"] for e in read_effect_log(str(log)) if e["tool"] == "charge"]
    assert len(set(keys)) == 5

    checkpoint = engine.checkpoint(run.id)
    assert checkpoint is not None
    ids = [
        c["id"]
        for m in checkpoint.messages
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or ()
    ]
    assert len(ids) == len(set(ids)) == 7 and "" not in ids
    # Ids the model sent that were usable are the ones it sees again.
    assert "dup" in ids and "own_id_7" in ids
    last_request = server.requests[-1].body["messages"]
    assert any(m.get("tool_call_id") == "own_id_7" for m in last_request if m["role"] == "tool")
    results = [m["tool_call_id"] for m in checkpoint.messages if m["role"] == "tool"]
    assert sorted(results) == sorted(ids)  # each call answered exactly once


def test_an_id_reused_in_an_approval_step_still_waits_for_a_decision(
    engine: Engine, scripted_openai: Callable[..., Provider]
) -> None:
    def script(step: int, body: dict[str, Any]) -> dict[str, Any]:
        if step in (1, 2):  # two gated calls, both with the id "call_0"
            return calls(("call_0", "charge", {"amount": 10 * step}))
        return answer("done")

    server = scripted_openai(script)
    name = http_agent(server, tools=[charge, lookup], approvals={"charge": True})
    run = engine.start(name)
    for amount in (10, 20):
        waiting = engine.execute(run.id)
        assert waiting is not None and waiting.status is RunStatus.WAITING
        pending = [a for a in engine.approvals(run.id) if a.pending]
        assert [a.input for a in pending] == [{"amount": amount}]
        assert waiting.waiting is not None
        assert waiting.waiting.approval_id == pending[0].approval_id
        engine.decide(pending[0].approval_id, True, trusted=True)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    tool_steps = [s for s in engine.steps(run.id) if s.kind is StepKind.TOOL]
    assert [s.output for s in tool_steps] == [
        {"charged": 10, "key": f"{run.id}:call_0"},
        {"charged": 20, "key": f"{run.id}:call_2_0"},
    ]


# ----------------------------------------------- 7: tools that hang past an abort


# The hanging tools' starts: a test of a hang checks the tool was reached.
# The hanging tools that began; the marks of those that slept to the end
# (an abandoned thread wakes later, maybe in another test).
slept: list[str] = []
woke: list[str] = []


@tool
def sleepy(seconds: float, mark: str = "") -> str:
    """Sleep in a thread."""
    slept.append("sleepy")
    time.sleep(seconds)
    woke.append(mark)
    return "woke"


@tool
async def asleepy(seconds: float, mark: str = "") -> str:
    """Sleep on the loop."""
    slept.append("asleepy")
    await asyncio.sleep(seconds)
    woke.append(mark)
    return "woke"


@effect
def slow_transfer(seconds: float, idempotency_key: str) -> str:
    """Move money, slowly."""
    time.sleep(seconds)
    return "moved"


@pytest.mark.parametrize("hanging", [sleepy, asleepy], ids=["sync", "async"])
def test_timeout_ends_a_run_whose_tool_hangs(engine: Engine, hanging: Any) -> None:
    name = unique("hang-timeout")
    model = ScriptedModel(
        name, [tools(call(hanging.name, {"seconds": 15, "mark": name})), text("never")]
    )
    Agent(name=name, model=model.model, tools=[hanging], budget=Budget(timeout_ms=1000))
    # litellm imported and warm: in a fresh process its first call alone could
    # use up the second, and the run would time out before reaching the tool.
    warm_up()
    slept.clear()
    done = engine.execute(engine.start(name).id)
    assert done is not None and done.status is RunStatus.FAILED
    assert done.error is not None and done.error.code == "timeout"
    assert slept == [hanging.name]  # the timeout cut the tool off, not the model call
    assert name not in woke, "the run ended only once the tool had slept to the end"
    assert model.call_count == 1
    # The abandoned call has no result: a retry of the step would run it again.
    assert not [s for s in engine.steps(done.id) if s.kind is StepKind.TOOL]


@pytest.mark.parametrize("hanging", [sleepy, asleepy], ids=["sync", "async"])
def test_cancel_ends_a_run_whose_tool_hangs(engine: Engine, hanging: Any) -> None:
    name = unique("hang-cancel")
    model = ScriptedModel(
        name, [tools(call(hanging.name, {"seconds": 15, "mark": name})), text("never")]
    )
    Agent(name=name, model=model.model, tools=[hanging])
    run = engine.start(name)
    slept.clear()
    thread, box = run_in_thread(engine, run.id)
    wait_for(lambda: slept == [hanging.name], what="the tool's call")
    assert engine.cancel(run.id).action == "requested"
    joined(thread, "the cancel did not end the run while its tool hung")
    assert box["run"].status is RunStatus.CANCELLED
    assert name not in woke, "the run ended only once the tool had slept to the end"
    assert engine.get_run(run.id).claim is None or engine.get_run(run.id).status.ended


def test_an_abandoned_effect_is_an_unknown_outcome(engine: Engine) -> None:
    store = engine.store
    name = unique("hang-effect")
    model = ScriptedModel(
        name, [tools(call("slow_transfer", {"seconds": 15}, id="t1")), text("never")]
    )
    Agent(name=name, model=model.model, tools=[slow_transfer])
    run = engine.start(name)
    thread, box = run_in_thread(engine, run.id)
    wait_for(lambda: journaled_effect(store, run.id, f"{run.id}:t1") is not None)
    engine.cancel(run.id)
    thread.join(10)
    assert box["run"].status is RunStatus.CANCELLED
    journaled = journaled_effect(store, run.id, f"{run.id}:t1")
    assert journaled is not None and journaled.status is EffectStatus.STARTED


def test_a_tool_that_finishes_within_the_grace_is_recorded(engine: Engine) -> None:
    name = unique("grace")
    model = ScriptedModel(name, [tools(call("sleepy", {"seconds": 0.6})), text("never")])
    Agent(name=name, model=model.model, tools=[sleepy])
    run = engine.start(name)
    thread, box = run_in_thread(engine, run.id)
    wait_for(lambda: model.call_count == 1)
    time.sleep(0.1)
    engine.cancel(run.id)
    thread.join(10)
    assert box["run"].status is RunStatus.CANCELLED
    assert [s.output for s in engine.steps(run.id) if s.kind is StepKind.TOOL] == ["woke"]


# ------------------------------------- 9, 10, 11: values that are not storable


def _circular() -> Any:
    value: dict[str, Any] = {"a": 1}
    value["self"] = value
    return value


HOSTILE_OUTPUTS: dict[str, Callable[[], Any]] = {
    "nan": lambda: {"score": float("nan"), "big": float("inf"), "small": float("-inf")},
    "bytes": lambda: b"\xff\xfe not utf-8 \x00",
    "circular": _circular,
    "nul": lambda: "before\x00after",
    "surrogate": lambda: {"text": "lone \ud800 surrogate", "key\x00": "v"},
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_OUTPUTS))
def test_tool_output_that_is_not_json_goes_back_to_the_model(engine: Engine, kind: str) -> None:
    make = HOSTILE_OUTPUTS[kind]

    @tool
    def hostile() -> Any:
        """Return something awkward."""
        return make()

    @effect
    def hostile_effect(idempotency_key: str) -> Any:
        """Do something, then return something awkward."""
        return make()

    name = unique(f"hostile-{kind}")
    model = ScriptedModel(
        name,
        [
            tools(call("hostile", id="h1"), call("hostile_effect", id="h2")),
            text("handled"),
        ],
    )
    Agent(name=name, model=model.model, tools=[hostile, hostile_effect])
    done = engine.execute(engine.start(name).id)
    assert done is not None and done.status is RunStatus.COMPLETED, done and done.error
    assert done.output == "handled"
    results = [m for m in model.calls[1].messages if m["role"] == "tool"]
    assert len(results) == 2
    for message in results:
        assert "\x00" not in message["content"]
    effect_row = journaled_effect(engine.store, done.id, f"{done.id}:h2")
    assert effect_row is not None and effect_row.status is EffectStatus.COMPLETED


def test_an_exception_message_with_nul_is_a_tool_error(engine: Engine) -> None:
    @tool
    def grumpy() -> str:
        """Fail with an awkward message."""
        raise RuntimeError("bad\x00byte \ud800")

    name = unique("nul-raise")
    model = ScriptedModel(name, [tools(call("grumpy")), text("ok")])
    Agent(name=name, model=model.model, tools=[grumpy])
    done = engine.execute(engine.start(name).id)
    assert done is not None and done.status is RunStatus.COMPLETED
    [step] = [s for s in engine.steps(done.id) if s.kind is StepKind.TOOL]
    assert "RuntimeError" in str(step.error) and "\x00" not in str(step.error)


def test_model_content_with_nul_is_sanitized(engine: Engine) -> None:
    name = unique("nul-model")
    model = ScriptedModel(
        name, [tools(call("lookup", {"q": "x\u0000y"})), text("fine\x00 \ud83d answer")]
    )
    Agent(name=name, model=model.model, tools=[lookup])
    done = engine.execute(engine.start(name).id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert done.output == "fine\ufffd \ufffd answer"


def test_a_failure_whose_message_cannot_be_stored_still_settles(engine: Engine) -> None:
    def broken_factory(ctx: Any) -> list[Any]:
        raise RuntimeError("factory failed \x00 with a NUL")

    name = unique("nul-crash")
    model = ScriptedModel(name, [text("never")])
    Agent(name=name, model=model.model, tools=broken_factory)
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.FAILED
    stored = engine.get_run(run.id)
    assert stored.status is RunStatus.FAILED
    assert stored.error is not None and stored.error.code == "internal_error"
    assert "factory failed" in stored.error.message and "\x00" not in stored.error.message
    assert stored.claim is None
    if engine.leases is not None:  # Postgres with Redis: the lease is released too
        assert engine.leases.redis.get(lease_key(run.id)) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("content", float("nan")),
        ("content", "nul\x00inside"),
        ("content", "lone \ud800 surrogate"),
        ("index", 2**31),
    ],
    ids=["nan", "nul", "surrogate", "out-of-range"],
)
def test_driver_statements_never_land_in_the_error(
    pg_store: PostgresStore, field: str, value: Any
) -> None:
    # A value no sanitizer saw reaches the caller as one clear error, without
    # the SQL text or its parameters; a failure's own text is always storable.
    # The refusal under test is the store's JSON encoding (no NaN, NUL or lone
    # surrogate, which the json columns would take), or Postgres's.
    run, _ = pg_store.create_run(NewRun(agent=_agent_for_refusal(), trigger=TriggerEnvelope()))
    claim = try_claim(pg_store, run.id, "me", 30)
    assert claim is not None
    fence = Fence(run.id, "me", claim.epoch)
    with pytest.raises(StoreRefused) as raised:
        pg_store.record_llm_step(fence, _llm_record_with(**{field: value}))
    message = raised.value.message
    assert "SELECT" not in message and "inside" not in message and "\ud800" not in message
    assert pg_store.steps(run.id) == []  # nothing written
    settled = pg_store.end(
        fence, Outcome(RunStatus.FAILED, error=RunError("internal_error", "x\x00y"))
    )
    assert settled.run.error is not None and settled.run.error.message == "x\ufffdy"


def test_json_the_store_writes_holds_no_nul_or_lone_surrogate() -> None:
    # The json columns (revision 0012) would take them; no text column could
    # hold them once read back.
    for bad in ("a\x00b", "lone \ud800", "\udc00 first", ["\ud800\ud800"], {"k\x00": 1}):
        with pytest.raises(StoreRefused, match="a NUL character or a lone surrogate"):
            dumps(bad)
    for fine in ("\\u0000 as text", "\\\\u0000", "\U0001f600 \u00e9 \ud55c", {"\\ud800": "x\\"}):
        assert json.loads(dumps(fine)) == fine


def _agent_for_refusal() -> str:
    name = unique("refusal")
    Agent(name=name, model=ScriptedModel(name, [text("x")]).model)
    return name


def _llm_record_with(content: Any = "x", index: int = 1) -> StepRecord:
    now = utcnow()
    return StepRecord(
        index=index,
        kind=StepKind.LLM,
        started_at=now,
        finished_at=now,
        output={"message": {"role": "assistant", "content": content}},
    )


# ------------------------------------------------- 13: a decision made at once


class ThreadedEngine:
    """An engine whose enqueue executes the run on a thread of its own, as a
    worker would take the message; the threads are joined on exit."""

    def __init__(self, store: PostgresStore, leases: Leases, settings: Settings) -> None:
        self.threads: list[threading.Thread] = []
        self.engine = Engine(store, leases=leases, settings=settings, enqueue=self.enqueue)

    def enqueue(self, run_id: str) -> None:
        thread = threading.Thread(target=self.engine.execute, args=(run_id,))
        self.threads.append(thread)
        thread.start()

    def join(self) -> None:
        for thread in list(self.threads):
            thread.join(10)
        self.engine.close()

    def approve_and_wait(self, approval_id: str) -> None:
        """Approve, and wait until the resume the decision sent has been tried."""
        sent = len(self.threads)
        self.engine.decide(approval_id, True, trusted=True)
        for thread in self.threads[sent:]:
            thread.join(10)

    def complete(self, agent: str) -> str:
        """Start a run of ``agent`` and wait for it to complete; its id. No
        tick() runs here: a resume that was lost never completes."""
        run = self.engine.start(agent)
        try:
            wait_for(lambda: self.engine.get_run(run.id).status is RunStatus.COMPLETED, timeout=30)
        finally:
            self.join()
        return run.id


def approval_agent(prefix: str, notifier: Callable[[ApprovalRequest], Any] | None) -> str:
    name = unique(prefix)
    model = ScriptedModel(name, [tools(call("charge", {"amount": 1})), text("approved and done")])
    Agent(
        name=name, model=model.model, tools=[charge], approvals={"charge": True}, notifier=notifier
    )
    return name


# A dropped resume is a claim refused because the Redis lease is still held.


def test_a_decision_during_the_notifier_resumes_the_run_before_the_notifier_returns(
    pg_store: PostgresStore, leases: Leases, settings: Settings
) -> None:
    threaded = ThreadedEngine(pg_store, leases, settings)
    made = threaded.engine
    seen: dict[str, Any] = {}

    def decide_then_wait(request: ApprovalRequest) -> None:
        # A webhook whose receiver decides, then takes its time to answer:
        # the run must go on meanwhile, not once the notifier returns.
        seen["lease held"] = leases.holder(request.run_id) is not None
        made.decide(request.approval_id, True, trusted=True)
        deadline = time.monotonic() + 5
        status = made.get_run(request.run_id).status
        while status is not RunStatus.COMPLETED and time.monotonic() < deadline:
            time.sleep(0.01)
            status = made.get_run(request.run_id).status
        seen["while notifying"] = status

    run = made.start(approval_agent("slow-notifier", decide_then_wait))
    try:
        wait_for(lambda: "while notifying" in seen, timeout=10)
    finally:
        threaded.join()
    assert seen["lease held"] is False  # given up at the step commit, before notifying
    assert seen["while notifying"] is RunStatus.COMPLETED
    assert made.get_run(run.id).status is RunStatus.COMPLETED


def test_a_decision_before_the_lease_is_given_up_resumes_without_tick(
    pg_store: PostgresStore, leases: Leases, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Writes on the I/O pool, as in the test below: the hook waits for another execution.
    settings = dataclasses.replace(settings, store_on_loop=False)
    threaded = ThreadedEngine(pg_store, leases, settings)
    made = threaded.engine
    commit_step = pg_store.commit_step

    def decide_right_after_the_commit(fence: Fence, commit: StepCommit) -> Ended | None:
        # The narrowest window: the step commit has paused the run and the execution has
        # not yet given up its lease. The decision's resume is refused there;
        # the execution must look again once the lease is free.
        settled = commit_step(fence, commit)
        if settled is not None and settled.run.waiting is not None:
            threaded.approve_and_wait(settled.run.waiting.approval_id)  # its resume is refused
            assert made.get_run(fence.run_id).status is RunStatus.QUEUED
        return settled

    monkeypatch.setattr(pg_store, "commit_step", decide_right_after_the_commit)
    threaded.complete(approval_agent("window-approval", None))


def test_a_decision_before_the_pause_is_read_back_resumes_without_tick(
    pg_store: PostgresStore, leases: Leases, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Writes on the I/O pool: the hook below waits for another execution, which
    # a write carried on the loop (RUNWRIGHT_STORE_ON_LOOP) would hold up until
    # the lease lapsed, whenever the lease's check answers from memory.
    settings = dataclasses.replace(settings, store_on_loop=False)
    threaded = ThreadedEngine(pg_store, leases, settings)
    made = threaded.engine
    after_end = pg_store._after_end
    decided: list[str] = []

    def decide_before_the_read(run_id: str, outcome: Outcome | None) -> Ended | None:
        # The store reads the paused run back in a transaction after the
        # commit's: a decision there is read as `queued`, and its resume is
        # refused, for the execution still holds the lease. The execution must
        # send the run once the lease is free, as it does for a run read `waiting`.
        if outcome is not None and outcome.status is RunStatus.WAITING and not decided:
            (approval,) = made.approvals(run_id)
            decided.append(run_id)
            threaded.approve_and_wait(approval.approval_id)  # its resume is refused
            assert leases.holder(run_id) is not None
        return after_end(run_id, outcome)

    monkeypatch.setattr(pg_store, "_after_end", decide_before_the_read)
    run_id = threaded.complete(approval_agent("read-back-approval", None))
    assert decided == [run_id]
