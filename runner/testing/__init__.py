"""Runwright's kit for testing agents: scripted models served through the real
litellm path, and (in :mod:`runner.testing.kit`) an engine that runs runs
in-process, decides their approvals, crashes them at named points and moves
their clock. The pytest plugin (:mod:`runner.testing.plugin`, registered
through the ``pytest11`` entry point) gives a test the ``runwright_engine``
fixture. docs/testing-your-agents.md shows each part.

Nothing on the production path imports this package: ``runner.model`` loads
:mod:`runner.testing.scripted` on the first call of a ``scripted/`` model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runner.testing.requests import allow_model_requests, block_model_requests
from runner.testing.scripted import (
    ERROR_KINDS,
    SCRIPTED,
    Reply,
    Request,
    Script,
    ScriptedModel,
    ScriptedModelNotFound,
    ScriptExhausted,
    ToolCall,
    UnconsumedModelSteps,
    UnexpectedModelCall,
    UnknownScriptedTool,
    call,
    output,
    rate_limited,
    server_error,
    text,
    timeout,
    tools,
)
from store.lazy import lazy_attributes

if TYPE_CHECKING:
    from runner.testing.clock import ManualClock
    from runner.testing.kit import Crash, TestEngine, ToolCallRecord

# The engine's parts load on first use: runner.model imports this package
# (for the scripted provider) in processes that never build a test engine.
_LAZY = {
    "Crash": "runner.testing.kit",
    "ManualClock": "runner.testing.clock",
    "TestEngine": "runner.testing.kit",
    "ToolCallRecord": "runner.testing.kit",
}

__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "ERROR_KINDS",
    "SCRIPTED",
    "Crash",
    "ManualClock",
    "Reply",
    "Request",
    "Script",
    "ScriptExhausted",
    "ScriptedModel",
    "ScriptedModelNotFound",
    "TestEngine",
    "ToolCall",
    "ToolCallRecord",
    "UnconsumedModelSteps",
    "UnexpectedModelCall",
    "UnknownScriptedTool",
    "allow_model_requests",
    "block_model_requests",
    "call",
    "output",
    "rate_limited",
    "server_error",
    "text",
    "timeout",
    "tools",
]
