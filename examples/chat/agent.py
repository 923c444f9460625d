"""The chat example's agent: ``chat_assistant`` answers each message of a
thread, and refunds an order only once the thread's own user approves it
in the chat (``ApprovalPolicy(to="requester")``). Its replies stream
(``stream=True``). Workers find it through ``RUNWRIGHT_AGENTS=examples.chat.agent``.

Set ``RUNWRIGHT_MODEL`` (a litellm model string) for a real model; without
it a scripted model plays the part, so the example runs without an API key.
"""

from __future__ import annotations

import re
from typing import Any

from runner import Agent, ApprovalPolicy, tool
from runner.settings import Settings
from runner.testing import Reply, Request, ScriptedModel, call, text, tools

AGENT = "chat_assistant"
ORDER = re.compile(r"\b[A-Z]-\d{4}\b")


@tool
def refund_order(order_id: str) -> dict[str, Any]:
    """Refund an order in full."""
    return {"order_id": order_id, "refunded": True}


def scripted(request: Request) -> Reply:
    """What the scripted model says: a refund asked for is a call of the
    tool; after it, and to anything else, a few words."""
    last = max(i for i, m in enumerate(request.messages) if m.get("role") == "user")
    said = str(request.messages[last]["content"])
    since = request.messages[last + 1 :]
    if since:
        result = since[-1].get("content", "")
        return text(f"Done: {result}")
    order = ORDER.search(said)
    if "refund" in said.lower() and order:
        return tools(call("refund_order", {"order_id": order.group(0)}))
    return text(f"You said: {said}. Ask me to refund an order, e.g. A-1001.")


MODEL = Settings.from_env().model or ScriptedModel(AGENT, scripted, chunk_delay=0.05).model

Agent(
    name=AGENT,
    model=MODEL,
    instructions="You are a support assistant. Refund an order only when asked.",
    tools=[refund_order],
    approvals={"refund_order": ApprovalPolicy(to="requester")},
    on_new_message="interrupt",
    stream=True,
)
