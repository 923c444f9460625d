"""An approval nobody decided in time reads as expired to the model, and a
person's denial as a person's, whatever reason they typed (issue 26, item 6)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from runner import Agent, ApprovalPolicy, Engine, effect
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import Decision, RunStatus, StepKind, utcnow
from store.postgres import PostgresStore


@pytest.fixture
def queued() -> list[str]:
    return []


@pytest.fixture
def waiting_engine(
    pg_store: PostgresStore, leases: Leases, settings: Settings, queued: list[str]
) -> Iterator[Engine]:
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=queued.append)
    yield made
    made.close()


def refund_agent(done: list[int]) -> tuple[str, ScriptedModel]:
    name = f"expiry-{uuid.uuid4().hex[:8]}"

    @effect
    def refund(amount: int, idempotency_key: str) -> dict[str, Any]:
        """Refund money."""
        done.append(amount)
        return {"refunded": amount}

    def script(request: Request) -> Any:
        if request.step == 1:
            return tools(call("refund", {"amount": 30}))
        return text("finished")

    model = ScriptedModel(name, script)
    Agent(
        name=name,
        model=model.model,
        tools=[refund],
        approvals={"refund": ApprovalPolicy(expires_in=60, on_expire="deny")},
    )
    return name, model


def tool_result(model: ScriptedModel) -> Any:
    return json.loads(model.calls[1].tool_results()[-1]["content"])


def test_an_expired_approval_tells_the_model_it_expired(waiting_engine: Engine) -> None:
    engine = waiting_engine
    done: list[int] = []
    name, model = refund_agent(done)
    run = engine.start(name)
    engine.execute(run.id)
    assert engine.tick(now=utcnow() + timedelta(seconds=61)).expired == 1
    [approval] = engine.approvals(run.id)
    assert approval.decision is Decision.DENIED and approval.decided_by is None

    finished = engine.execute(run.id)
    assert finished is not None and finished.status is RunStatus.COMPLETED
    when = f"{approval.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    told = f"not approved: the approval expired at {when} with no decision"
    assert tool_result(model) == {"error": told}
    [step] = [s for s in engine.steps(run.id) if s.kind is StepKind.TOOL]
    assert step.error is not None and "denied" not in str(step.error)
    assert told in str(step.error)
    assert done == []


@pytest.mark.parametrize("by", [None, "bob"])
def test_a_person_who_types_expired_still_denied_it(waiting_engine: Engine, by: str | None) -> None:
    engine = waiting_engine
    done: list[int] = []
    name, model = refund_agent(done)
    run = engine.start(name)
    engine.execute(run.id)
    [approval] = engine.approvals(run.id)
    engine.decide(approval.approval_id, False, "expired", trusted=True, by=by)
    [decided] = engine.approvals(run.id)
    assert decided.reason == "expired" and decided.decided_by == by

    finished = engine.execute(run.id)
    assert finished is not None and finished.status is RunStatus.COMPLETED
    assert tool_result(model) == {"error": "denied by a human reviewer", "reason": "expired"}
    assert done == []
