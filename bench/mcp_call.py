"""What Runwright adds to an MCP tool call over a warm pooled session.

    python -m bench.mcp_call          # or: make bench

One stdio server process per side (bench/mcp_server.py), each with a warm
session: the same ``echo`` call made with the ``mcp`` SDK's own client
directly, and through Runwright's tool (``MCPTool``: the argument check
against the server's schema, the pooled session, the result's conversion),
alternated call by call on the process's runtime loop, as an execution makes
it. Reports the median per call of each and the difference.
Target: Runwright's median at most 1 ms over the direct one.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import report

ROOT = str(Path(__file__).resolve().parent.parent)
TARGET_MS = 1.0


async def _measure(calls: int, warm: int) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from runner.core.mcp import MCPServer
    from runner.core.mcp.sessions import session
    from runner.core.mcp.tools import server_tools

    command = [sys.executable, "-m", "bench.mcp_server"]
    server = MCPServer.stdio(
        "bench", command[0], args=command[1:], cwd=ROOT, env={"PYTHONPATH": ROOT}
    )
    [tool] = await server_tools(server)
    params = StdioServerParameters(
        command=command[0], args=command[1:], cwd=ROOT, env={"PYTHONPATH": ROOT}
    )
    direct: list[float] = []
    pooled: list[float] = []
    async with Client(params) as client:
        await client.list_tools()
        for i in range(warm + calls):
            arguments = {"text": f"hello {i}"}
            began = time.perf_counter()
            answer = await client.call_tool("echo", arguments)
            took = time.perf_counter() - began
            assert not answer.is_error
            began = time.perf_counter()
            parsed = tool.parse(arguments)
            value = await tool.invoke(parsed, None)  # type: ignore[arg-type]  (unused by MCP tools)
            ours = time.perf_counter() - began
            assert value == {"result": f"hello {i}"}, value
            if i >= warm:
                direct.append(took)
                pooled.append(ours)
    await session(server).close()
    direct_ms = statistics.median(direct) * 1000
    pooled_ms = statistics.median(pooled) * 1000
    return {
        "calls": calls,
        "direct_median_ms": round(direct_ms, 3),
        "runwright_median_ms": round(pooled_ms, 3),
        "overhead_ms": round(pooled_ms - direct_ms, 3),
        "ratio": round(pooled_ms / direct_ms, 3),
        "target_overhead_ms": TARGET_MS,
    }


def run(calls: int = 500, warm: int = 50) -> dict[str, Any]:
    from runner.core.runtime import runtime

    return runtime().run(_measure(calls, warm), timeout=600)


def main() -> None:
    result = run()
    report("mcp_call", result, result["overhead_ms"] <= TARGET_MS)


if __name__ == "__main__":
    main()
