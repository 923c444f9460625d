"""The demo agent: triage a bug report, file a ticket once a person approves.

It runs on a scripted model unless ``RUNWRIGHT_MODEL`` names a real one (with
its provider key in the environment). Its notifier writes the approval request
to an inbox file and prints the command a person would run.
"""

from __future__ import annotations

import hashlib
import json

from runner.core.agent import Agent, ApprovalPolicy, ApprovalRequest, Budget
from runner.core.settings import Settings
from runner.core.steps.tools import effect, tool
from runner.testing import Reply, Request, ScriptedModel, call, text, tools

SETTINGS = Settings.from_env()
HOME = SETTINGS.home
INBOX = HOME / "demo-inbox.jsonl"
TICKETS = HOME / "demo-tickets.jsonl"
JOURNAL = HOME / "demo-model-calls.jsonl"

INSTRUCTIONS = """You triage bug reports. Search the logs and similar issues, then file
one ticket with a severity and a one-paragraph summary, then answer with the cause."""


@tool
def search_logs(query: str) -> list[str]:
    """Search the application logs."""
    return [
        f"12:00:01 ERROR boot: config key 'db.pool' missing (query: {query})",
        "12:00:01 FATAL main: startup aborted",
    ]


@tool
def find_similar_issues(title: str) -> list[dict[str, str]]:
    """Find issues that look like this one."""
    return [
        {"id": "BUG-412", "title": "Crash at startup after config migration", "state": "closed"}
    ]


@effect
def file_ticket(title: str, severity: str, summary: str, idempotency_key: str) -> dict[str, str]:
    """File a ticket in the tracker (a side effect: it needs a person's approval)."""
    ticket = "RW-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:6].upper()
    HOME.mkdir(parents=True, exist_ok=True)
    with open(TICKETS, "a") as handle:
        handle.write(json.dumps({"ticket": ticket, "title": title, "key": idempotency_key}) + "\n")
    return {"ticket": ticket, "severity": severity}


def notify(request: ApprovalRequest) -> None:
    """Hand the approval to a person: here, a line in the inbox (which holds the
    token) and a note in the worker's log (which never does: logs are read by
    more people than approvals are meant for)."""
    entry = {
        "approval_id": request.approval_id,
        "token": request.token,
        "run_id": request.run_id,
        "tool_name": request.tool_name,
        "input": request.input,
    }
    HOME.mkdir(parents=True, exist_ok=True)
    with open(INBOX, "a") as handle:
        handle.write(json.dumps(entry) + "\n")
    print(
        f"approval needed: runwright approve {request.approval_id} --token <token from {INBOX}>",
        flush=True,
    )


def script(request: Request) -> Reply:
    payload = request.payload
    title = str(payload.get("title", "a bug"))
    steps = int(payload.get("steps", 0))
    if steps:  # the long investigation of the second run: one log search per step
        if request.step < steps:
            return tools(
                call("search_logs", {"query": f"{title}, pass {request.step}"}), latency=0.8
            )
        return text(f"Investigated {title!r} in {steps - 1} passes: the config key is missing.")
    if request.step == 1:
        return tools(
            call("search_logs", {"query": title}),
            call("find_similar_issues", {"title": title}),
            latency=0.3,
        )
    if request.step == 2:
        return tools(
            call(
                "file_ticket",
                {
                    "title": title,
                    "severity": "high",
                    "summary": "Startup aborts: config key 'db.pool' is missing since the "
                    "config migration (like BUG-412).",
                },
            ),
            latency=0.3,
        )
    return text(
        "Filed the ticket. Cause: the 'db.pool' config key went missing in the config "
        "migration; restoring it fixes the crash on start.",
        latency=0.3,
    )


scripted = ScriptedModel("demo-triage", script, journal=JOURNAL)

triage = Agent(
    name="triage",
    model=SETTINGS.model or scripted.model,
    instructions=INSTRUCTIONS,
    tools=[search_logs, find_similar_issues, file_ticket],
    approvals={"file_ticket": ApprovalPolicy(expires_in=3600)},
    notifier=notify,
    budget=Budget(max_steps=20),
)
