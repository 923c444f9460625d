"""The runtime moved to ``runner/runtime.py``: the model adapter, tools, MCP
sessions and the event feed run on it, below the engine. Its names stay
importable from here for the modules and tests that still name this path."""

from __future__ import annotations

from runner.runtime import (
    Abortable,
    DaemonThreadPool,
    Runtime,
    in_io,
    runtime,
)

__all__ = ["Abortable", "DaemonThreadPool", "Runtime", "in_io", "runtime"]
