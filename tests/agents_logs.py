"""An agent whose execution writes log lines from everywhere a run's lines
come from: a sync tool (a pool thread), an async tool, the model adapter's
retry of a rate limit, a tool error, and the outcome line."""

from __future__ import annotations

import logging

from runner import Agent, tool
from runner.testing import Reply, Request, ScriptedModel, call, text, tools

log = logging.getLogger("tests.agents_logs")


@tool
def sync_note(note: str) -> str:
    """Write a note (on a tool thread)."""
    log.info("sync tool wrote %s", note)
    return "noted"


@tool
async def async_note(note: str) -> str:
    """Write a note (on the event loop)."""
    log.warning("async tool wrote %s", note)
    return "noted"


@tool
def broken(note: str) -> str:
    """Always fails."""
    raise RuntimeError(f"broken tool: {note}")


_limited: set[str] = set()


def script(request: Request) -> Reply:
    if request.step == 1:
        return tools(call("sync_note", {"note": "one"}), call("async_note", {"note": "two"}))
    if request.step == 2:
        run = repr(request.payload)
        if run not in _limited:  # one rate limit per run: the adapter retries it
            _limited.add(run)
            return text("x", error="rate_limit")
        return tools(call("broken", {"note": "three"}))
    return text("logged")


logging_model = ScriptedModel("logging", script)
Agent(name="logging", model=logging_model.model, tools=[sync_note, async_note, broken])
