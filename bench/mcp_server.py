"""The MCP server of the MCP call benchmark (bench/mcp_call.py): one read-only
tool that echoes its argument, over stdio."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

app = MCPServer("runwright-bench")


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> str:
    """Say it back."""
    return text


if __name__ == "__main__":
    app.run("stdio")
