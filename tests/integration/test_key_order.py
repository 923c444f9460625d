"""Keys keep their order (issue 26, item 13): what a run's user writes (the
payload, a tool's arguments and result, the run's state, an approval's
arguments, the structured output) reads back in the order it was written,
from the store, in what the model is sent after a crash and a resume, in the
run-event feed and in ``runwright show``. Postgres's jsonb sorts an object's
keys (shortest first); the columns that hold these values are json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic

from runner import Agent, effect
from runner.testing import Request, ScriptedModel, TestEngine, call, output, tools
from store.events import EventType
from store.models import RunStatus, StepKind
from tests.e2e.clirun import make_cli_env, rw
from tests.helpers import unique

# Each object's keys out of jsonb's order ("mid" < "zeta" < "alpha"), nested too.
PAYLOAD = {"zeta": 1, "alpha": {"yankee": 1, "bravo": 2}, "mid": [{"zz": 1, "a": 2}]}
ARGS = {"zeta": "z-1", "alpha": {"yankee": "y", "bravo": "b"}, "mid": 3}
RESULT = {"zeta": "r-1", "alpha": {"yankee": True, "bravo": None}, "mid": [{"zz": 1, "a": 2}]}
PATCH = {"mid": 5, "alpha": {"yankee": 1, "bravo": 2}, "zeta": "noted"}
STATE = {"zeta": "noted", "alpha": {"yankee": 1, "bravo": 2}, "mid": 5}  # the model's field order
REPORT = {"zeta": 7, "alpha": {"yankee": [1, 2], "bravo": {"zz": 0, "a": 1}}, "mid": "done"}


def ordered(value: Any) -> Any:
    """``value`` with each object as its list of (key, value) pairs: equal
    only if the keys come in the same order."""
    if isinstance(value, dict):
        return [(key, ordered(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [ordered(item) for item in value]
    return value


class Notes(pydantic.BaseModel):
    zeta: str = ""
    alpha: dict[str, Any] = {}
    mid: int = 0


class Report(pydantic.BaseModel):
    zeta: int
    alpha: dict[str, Any]
    mid: str


class Desk:
    """An agent that runs an effect and sets its state (step 1), asks for an
    approval (step 2), then gives its structured output (step 3)."""

    def __init__(self) -> None:
        self.name = unique("key-order")

        @effect
        def refund(zeta: str, alpha: dict[str, Any], mid: int, idempotency_key: str) -> Any:
            """Refund, and say what was done."""
            return RESULT

        @effect
        def escalate(zeta: str, alpha: dict[str, Any], mid: int, idempotency_key: str) -> str:
            """Hand the case to a person."""
            return "escalated"

        self.model = ScriptedModel(
            self.name,
            [
                tools(
                    call("refund", ARGS, id="call_refund"),
                    call("update_state", {"patch": PATCH}, id="call_state"),
                ),
                tools(call("escalate", ARGS, id="call_escalate")),
                output(REPORT),
            ],
        )
        Agent(
            name=self.name,
            model=self.model.model,
            tools=[refund, escalate],
            approvals={"escalate": True},
            state=Notes,
            output=Report,
        )

    def request(self, step: int) -> Request:
        """The last request of ``step`` the model was sent."""
        return [r for r in self.model.calls if r.step == step][-1]


def result_of(request: Request, call_id: str) -> dict[str, Any]:
    (message,) = [m for m in request.tool_results() if m["tool_call_id"] == call_id]
    return message


def test_what_a_run_writes_reads_back_in_the_order_written(
    runwright_engine: TestEngine, runwright_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    rw_engine = runwright_engine
    desk = Desk()
    run = rw_engine.start(desk.name, PAYLOAD)
    # The refund's result is journaled, its step is not committed: the run
    # that goes on reads the result, and the model's reply, from the store.
    rw_engine.crash(run.id, at="after_effect_complete")
    waiting = rw_engine.take_over(run.id)
    assert waiting.status is RunStatus.WAITING and waiting.waiting is not None
    assert ordered(waiting.waiting.input) == ordered(ARGS)
    (approval,) = rw_engine.pending(run.id)
    assert ordered(approval.input) == ordered(ARGS)
    done = rw_engine.approve(run.id, "escalate")
    assert done.status is RunStatus.COMPLETED, done.error

    # The run's own values.
    assert list(done.output) == ["zeta", "alpha", "mid"]
    assert ordered(done.output) == ordered(REPORT)
    assert ordered(done.state) == ordered(STATE)
    assert ordered(done.trigger.payload) == ordered(PAYLOAD)

    # What the model was sent: the payload, and the refund's result as the
    # journal gave it back to the execution that resumed the run.
    assert ordered(desk.request(1).payload) == ordered(PAYLOAD)
    told = result_of(desk.request(2), "call_refund")
    assert ordered(json.loads(told["content"])) == ordered(RESULT)
    # After the approval the history comes from the checkpoint: each message
    # as the engine wrote it.
    for message in desk.request(3).tool_results():
        assert list(message) == ["role", "tool_call_id", "content"]
    assert ordered(json.loads(result_of(desk.request(3), "call_refund")["content"])) == ordered(
        RESULT
    )
    (asked,) = [m for m in rw_engine.messages(run.id) if m["role"] == "approval_request"]
    assert list(asked) == ["role", "approval_id", "tool_call_id", "tool_name", "input"]
    assert ordered(asked["input"]) == ordered(ARGS)

    # The journals: the effects and the tool steps.
    effects = {e.tool: e for e in rw_engine.effects(run.id)}
    assert ordered(effects["refund"].input) == ordered(ARGS)
    assert ordered(effects["refund"].output) == ordered(RESULT)
    assert ordered(effects["escalate"].input) == ordered(ARGS)
    calls = {c.name: c for c in rw_engine.tool_calls(run.id)}
    assert ordered(calls["refund"].input) == ordered(ARGS)
    assert ordered(calls["refund"].output) == ordered(RESULT)
    assert ordered(calls["update_state"].input) == ordered({"patch": PATCH})
    assert ordered(calls["update_state"].output) == ordered(STATE)
    (state_step,) = [s for s in rw_engine.steps(run.id) if s.kind is StepKind.STATE]
    assert ordered(state_step.output) == ordered(STATE)

    # The run-event feed: each step event as the step was written.
    events = list(rw_engine.engine.events(run.id, timeout=5))
    steps = [e.data for e in events if e.type is EventType.STEP and e.data["kind"] == "tool"]
    refunds = [d for d in steps if d["name"] == "refund"]
    assert refunds and all(ordered(d["output"]) == ordered(RESULT) for d in refunds)
    assert all(ordered(d["input"]) == ordered(ARGS) for d in refunds)

    # runwright show prints the output and the refund as they were written.
    env = make_cli_env(runwright_database_url, redis_url, tmp_path, rw_engine.engine.settings)
    shown = rw(env, "show", run.id).stdout
    assert f"output   {json.dumps(REPORT)}" in shown
    assert f"refund({json.dumps(ARGS)})" in shown
