"""Tools from MCP servers, through the official ``mcp`` SDK (the ``mcp``
extra: ``pip install 'runwright[mcp]'``), imported only when an agent that
declares a server runs (docs/mcp.md).

- ``servers.py``: :class:`MCPServer`, a server's declaration.
- ``names.py``: the names its tools reach the model under.
- ``sessions.py``: one pooled session per server and worker process.
- ``tools.py``: its tools as Runwright tools (plain, or effects).
"""

from __future__ import annotations

from runner.core.mcp.servers import MCPServer

__all__ = ["MCPServer"]
