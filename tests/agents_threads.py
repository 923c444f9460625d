"""Agents of threads for the worker subprocesses of
tests/e2e/test_conversation_workers.py: one per ``on_new_message`` policy.
Each answers a message with a charge (an effect, logged to
``RUNWRIGHT_TEST_EFFECT_LOG`` each time it really runs), then a slow
lookup, then a text naming every user message it was sent; a message that
says "quick" is answered at once."""

from __future__ import annotations

import time
from typing import Any

from runner import Agent, RunContext, effect, tool
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from tests.agents import JOURNAL, log_effect

POLICIES = ("enqueue", "reject", "interrupt", "rollback")


@effect
def charge(amount: int, idempotency_key: str) -> dict[str, Any]:
    """Charge the customer (at most once)."""
    log_effect("charge", key=idempotency_key, amount=amount)
    return {"charged": amount}


@tool
def slow_lookup(q: str, ctx: RunContext) -> str:
    """Look something up, slowly."""
    time.sleep(1.0)
    return f"{q}: found"


def script(request: Request) -> Reply:
    last = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
    done = len(request.messages) - last - 1
    users = [m["content"] for m in request.messages if m.get("role") == "user"]
    if "quick" in users[-1] or done >= 4:
        said = " | ".join(u for u in users if not u.startswith("A new message interrupted"))
        return text(f"seen: {said}")
    if done == 0:
        return tools(call("charge", {"amount": 5}), latency=0.2)
    return tools(call("slow_lookup", {"q": users[-1]}), latency=0.2)


for policy in POLICIES:
    name = f"thread-{policy}"
    Agent(
        name=name,
        model=ScriptedModel(name, script, journal=JOURNAL).model,
        tools=[charge, slow_lookup],
        on_new_message=policy,
    )
