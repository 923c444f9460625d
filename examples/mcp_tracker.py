"""An MCP server and an agent that takes its tools (docs/mcp.md).

The server is a small issue tracker written with the ``mcp`` SDK: ``search``
is annotated read-only, so the agent gets it as a plain tool; ``open_issue``
is not, so it is an effect, journaled, and gated by a person here. Run the
server on its own with ``python -m examples.mcp_tracker`` (stdio); the agent
``tracker_triage`` starts it itself, one process per worker process. Workers
find the agent through ``RUNWRIGHT_AGENTS=examples.mcp_tracker``.

Set ``RUNWRIGHT_MODEL`` to use a real model; without it a scripted model
plays the part.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from runner import Agent
from runner.mcp import MCPServer
from runner.settings import Settings
from runner.testing import ScriptedModel, call, text, tools

AGENT = "tracker_triage"
ROOT = str(Path(__file__).resolve().parent.parent)

tracker = MCPServer.stdio(
    "tracker",
    sys.executable,
    args=["-m", "examples.mcp_tracker"],
    cwd=ROOT,
    env={"PYTHONPATH": ROOT},
)

scripted = ScriptedModel(
    AGENT,
    [
        tools(call("tracker_search", {"query": "parcel late"})),
        tools(
            call("tracker_open_issue", {"title": "Parcel late", "body": "Reported by a customer."})
        ),
        text("Opened an issue for the late parcel."),
    ],
)
Agent(
    name=AGENT,
    model=Settings.from_env().model or scripted.model,
    instructions="Search the tracker before opening an issue; never open a duplicate.",
    mcp=[tracker],
    approvals={"tracker_open_issue": True},
)


def serve() -> None:
    """The tracker's MCP server, over stdio (issues in memory)."""
    from mcp.server.mcpserver import MCPServer as Server
    from mcp.types import ToolAnnotations

    app = Server("tracker")
    issues: list[dict[str, Any]] = [{"number": 1, "title": "Login page slow"}]

    @app.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def search(query: str) -> list[dict[str, Any]]:
        """Issues whose title mentions one of the query's words."""
        words = query.lower().split()
        return [i for i in issues if any(w in i["title"].lower() for w in words)]

    @app.tool()
    def open_issue(title: str, body: str = "") -> dict[str, Any]:
        """Open an issue."""
        issue = {"number": len(issues) + 1, "title": title, "body": body}
        issues.append(issue)
        return issue

    app.run("stdio")


if __name__ == "__main__":
    serve()
