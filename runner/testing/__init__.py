"""Runwright's kit for testing agents: scripted models served through the real
litellm path, and (in :mod:`runner.testing.kit`) an engine that runs runs
in-process, decides their approvals, crashes them at named points and moves
their clock. The pytest plugin (:mod:`runner.testing.plugin`, registered
through the ``pytest11`` entry point) gives a test the ``runwright_engine``
fixture. docs/testing-your-agents.md shows each part.

Nothing on the production path imports this package: importing it plugs the
scripted models into the model adapter (``runner.core.model.serve_scripted_models``),
which imports nothing of the kit.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from runner.core.model import serve_scripted_models
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
    install_provider,
    output,
    price_scripted,
    rate_limited,
    server_error,
    text,
    timeout,
    tools,
)
from store.lazy import lazy_attributes

if TYPE_CHECKING:
    from runner.testing.cases import CaseFailed, replay_case
    from runner.testing.clock import ManualClock
    from runner.testing.kit import Crash, TestEngine, ToolCallRecord

# The engine's parts load on first use: a process that only scripts a model
# (a worker the tests start, the demo's) never builds a test engine.
_LAZY = {
    "CaseFailed": "runner.testing.cases",
    "replay_case": "runner.testing.cases",
    "Crash": "runner.testing.kit",
    "ManualClock": "runner.testing.clock",
    "TestEngine": "runner.testing.kit",
    "ToolCallRecord": "runner.testing.kit",
}

__getattr__ = lazy_attributes(__name__, _LAZY)

_provider_installed = False
_provider_lock = threading.Lock()


def _serve_scripted(litellm: Any, name: str) -> None:
    """The ``scripted`` provider registered with litellm on the first call of a
    scripted model in this process, then the model's price on each call."""
    global _provider_installed
    if not _provider_installed:
        with _provider_lock:
            if not _provider_installed:
                install_provider(litellm)
                _provider_installed = True
    price_scripted(litellm, name)


serve_scripted_models(_serve_scripted)

__all__ = [
    "ERROR_KINDS",
    "SCRIPTED",
    "CaseFailed",
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
    "replay_case",
    "server_error",
    "text",
    "timeout",
    "tools",
]
