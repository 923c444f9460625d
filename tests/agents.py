"""Agents shared by in-process tests and the worker subprocesses they start.

Tools append a line to ``RUNWRIGHT_TEST_EFFECT_LOG`` each time they really run,
so a test can count executions across processes; the scripted models journal
every call to ``RUNWRIGHT_SCRIPTED_JOURNAL``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from runner import Agent, ApprovalPolicy, Budget, History, RunContext, effect, tool
from runner.core.steps.context_window import SUMMARY_INSTRUCTIONS
from runner.core.steps.tools import Reconciled, done, not_done
from runner.testing import Reply, Request, ScriptedModel, call, text, tools

JOURNAL = os.environ.get("RUNWRIGHT_SCRIPTED_JOURNAL")


def log_effect(name: str, **fields: Any) -> None:
    path = os.environ.get("RUNWRIGHT_TEST_EFFECT_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps({"tool": name, "pid": os.getpid(), **fields}) + "\n")


def read_effect_log(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


@tool
async def lookup(q: str, ctx: RunContext) -> dict[str, Any]:
    """Search the knowledge base."""
    log_effect("lookup", run_id=ctx.run_id, q=q)
    return {"q": q, "hits": 3}


@effect
def charge(amount: int, idempotency_key: str) -> dict[str, Any]:
    """Charge the customer (at most once)."""
    log_effect("charge", key=idempotency_key, amount=amount)
    return {"charged": amount, "key": idempotency_key}


@effect(retry="at_least_once")
def refund(amount: int, idempotency_key: str) -> dict[str, Any]:
    """Refund the customer (retried if the outcome is unknown)."""
    log_effect("refund", key=idempotency_key, amount=amount)
    return {"refunded": amount, "key": idempotency_key}


# Step 1: a plain tool and an at-most-once effect; step 2: an at-least-once
# effect; step 3: the answer.
crash_model = ScriptedModel(
    "crash",
    [
        tools(call("lookup", {"q": "crash"}), call("charge", {"amount": 5})),
        tools(call("refund", {"amount": 5})),
        text("Refunded."),
    ],
    journal=JOURNAL,
)
Agent(name="crash", model=crash_model.model, tools=[lookup, charge, refund])


def charged(idempotency_key: str) -> Reconciled | None:
    """What the "provider" (the effect log) knows of a charge under that key."""
    path = os.environ.get("RUNWRIGHT_TEST_EFFECT_LOG")
    if not path:
        return None
    for entry in read_effect_log(path):
        if entry.get("tool") == "charge_checked" and entry.get("key") == idempotency_key:
            return done({"charged": entry["amount"], "key": idempotency_key, "found": True})
    return not_done()


@effect(reconcile=charged)
def charge_checked(amount: int, idempotency_key: str) -> dict[str, Any]:
    """Charge the customer (at most once; a lost outcome is looked up)."""
    log_effect("charge_checked", key=idempotency_key, amount=amount)
    return {"charged": amount, "key": idempotency_key}


reconciled_model = ScriptedModel(
    "reconciled",
    [tools(call("charge_checked", {"amount": 9})), text("Charged.")],
    journal=JOURNAL,
)
Agent(name="reconciled", model=reconciled_model.model, tools=[charge_checked])


def five_steps(request: Request) -> Reply:
    """Four steps of tool calls, then an answer; each reply takes a little while."""
    latency = float(os.environ.get("RUNWRIGHT_TEST_MODEL_LATENCY", "0"))
    if request.step < 5:
        return tools(call("lookup", {"q": f"step {request.step}"}), latency=latency)
    return text("done", latency=latency)


five_model = ScriptedModel("five", five_steps, journal=JOURNAL)
Agent(name="five", model=five_model.model, tools=[lookup])


def with_refund(request: Request) -> Reply:
    """Two lookups, a refund that needs approval, then an answer."""
    if request.step <= 2:
        return tools(call("lookup", {"q": f"step {request.step}"}))
    if request.step == 3:
        return tools(call("refund", {"amount": 7}))
    return text("refund handled")


approval_model = ScriptedModel("approve", with_refund, journal=JOURNAL)
Agent(
    name="approve",
    model=approval_model.model,
    tools=[lookup, refund],
    approvals={"refund": ApprovalPolicy(expires_in=3600)},
)


def slow_steps(request: Request) -> Reply:
    if request.step < 20:
        return tools(call("lookup", {"q": f"step {request.step}"}), latency=0.5)
    return text("done")


slow_model = ScriptedModel("slow", slow_steps, journal=JOURNAL)
Agent(name="slow", model=slow_model.model, tools=[lookup], budget=Budget(max_steps=30))


@tool
def nap(seconds: float) -> str:
    """Sleep."""
    time.sleep(seconds)
    return "rested"


@tool
async def anap(seconds: float) -> str:
    """Sleep, asynchronously."""
    await asyncio.sleep(seconds)
    return "rested"


def hang(request: Request) -> Reply:
    return text("never", latency=3600)


hang_model = ScriptedModel("hang", hang, journal=JOURNAL)
Agent(name="hang", model=hang_model.model)


def fleet(request: Request) -> Reply:
    """Five steps: a lookup, a charge, a refund (approval above 100), a lookup, the answer."""
    amount = int(request.payload.get("amount", 10))
    latency = float(os.environ.get("RUNWRIGHT_TEST_MODEL_LATENCY", "0.05"))
    plan = {
        1: tools(call("lookup", {"q": "order"}), latency=latency),
        2: tools(call("charge", {"amount": amount}), latency=latency),
        3: tools(call("refund", {"amount": amount}), latency=latency),
        4: tools(call("lookup", {"q": "wrap up"}), latency=latency),
    }
    return plan.get(request.step, text("done", latency=latency))


fleet_model = ScriptedModel("fleet", fleet, journal=JOURNAL)
Agent(
    name="fleet",
    model=fleet_model.model,
    tools=[lookup, charge, refund],
    approvals={"refund": lambda args: int(args["amount"]) >= 100},
)


def report_error(run_id: str, error: BaseException) -> None:
    log_effect("on_error", run_id=run_id, error=type(error).__name__)


def steady(request: Request) -> Reply:
    """``steps`` steps (payload), each charging once and taking ``latency`` seconds."""
    payload = request.payload
    steps = int(payload.get("steps", 10))
    latency = float(payload.get("latency", 0.3))
    if request.step < steps:
        return tools(call("charge", {"amount": request.step}), latency=latency)
    return text("steady done", latency=latency)


steady_model = ScriptedModel("steady", steady, journal=JOURNAL)
Agent(
    name="steady",
    model=steady_model.model,
    tools=[charge],
    budget=Budget(max_steps=200),
    on_error=report_error,
    concurrency_key=lambda trigger: (
        trigger.payload.get("customer") if isinstance(trigger.payload, dict) else None
    ),
)


def paced(request: Request) -> Reply:
    """``steps`` steps (payload) of a plain async lookup, ``latency`` seconds each."""
    payload = request.payload
    steps = int(payload.get("steps", 5))
    latency = float(payload.get("latency", 1.0))
    if request.step < steps:
        return tools(call("lookup", {"q": f"step {request.step}"}), latency=latency)
    return text("paced done", latency=latency)


# Priced like a small hosted model, as production models are: litellm prices
# every call of it (an unpriced one also takes litellm's zero-cost checks).
paced_model = ScriptedModel("paced", paced, journal=JOURNAL, price=(1.5e-7, 6e-7))
Agent(name="paced", model=paced_model.model, tools=[lookup], budget=Budget(max_steps=200))


def summarizing(request: Request) -> Reply:
    """A thread's turns, answered in a word; a summary when one is asked for
    (an agent's History that summarizes: runner/core/steps/context_window.py)."""
    if request.messages[0].get("content") == SUMMARY_INSTRUCTIONS:
        return text("summary: the user sent numbered turns, each noted.")
    return text("noted")


# A budget of a few turns: a summary is due every few runs of a thread.
summarizing_model = ScriptedModel("summarizing", summarizing, journal=JOURNAL)
Agent(
    name="summarizing",
    model=summarizing_model.model,
    history=History(budget_tokens=300, keep="summarize", summary_tokens=60),
)
