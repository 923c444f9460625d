"""Agents for the trace tests (tests/integration/test_otel_spans.py,
tests/e2e/test_otel.py). Workers load them with
``RUNWRIGHT_AGENTS=tests.agents,tests.agents_otel``.

The ``otel`` agent puts the payload's ``secret`` into every tool argument, so
a test can look for it in every span: step 1 calls an async and a sync tool,
step 2 a refund that waits for approval, step 3 a tool that fails, then
``slow`` steps of ``latency`` seconds each (room for a SIGKILL mid-run), then
the answer.
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanContext

from runner import Agent, ApprovalPolicy, Budget, RunContext, effect, tool
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from tests.agents import JOURNAL, log_effect

# The span current inside each call of ``where`` (a sync tool: it runs in a
# thread of the tool pool), for the tests of context propagation.
SEEN: list[SpanContext] = []
_seen_lock = threading.Lock()


@tool
async def search(q: str, ctx: RunContext) -> dict[str, Any]:
    """Search the archive."""
    log_effect("search", run_id=ctx.run_id)
    return {"found": q, "hits": 2}


@tool
def where(q: str) -> str:
    """Say where the archive is."""
    with _seen_lock:
        SEEN.append(trace.get_current_span().get_span_context())
    return f"shelf for {q}"


@effect
def refund(amount: int, memo: str, idempotency_key: str) -> dict[str, Any]:
    """Refund the customer."""
    log_effect("otel_refund", key=idempotency_key, amount=amount)
    return {"refunded": amount, "memo": memo}


@tool
def flaky(q: str) -> str:
    """Read the archive's back room."""
    # The message never quotes the arguments: the tests check that it is
    # recorded, and that nothing of the arguments is.
    raise ConnectionError("the back room is offline")


def otel_script(request: Request) -> Reply:
    payload = request.payload
    secret = str(payload.get("secret", "nothing"))
    slow = int(payload.get("slow", 0))
    latency = float(payload.get("latency", 0))
    step = request.step
    if step == 1:
        return tools(call("search", {"q": secret}), call("where", {"q": secret}))
    if step == 2:
        return tools(call("refund", {"amount": 7, "memo": secret}))
    if step == 3:
        return tools(call("flaky", {"q": secret}))
    if step < 4 + slow:
        return tools(call("search", {"q": f"{secret} {step}"}), latency=latency)
    return text("all done", latency=latency)


otel_model = ScriptedModel("otel", otel_script, journal=JOURNAL)
Agent(
    name="otel",
    model=otel_model.model,
    tools=[search, where, refund, flaky],
    approvals={"refund": ApprovalPolicy(expires_in=3600)},
    budget=Budget(max_steps=60),
)


def hiccup_script(request: Request) -> Reply:
    """Rate-limited, every time: a transient failure, so the run is retried later."""
    return Reply(error="rate_limit")


hiccup_model = ScriptedModel("otel-hiccup", hiccup_script, journal=JOURNAL)
Agent(name="otel-hiccup", model=hiccup_model.model)


def refused_script(request: Request) -> Reply:
    """Refused, every time: not transient, so the run fails."""
    return Reply(error="auth")


refused_model = ScriptedModel("otel-refused", refused_script, journal=JOURNAL)
Agent(name="otel-refused", model=refused_model.model)
