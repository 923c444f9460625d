"""``runner.mcp``, a public path of the core's ``runner/core/mcp/``: tools from MCP servers
(docs/mcp.md)."""

from runner.core.mcp import *  # noqa: F403
