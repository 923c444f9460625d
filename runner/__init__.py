"""The engine: agents, tools, the tool loop, executions, approvals, tick, cancel, drain.

The engine never imports Celery (it is handed an ``enqueue`` callable; only the
integration ``runner/celery.py`` does), and only
``runner/model.py`` imports litellm, lazily (and ``runner/testing/scripted.py``, whose
provider it registers on the first call of a ``scripted/`` model). Names load on
first use, so the command line starts fast. The command line and the demo live
in ``runner/cli/``, which imports the engine; the engine never imports it.

The public names are these (``__all__``). Where the rest lives:

- ``engine/``: the :class:`Engine` and its executions, ``tick()``, the runtime.
- ``steps/``: the step loop and its tool calls, tools, the message history.
- ``events/``: a run's events and their live delivery.
- ``approvals/``: approval decisions, link tokens, the inbox.
- ``agent.py``, ``errors.py``, ``retry.py`` (:class:`RetryPolicy` and the
  durable backoff), ``model.py`` (the model adapter), ``notifiers.py``,
  ``sse.py`` and ``faults.py`` (for tests).
- ``mcp/``: tools from MCP servers (the ``mcp`` extra, docs/mcp.md).
- ``testing/``: the kit for testing agents (scripted models, an in-process
  engine, the pytest plugin).
- ``observe/``, ``console/``, ``cli/``, ``celery.py``: the integrations.

``runner.__version__`` is the installed distribution's version (pyproject.toml's).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from runner.layout import require_own_modules

require_own_modules("store")

from runner.release import version  # noqa: E402
from store.lazy import lazy_attributes  # noqa: E402

if TYPE_CHECKING:
    from runner.agent import Agent, ApprovalPolicy, ApprovalRequest, Budget, registry
    from runner.engine.engine import Engine
    from runner.errors import (
        AgentAlreadyRegistered,
        AgentNotFound,
        ApprovalError,
        ConfigurationError,
        InvalidApprovalInput,
        InvalidInput,
        LeaseLostError,
        ModelError,
        PayloadTooLarge,
        RunNotFound,
        RunwrightError,
    )
    from runner.model import warm_up
    from runner.retry import RetryPolicy
    from runner.steps.builtin_tools import AskHuman
    from runner.steps.run_context import RunContext
    from runner.steps.tools import Tool, effect, tool
    from store.models import Run, RunStatus, TriggerEnvelope

_LAZY = {
    "Agent": "runner.agent",
    "SchemaMismatch": "runner.errors",
    "StoreRefused": "runner.errors",
    "WrongRequestKind": "runner.errors",
    "RunNotWaiting": "runner.errors",
    "InvalidApprovalToken": "runner.errors",
    "InvalidApprovalId": "runner.errors",
    "ApprovalNotFound": "runner.errors",
    "ApprovalExpired": "runner.errors",
    "ApprovalAlreadyDecided": "runner.errors",
    "AgentNotFound": "runner.errors",
    "AgentAlreadyRegistered": "runner.errors",
    "ApprovalError": "runner.errors",
    "ApprovalPolicy": "runner.agent",
    "ApprovalRequest": "runner.agent",
    "AskHuman": "runner.steps.builtin_tools",
    "Budget": "runner.agent",
    "ConfigurationError": "runner.errors",
    "Engine": "runner.engine.engine",
    "ForkRepeatsEffects": "runner.errors",
    "InvalidApprovalInput": "runner.errors",
    "InvalidInput": "runner.errors",
    "LeaseLostError": "runner.errors",
    "ModelError": "runner.errors",
    "PayloadTooLarge": "runner.errors",
    "RetryPolicy": "runner.retry",
    "Run": "store.models",
    "RunContext": "runner.steps.run_context",
    "RunNotFound": "runner.errors",
    "RunStatus": "store.models",
    "RunwrightError": "runner.errors",
    "Tool": "runner.steps.tools",
    "TriggerEnvelope": "store.models",
    "effect": "runner.steps.tools",
    "registry": "runner.agent",
    "tool": "runner.steps.tools",
    "warm_up": "runner.model",
}


_lazy_attribute = lazy_attributes(__name__, _LAZY)

if TYPE_CHECKING:
    __version__: str


def __getattr__(name: str) -> Any:
    # ``__version__`` too is read on first use: importlib.metadata takes longer
    # to import than the command line takes to start.
    if name == "__version__":
        return version() or "0+unknown"
    return _lazy_attribute(name)


_default_engine: Engine | None = None
_default_engine_lock = threading.Lock()


def default_engine() -> Engine:
    """The process-wide engine configured from the environment: one, even
    when several threads of a web app ask first at once (each engine holds
    pools of its own)."""
    global _default_engine
    found = _default_engine
    if found is not None:
        return found
    with _default_engine_lock:
        if _default_engine is None:
            from runner.engine.engine import Engine

            _default_engine = Engine.from_env()
        return _default_engine


def set_default_engine(engine: Engine | None) -> None:
    """Use ``engine`` for :func:`start_run` (tests, or apps that build their own)."""
    global _default_engine
    with _default_engine_lock:
        _default_engine = engine


def start_run(agent: str, payload: Any = None, **kwargs: Any) -> Run:
    """Create a run and enqueue it: the one call a web app needs.

    In Django, call it inside ``transaction.on_commit`` so that a worker never
    sees a run whose request rolled back.
    """
    return default_engine().start(agent, payload, **kwargs)


def wait_for(run_id: str, timeout: float | None = None, until: str = "ended") -> Run:
    """The run once it ends (``until="waiting"``: or waits for an approval),
    or as it is after ``timeout`` seconds: :meth:`Engine.wait` on the default
    engine, driven by the live feed, not by polling."""
    return default_engine().wait(run_id, timeout, until)


__all__ = [
    "Agent",
    "AgentAlreadyRegistered",
    "AgentNotFound",
    "ApprovalError",
    "ApprovalPolicy",
    "ApprovalRequest",
    "AskHuman",
    "Budget",
    "ConfigurationError",
    "Engine",
    "InvalidApprovalInput",
    "InvalidInput",
    "LeaseLostError",
    "ModelError",
    "PayloadTooLarge",
    "RetryPolicy",
    "Run",
    "RunContext",
    "RunNotFound",
    "RunStatus",
    "RunwrightError",
    "Tool",
    "TriggerEnvelope",
    "default_engine",
    "effect",
    "registry",
    "set_default_engine",
    "start_run",
    "tool",
    "version",
    "wait_for",
    "warm_up",
]
