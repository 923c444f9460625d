"""People beyond yes and no on real ``celery worker``s (issue 29's acceptance):
two approvals and a question in one step, decided in reverse order, with a
worker SIGKILLed between two decisions and another while the resumed run
works; and a tool approved for the rest of the run, which a retry asks for
again. Real Postgres, Redis, workers and beat; the agents are
tests/agents_people.py."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest

import tests.agents_people  # noqa: F401  (this process starts the runs by name)
from store.models import Decision, RequestKind, RunStatus, StepKind
from tests.agents import read_effect_log
from tests.e2e.cluster import Cluster, settled, wait_until

AGENTS = "tests.agents,tests.agents_people"


def ran(cluster: Cluster, tool: str) -> list[dict[str, Any]]:
    return [e for e in read_effect_log(str(cluster.workdir / "effects.jsonl")) if e["tool"] == tool]


@pytest.mark.timeout(240)
def test_two_approvals_and_a_question_decided_in_reverse_order_survive_killed_workers(
    cluster: Cluster,
) -> None:
    first_worker = cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=2)
    cluster.beat()  # recovers a run whose worker died
    engine = cluster.engine()
    run = engine.start("people_parallel")
    waiting = wait_until(
        lambda: (r := engine.get_run(run.id)).status is RunStatus.WAITING and r,
        60,
        "the run to wait for its people",
    )
    assert waiting.claim is None  # it holds no worker while it waits
    one, two, ask = engine.approvals(run.id)
    assert [a.tool_call_id for a in (one, two, ask)] == ["c_one", "c_two", "c_ask"]
    assert ask.kind is RequestKind.INPUT
    assert len(ran(cluster, "note_ticket")) == 1  # the step's plain effect ran before the wait

    # Reverse order: the question first, then the second refund, then the first.
    engine.answer(ask.approval_id, "blue", trusted=True, by="cy")
    first_worker.signal(signal.SIGKILL)  # between two decisions
    first_worker.wait(10)
    assert engine.decide(two.approval_id, False, "too much", trusted=True, by="bo").status is (
        RunStatus.WAITING
    )
    second_worker = cluster.worker("w2", RUNWRIGHT_AGENTS=AGENTS, concurrency=2)
    resumed = engine.decide(one.approval_id, True, trusted=True, by="ada", arguments={"amount": 3})
    assert resumed.status is RunStatus.QUEUED

    # The resumed run pays back (once), commits its step, and asks the model
    # again, slowly: the worker is killed while the model answers.
    wait_until(
        lambda: (
            any(s.kind is StepKind.TOOL and s.name == "pay_back" for s in engine.steps(run.id))
            and engine.get_run(run.id).status is RunStatus.RUNNING
        ),
        60,
        "the resumed step to commit its calls",
        interval=0.05,
    )
    second_worker.signal(signal.SIGKILL)
    second_worker.wait(10)
    cluster.worker("w3", RUNWRIGHT_AGENTS=AGENTS, concurrency=2)
    done = settled(cluster, run.id, timeout=120)
    assert done.status is RunStatus.COMPLETED, done.error
    executions = [e.data for e in engine.events(run.id, timeout=0) if e.type.value == "execution"]
    assert any(e["takeover"] for e in executions)  # w3 took over from the killed w2

    # Nothing lost, nothing repeated: one payment, of the person's amount,
    # under its call's key; the note was written once, before the wait.
    assert [(e["amount"], e["key"]) for e in ran(cluster, "pay_back")] == [(3, f"{run.id}:c_one")]
    assert len(ran(cluster, "note_ticket")) == 1
    # Each decision reached its own call.
    saw = json.loads(done.output)
    assert saw["calls"]["c_one"] == {"amount": 3}  # the call as it ran
    paid = json.loads(saw["results"]["c_one"])
    assert paid["asked_for"] == {"amount": 1} and paid["result"] == {"paid_back": 3}
    assert json.loads(saw["results"]["c_two"]) == {
        "error": "denied by a human reviewer",
        "reason": "too much",
    }
    assert saw["results"]["c_ask"] == "blue"
    decided = {a.tool_call_id: a for a in engine.approvals(run.id)}
    assert (decided["c_one"].decided_by, decided["c_one"].arguments) == ("ada", {"amount": 3})
    assert decided["c_two"].decision is Decision.DENIED
    assert (decided["c_ask"].decision, decided["c_ask"].answer) == (Decision.ANSWERED, "blue")


@pytest.mark.timeout(180)
def test_a_tool_approved_for_the_run_is_not_asked_again_until_a_retry(cluster: Cluster) -> None:
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=2)
    engine = cluster.engine()
    run = engine.start("people_standing")
    wait_until(lambda: engine.get_run(run.id).status is RunStatus.WAITING, 60, "the first approval")
    [first] = engine.approvals(run.id)
    engine.decide(first.approval_id, True, trusted=True, by="ada", for_run=True)
    stopped = settled(cluster, run.id)
    # The second and third calls, in later steps, ran without asking.
    assert stopped.status is RunStatus.FAILED and stopped.error is not None
    assert stopped.error.code == "budget_exceeded"
    assert [e["amount"] for e in ran(cluster, "pay_back")] == [10, 20, 30]
    later = engine.approvals(run.id)[1:]
    assert [(a.decided_by, a.standing_from) for a in later] == [("ada", first.approval_id)] * 2

    engine.retry(run.id, extra_steps=2)
    asked = wait_until(
        lambda: (r := engine.get_run(run.id)).status is RunStatus.WAITING and r,
        60,
        "the retry to ask again",
    )
    assert asked.waiting is not None and asked.waiting.input == {"amount": 40}
    assert [e["amount"] for e in ran(cluster, "pay_back")] == [10, 20, 30]
