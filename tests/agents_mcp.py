"""Agents with tools from the MCP test server (tests/mcp_servers.py), for
the tests that run them on real workers. The server's URL and call log come
from the worker's environment when a session connects
(``RUNWRIGHT_TEST_MCP_URL``, ``RUNWRIGHT_TEST_MCP_LOG``), so a test can start
its own server where it likes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from runner import Agent, RetryPolicy
from runner.core.mcp import MCPServer
from runner.testing import ScriptedModel, call, text, tools
from tests.agents import JOURNAL

ROOT = str(Path(__file__).resolve().parent.parent)


def _env() -> dict[str, str]:
    return {
        "RUNWRIGHT_TEST_MCP_LOG": os.environ.get("RUNWRIGHT_TEST_MCP_LOG", ""),
        "PYTHONPATH": ROOT,
    }


stdio = MCPServer.stdio(
    "tracker", sys.executable, args=["-m", "tests.mcp_servers"], cwd=ROOT, env=_env
)
http = MCPServer.http(
    "tracker",
    os.environ.get("RUNWRIGHT_TEST_MCP_URL", "http://127.0.0.1:9/mcp"),
    connect_seconds=3,
)

# A refund the server takes seconds to answer: a worker can die mid-call.
slow_refund_model = ScriptedModel(
    "mcp-slow-refund",
    [tools(call("tracker_slow_refund", {"order": "A1"}, id="call_refund")), text("done")],
    journal=JOURNAL,
)
Agent(name="mcp_slow_refund", model=slow_refund_model.model, mcp=[stdio])


def _gated(name: str, server: MCPServer) -> None:
    """Looks an order up, then waits for a person before filing an issue."""
    model = ScriptedModel(
        name,
        [
            tools(
                call("tracker_lookup", {"q": "A7"}, id="call_lookup"),
                call("tracker_create_issue", {"title": "late"}, id="call_issue"),
            ),
            tools(call("tracker_lookup", {"q": "A8"}, id="call_again")),
            text("filed"),
        ],
        journal=JOURNAL,
    )
    Agent(
        name=name,
        model=model.model,
        mcp=[server],
        approvals={"tracker_create_issue": True},
        retry=RetryPolicy(initial_backoff=1.0, multiplier=1.5, max_backoff=4.0),
    )


_gated("mcp_gated_stdio", stdio)
_gated("mcp_gated_http", http)

# A call the server answers in a minute: cancel must not wait for it.
hang_model = ScriptedModel(
    "mcp-hang", [tools(call("tracker_slow", {}, id="call_slow")), text("never")], journal=JOURNAL
)
Agent(name="mcp_hang", model=hang_model.model, mcp=[stdio])

# One lookup over HTTP: against a server that refuses the credentials.
lookup_model = ScriptedModel(
    "mcp-lookup-http",
    [tools(call("tracker_lookup", {"q": "A9"}, id="call_lookup")), text("found")],
    journal=JOURNAL,
)
Agent(
    name="mcp_lookup_http",
    model=lookup_model.model,
    mcp=[http],
    retry=RetryPolicy(initial_backoff=1.0, multiplier=1.5, max_backoff=4.0),
)


# The same slow refund, under a declaration that a worker's environment
# changes (issue 48, item 3): RUNWRIGHT_TEST_MCP_BLOCK leaves the server's
# tools it names out of what the agent is offered, RUNWRIGHT_TEST_MCP_PLAIN
# makes them plain tools (as a server that now annotates them read-only).
def _named(variable: str) -> list[str]:
    return [name for name in os.environ.get(variable, "").split(",") if name]


relisted = MCPServer.stdio(
    "tracker",
    sys.executable,
    args=["-m", "tests.mcp_servers"],
    cwd=ROOT,
    env=_env,
    block=_named("RUNWRIGHT_TEST_MCP_BLOCK"),
    effects={name: False for name in _named("RUNWRIGHT_TEST_MCP_PLAIN")},
)
relisted_refund_model = ScriptedModel(
    "mcp-relisted-refund",
    [tools(call("tracker_slow_refund", {"order": "A1"}, id="call_refund")), text("done")],
    journal=JOURNAL,
)
Agent(name="mcp_relisted_refund", model=relisted_refund_model.model, mcp=[relisted])
