"""The agent both example apps start: ``support_triage``.

It looks an order up, then asks to refund it; the refund waits for a person, who
gets a link to that approval's page in the web app's console. Workers find the agent through
``RUNWRIGHT_AGENTS=examples.agents``.

The link carries the approval's token: whoever has it can decide. So it goes to
the approvers only, here an inbox file (``EXAMPLE_INBOX``, by default
``.runwright/example-inbox.txt``, readable by its owner only); the worker's log
says which approval was sent, never the link.

Set ``RUNWRIGHT_MODEL`` (any litellm model string, e.g. ``openai/gpt-4o-mini``)
to use a real model; without it a scripted model plays the part, so the
examples run without an API key.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from runner import Agent, ApprovalRequest, effect, tool
from runner.settings import Settings
from runner.testing import Reply, Request, ScriptedModel, call, text, tools

AGENT = "support_triage"

log = logging.getLogger(__name__)

# Where the web app serves the console (at /console): the notifier builds links from it.
BASE_URL = os.environ.get("EXAMPLE_BASE_URL", "http://localhost:5000")

ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {"order_id": "A-1001", "total": 40, "status": "delivered damaged"},
    "A-1002": {"order_id": "A-1002", "total": 125, "status": "never arrived"},
}

# Stand-ins for a payment provider and an approvers' inbox, so you (and the
# tests) can see what the agent did.
refunds: list[dict[str, Any]] = []
sent_links: list[str] = []


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id (like A-1001)."""
    return ORDERS.get(order_id, {"error": f"no order {order_id}"})


@effect
def refund(order_id: str, amount: int, idempotency_key: str) -> dict[str, Any]:
    """Refund ``amount`` of an order to the customer. A person approves it first."""
    # A real provider would take idempotency_key, so a retried call refunds once.
    refunds.append({"order_id": order_id, "amount": amount, "key": idempotency_key})
    return {"refunded": amount, "order_id": order_id}


def approval_link(approval_id: str, token: str) -> str:
    return f"{BASE_URL}/console/approvals/{approval_id}?token={quote(token)}"


def inbox() -> Path:
    default = Settings.from_env().home / "example-inbox.txt"
    return Path(os.environ.get("EXAMPLE_INBOX") or default)


def deliver(link: str) -> None:
    """Append the link to the inbox file, which only its owner may read."""
    path = inbox()
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(descriptor, "a") as handle:
        handle.write(link + "\n")


def notify(request: ApprovalRequest) -> None:
    """Send the approvers the link. Raising would make tick() retry."""
    link = approval_link(request.approval_id, request.token)
    deliver(link)
    sent_links.append(link)
    # The link is a credential: the log names the approval, not the token.
    log.info(
        "run %s (%s) waits for approval %s of %s; the link went to %s",
        request.run_id,
        request.agent,
        request.approval_id,
        request.tool_name,
        inbox(),
    )


def scripted_triage(request: Request) -> Reply:
    """What a model would do: look the order up, ask for a refund, summarise."""
    if request.step == 1:
        trigger = next(m["content"] for m in request.messages if m["role"] == "user")
        found = re.search(r"A-\d+", str(trigger))
        return tools(call("lookup_order", {"order_id": found[0] if found else "A-1001"}))
    last = json.loads(request.tool_results()[-1]["content"])
    if request.step == 2 and "total" in last:
        status = last.get("status", "has a problem")
        says = f"Order {last['order_id']} {status}: I will refund its total."
        return Reply(
            says, [call("refund", {"order_id": last["order_id"], "amount": last["total"]})]
        )
    return text(f"Triage done: {json.dumps(last)}")


MODEL = Settings.from_env().model or ScriptedModel(AGENT, scripted_triage).model

support_triage = Agent(
    name=AGENT,
    model=MODEL,
    instructions=(
        "You triage customer support messages. Look up the order the message is "
        "about; if the customer is owed money, refund the order total. Then answer "
        "with one sentence for the support team."
    ),
    tools=[lookup_order, refund],
    approvals={"refund": True},
    notifier=notify,
)
