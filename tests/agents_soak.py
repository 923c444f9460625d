"""The agent of the chaos soak (``bench/soak.py``): a run of ``steps`` steps
(payload) whose even steps charge once (an at-most-once effect), whose odd
steps look something up, and whose step ``approve_at`` (if any) asks for
approval before it refunds. Every effect appends its idempotency key to
``RUNWRIGHT_TEST_EFFECT_LOG`` when it really runs (``tests/agents.py``), and
``on_error`` records what stopped an execution (a zombie's ``LeaseLostError``).
"""

from __future__ import annotations

from typing import Any

from runner import Agent, ApprovalPolicy, Budget, effect
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from tests.agents import JOURNAL, charge, log_effect, lookup, report_error


@effect
def payout(amount: int, idempotency_key: str) -> dict[str, Any]:
    """Pay the customer back (at most once, after a person approved it)."""
    log_effect("payout", key=idempotency_key, amount=amount)
    return {"paid": amount, "key": idempotency_key}


def soak_steps(request: Request) -> Reply:
    payload = request.payload
    steps = int(payload.get("steps", 5))
    latency = float(payload.get("latency", 0.5))
    step = request.step
    if step >= steps:
        return text("soak done", latency=latency)
    if step == payload.get("approve_at"):
        return tools(call("payout", {"amount": step}), latency=latency)
    if step % 2 == 0:
        return tools(call("charge", {"amount": step}), latency=latency)
    return tools(call("lookup", {"q": f"step {step}"}), latency=latency)


soak_model = ScriptedModel("soak", soak_steps, journal=JOURNAL)
Agent(
    name="soak",
    model=soak_model.model,
    tools=[lookup, charge, payout],
    approvals={"payout": ApprovalPolicy(expires_in=3600)},
    budget=Budget(max_steps=20),
    on_error=report_error,
)
