"""An incident as a regression test in a line (issue 55 item 4): a run
exported as a case file, replayed with ``runner.testing.replay_case``; and a
scripted model whose script is a recorded run's (``ScriptedModel.from_run``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import pytest

from runner import Agent, ApprovalPolicy, effect, tool
from runner.evals.recording import Case
from runner.testing import (
    CaseFailed,
    ScriptedModel,
    TestEngine,
    call,
    output,
    replay_case,
    text,
    tools,
)
from store.errors import InvalidInput
from store.models import RunStatus
from tests.helpers import unique

REFUNDED: list[str] = []


@tool
def find_order(order_id: str) -> dict[str, Any]:
    """Find an order."""
    return {"order_id": order_id, "paid": 42}


@effect
def refund_order(order_id: str) -> str:
    """Refund an order."""
    REFUNDED.append(order_id)
    return f"refunded {order_id}"


@effect(name="refund_order")
def refund_order_v2(order_id: str, reason: str) -> str:
    """Refund an order, saying why."""
    REFUNDED.append(order_id)
    return f"refunded {order_id}"


def _incident(kit: TestEngine, tmp_path: Path) -> tuple[str, Path]:
    name = unique("support")
    model = ScriptedModel(
        name,
        [
            tools(call("find_order", {"order_id": "B-2"})),
            tools(call("refund_order", {"order_id": "B-2"})),
            text("Refunded B-2."),
        ],
    )
    Agent(name=name, model=model.model, tools=[find_order, refund_order])
    run = kit.run(name, {"message": "please refund B-2, write to me at bob@example.com"})
    assert run.status is RunStatus.COMPLETED
    path = tmp_path / "incident.json"
    case = Case.of_run(kit.engine, run.id)
    path.write_text(json.dumps(case.to_json()))
    return name, path


def test_a_case_file_replays_as_a_regression_test(
    runwright_engine: TestEngine, tmp_path: Path
) -> None:
    _, path = _incident(runwright_engine, tmp_path)
    REFUNDED.clear()
    report = replay_case(str(path), engine=runwright_engine)
    assert report.passed and report.replay.output == "Refunded B-2."
    assert REFUNDED == []  # served from the recording
    # In a database of its own, with no engine given.
    assert replay_case(path).passed


def test_a_case_fails_the_test_when_the_agent_no_longer_handles_it(
    runwright_engine: TestEngine, tmp_path: Path
) -> None:
    name, path = _incident(runwright_engine, tmp_path)
    changed = Agent(
        name=name, model="openai/unused", tools=[find_order, refund_order_v2], register=False
    )
    with pytest.raises(CaseFailed, match="diverged at step 2: refund_order: invalid arguments"):
        replay_case(path, agent=changed, engine=runwright_engine)
    data = json.loads(path.read_text())
    data["expected"] = {"output": "Refunded B-2 at once."}
    with pytest.raises(CaseFailed, match=r"expects the output 'Refunded B-2 at once\.'"):
        replay_case(data, engine=runwright_engine)
    with pytest.raises(InvalidInput, match="cannot read the case file"):
        replay_case(tmp_path / "missing.json", engine=runwright_engine)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InvalidInput, match="is not JSON"):
        replay_case(tmp_path / "bad.json", engine=runwright_engine)


def test_a_scripted_model_takes_its_script_from_a_recorded_run(
    runwright_engine: TestEngine, tmp_path: Path
) -> None:
    _, path = _incident(runwright_engine, tmp_path)
    again = unique("support-again")
    model = ScriptedModel.from_run(again, path)
    Agent(name=again, model=model.model, tools=[find_order, refund_order])
    REFUNDED.clear()
    run = runwright_engine.run(again, {"message": "please refund B-2"})
    assert run.status is RunStatus.COMPLETED and run.output == "Refunded B-2."
    assert REFUNDED == ["B-2"]  # a real run of the recorded script: its effect ran
    assert [c.name for c in runwright_engine.tool_calls(run.id)] == ["find_order", "refund_order"]
    model.assert_complete()


def test_an_incident_fixed_by_an_approval_rule_stops_at_it(
    runwright_engine: TestEngine, tmp_path: Path
) -> None:
    """The worked example of docs/replay-and-evals.md: the fix asks a person
    before a refund, so the incident's replay stops at the approval the
    recording does not have; without the rule it completes."""
    name, path = _incident(runwright_engine, tmp_path)
    fixed = Agent(
        name=name,
        model="openai/unused",
        tools=[find_order, refund_order],
        approvals={"refund_order": ApprovalPolicy(when=lambda args: args["order_id"] == "B-2")},
        register=False,
    )
    report = replay_case(path, agent=fixed, approvals="ask", check=False, engine=runwright_engine)
    assert report.stopped == "refund_order waits for a decision the recording does not have"
    unfixed = Agent(
        name=name, model="openai/unused", tools=[find_order, refund_order], register=False
    )
    report = replay_case(path, agent=unfixed, approvals="ask", check=False, engine=runwright_engine)
    assert report.stopped is None and report.passed


class Verdict(pydantic.BaseModel):
    order_id: str
    refunded: bool


class StricterVerdict(pydantic.BaseModel):
    order_id: str
    refunded: bool
    reason: str  # now required


def test_a_recorded_output_that_no_longer_validates_is_the_divergence(
    runwright_engine: TestEngine,
) -> None:
    name = unique("verdicts")
    model = ScriptedModel(
        name,
        [
            tools(call("find_order", {"order_id": "C-3"})),
            output(Verdict(order_id="C-3", refunded=False)),
        ],
    )
    Agent(name=name, model=model.model, tools=[find_order], output=Verdict)
    run = runwright_engine.run(name, {"message": "was C-3 refunded?"})
    assert run.status is RunStatus.COMPLETED, run.error
    stricter = Agent(
        name=name, model="openai/unused", tools=[find_order], output=StricterVerdict, register=False
    )
    case = Case.of_run(runwright_engine.engine, run.id)
    with pytest.raises(CaseFailed, match=r"diverged at step 2: final_result: .*reason"):
        replay_case(case, agent=stricter, engine=runwright_engine)
    same = Agent(
        name=name, model="openai/unused", tools=[find_order], output=Verdict, register=False
    )
    assert replay_case(case, agent=same, engine=runwright_engine).replay.output == {
        "order_id": "C-3",
        "refunded": False,
    }
