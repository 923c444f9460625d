"""Agents for the evaluation tests (tests/e2e/test_eval_workers.py,
tests/integration/test_evals.py): a refund agent in two versions. Their
model is an OpenAI-compatible server on loopback that the test starts, at
the address ``RUNWRIGHT_TEST_EVAL_API_BASE`` gives (the evaluation's worker
processes import this module, and find it there). Every call of a tool's
function is appended to ``RUNWRIGHT_TEST_EFFECT_LOG``, if set, so that a
test counts them across processes."""

from __future__ import annotations

import json
import os
from typing import Any

from runner import Agent, effect, tool
from runner.evals.scorers import Score, scorer, within

API_BASE = os.environ.get("RUNWRIGHT_TEST_EVAL_API_BASE", "http://127.0.0.1:9/v1")
NAME = "eval-refunds"
V1 = "Refund what the customer asks for."
V2 = "Refund what the customer asks for; escalate any refund over 100 to a person."


def _called(name: str, arguments: dict[str, Any]) -> None:
    log = os.environ.get("RUNWRIGHT_TEST_EFFECT_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"tool": name, "arguments": arguments, "pid": os.getpid()}) + "\n")


@tool
def find_order(order_id: str) -> dict[str, Any]:
    """Find an order."""
    _called("find_order", {"order_id": order_id})
    return {"order_id": order_id, "status": "delivered"}


@effect
def refund(order_id: str, amount: int) -> dict[str, Any]:
    """Refund an order."""
    _called("refund", {"order_id": order_id, "amount": amount})
    return {"refund_id": f"rf-{order_id}", "amount": amount}


def refunds_agent(
    instructions: str, *, api_base: str = API_BASE, name: str = NAME, register: bool = False
) -> Agent:
    """The refund agent with ``instructions`` (V1 or V2), its model at ``api_base``."""
    return Agent(
        name=name,
        model=f"openai/{name}",
        model_settings={"api_base": api_base, "api_key": "sk-loopback"},
        instructions=instructions,
        tools=[find_order, refund],
        register=register,
    )


refunds_v1 = refunds_agent(V1, register=True)
refunds_v2 = refunds_agent(V2)


@scorer
def polite(case: Any, report: Any) -> Score:
    """A user's scorer: the answer thanks the customer."""
    said = str(report.replay.output or "")
    return Score("thank" in said.lower(), None, None)


cheap = within(max_cost_usd=1.0, max_steps=4)


def script(step: int, body: dict[str, Any]) -> dict[str, Any]:
    """The model at the loopback server: looks the order up, refunds it and
    thanks the customer; the second version escalates refunds over 100. As a
    judge (runner.evals.scorers.judge), it passes an answer that thanks."""
    from runner.evals.scorers import JUDGE_INSTRUCTIONS
    from tests.provider import answer, tool_calls

    messages = body["messages"]
    if messages[0]["content"] == JUDGE_INSTRUCTIONS:
        graded = json.loads(messages[1]["content"])
        thanks = "thank" in str(graded["answer"]).lower()
        return answer(
            json.dumps({"passed": thanks, "score": 0.9 if thanks else 0.1, "reason": "-"})
        )
    v2 = V2 in messages[0]["content"]
    asked = json.loads(messages[1]["content"].removeprefix("```json\n").removesuffix("\n```"))[
        "payload"
    ]
    order, amount = asked["order"], int(asked["amount"])
    done = [m for m in messages if m["role"] == "assistant"]
    if not done:
        return tool_calls((f"find-{order}", "find_order", {"order_id": order}))
    if len(done) == 1:
        if v2 and amount > 100:
            return answer(f"Refund of {order} escalated to a person. Thank you.")
        return tool_calls((f"refund-{order}", "refund", {"order_id": order, "amount": amount}))
    return answer(f"Refunded {order}. Thank you.")
