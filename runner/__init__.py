"""The engine: agents, tools, the tool loop, executions, approvals, tick, cancel, drain.

The engine never imports Celery (it is handed an ``enqueue`` callable; only the
integration ``runner/celery.py`` does), and only
``runner/core/model.py`` imports litellm, lazily (and ``runner/testing/scripted.py``, whose
provider it registers on the first call of a ``scripted/`` model). Names load on
first use, so the command line starts fast. The command line and the demo live
in ``runner/cli/``, which imports the engine; the engine never imports it.

The public names are these (``__all__``). The tree shows where the core ends:

- ``core/``: the engine core, which imports no integration
  (docs/engine-layers.md): agents and tools, the model adapter, executions
  and their step loop, approvals, events, schedules, ``tick()``, the journal
  port, the runtime, leases and errors.
- The integrations, clients of the core: ``celery.py`` and
  ``celery_plugin.py``, ``cli/``, ``console/``, ``sse.py``, ``webhooks/``,
  ``notifiers.py``, ``observe/`` (traces and metrics), ``evals/`` (replays
  and evaluations in a sandbox) and ``testing/`` (the
  kit: scripted models, an in-process engine, the pytest plugin).
- The public paths of core modules, each only a re-export: ``errors.py``,
  ``settings.py``, ``retry.py``, ``model.py``, ``appdb.py``, ``faults.py``
  and ``mcp.py`` (the ``mcp`` extra, docs/mcp.md).

``runner.__version__`` is the installed distribution's version (pyproject.toml's).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from runner.core.layout import require_own_modules

require_own_modules("store")

from runner.core.deprecation import alias_moved_modules  # noqa: E402
from runner.core.release import version  # noqa: E402
from store.lazy import lazy_attributes  # noqa: E402

if TYPE_CHECKING:
    from runner.core.agent import (
        Agent,
        ApprovalPolicy,
        ApprovalRequest,
        Budget,
        Concurrency,
        registry,
    )
    from runner.core.engine.conversations import Thread
    from runner.core.engine.engine import Engine
    from runner.core.errors import (
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
        ThreadBusy,
    )
    from runner.core.limits.model_limits import ModelLimit
    from runner.core.model import warm_up
    from runner.core.redaction import Redactor
    from runner.core.retry import RetryPolicy
    from runner.core.steps.builtin_tools import AskHuman
    from runner.core.steps.context_window import History
    from runner.core.steps.run_context import RunContext
    from runner.core.steps.tools import Tool, done, effect, not_done, tool
    from runner.evals.replay import ReplayReport
    from store.models import Run, RunStatus, TriggerEnvelope

_LAZY = {
    "Agent": "runner.core.agent",
    "SchemaMismatch": "runner.core.errors",
    "StoreRefused": "runner.core.errors",
    "WrongRequestKind": "runner.core.errors",
    "RunNotWaiting": "runner.core.errors",
    "InvalidApprovalToken": "runner.core.errors",
    "InvalidApprovalId": "runner.core.errors",
    "ApprovalNotFound": "runner.core.errors",
    "ApprovalExpired": "runner.core.errors",
    "ApprovalAlreadyDecided": "runner.core.errors",
    "AgentNotFound": "runner.core.errors",
    "AgentAlreadyRegistered": "runner.core.errors",
    "ApprovalError": "runner.core.errors",
    "ApprovalPolicy": "runner.core.agent",
    "ApprovalRequest": "runner.core.agent",
    "AskHuman": "runner.core.steps.builtin_tools",
    "Budget": "runner.core.agent",
    "History": "runner.core.steps.context_window",
    "Concurrency": "runner.core.agent",
    "ModelLimit": "runner.core.limits.model_limits",
    "ConfigurationError": "runner.core.errors",
    "Engine": "runner.core.engine.engine",
    "ForkRepeatsEffects": "runner.core.errors",
    "InvalidApprovalInput": "runner.core.errors",
    "InvalidInput": "runner.core.errors",
    "LeaseLostError": "runner.core.errors",
    "ModelError": "runner.core.errors",
    "PayloadTooLarge": "runner.core.errors",
    "Redactor": "runner.core.redaction",
    "RetryPolicy": "runner.core.retry",
    "Run": "store.models",
    "RunContext": "runner.core.steps.run_context",
    "RunNotFound": "runner.core.errors",
    "RunStatus": "store.models",
    "RunwrightError": "runner.core.errors",
    "Tool": "runner.core.steps.tools",
    "Thread": "runner.core.engine.conversations",
    "ThreadBusy": "runner.core.errors",
    "TriggerEnvelope": "store.models",
    "done": "runner.core.steps.tools",
    "effect": "runner.core.steps.tools",
    "not_done": "runner.core.steps.tools",
    "registry": "runner.core.agent",
    "tool": "runner.core.steps.tools",
    "warm_up": "runner.core.model",
}


_lazy_attribute = lazy_attributes(__name__, _LAZY)

# The core's modules sat beside the integrations until 0.2: their old paths
# (``runner.engine.engine``) warn and give the module at its new one for a
# release (CHANGELOG.md). The public paths in runner/ stay (``runner.errors``).
MOVED_TO_CORE = {
    **{
        f"runner.{name}": f"runner.core.{name}"
        for name in [
            "agent",
            "approvals",
            "children",
            "clock",
            "coordination",
            "costs",
            "deprecation",
            "engine",
            "events",
            "journal",
            "layout",
            "release",
            "runtime",
            "schedules",
            "schemas",
            "steps",
        ]
    },
    "runner.observe.logs": "runner.core.observe.logs",
    "runner.observe.setup": "runner.core.observe.setup",
}
alias_moved_modules(MOVED_TO_CORE)

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
            from runner.core.engine.engine import Engine

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


def send(thread: str, message: str, *, agent: str, **kwargs: Any) -> Run:
    """Add a user's message to a thread (:meth:`Engine.send`) on the default engine."""
    return default_engine().send(thread, message, agent=agent, **kwargs)


def thread(thread_id: str) -> Thread:
    """A thread as a conversation (:meth:`Engine.thread`) on the default engine."""
    return default_engine().thread(thread_id)


def limit_model(pattern: str, limit: ModelLimit, *, replace: bool = False) -> None:
    """Limit the calls to the models ``pattern`` names (a model, a provider's
    prefix ending in ``*``, or ``*``; the most specific wins), shared by every
    worker (docs/flow-control.md). ``RUNWRIGHT_MODEL_LIMITS`` replaces a
    pattern declared here; declaring one again with another limit is refused
    unless ``replace=True``."""
    from runner.core.limits.model_limits import register

    register(pattern, limit, replace=replace)


def replay(
    run_id: str, *, agent: Any = None, mode: str = "recorded", **kwargs: Any
) -> ReplayReport:
    """Replay a recorded run through ``agent`` (an Agent, ``"module:name"``,
    or None: the recorded agent as defined now) in the sandbox, on the
    default engine's database: ``mode="recorded"`` replies as the recorded
    model did, ``"live"`` calls the model; effects never execute
    (docs/replay-and-evals.md, :func:`runner.evals.replay.replay`)."""
    from runner.evals.replay import replay as replay_run

    return replay_run(run_id, agent=agent, mode=mode, engine=default_engine(), **kwargs)  # type: ignore[arg-type]


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
    "Concurrency",
    "ConfigurationError",
    "Engine",
    "History",
    "InvalidApprovalInput",
    "InvalidInput",
    "LeaseLostError",
    "ModelError",
    "ModelLimit",
    "PayloadTooLarge",
    "Redactor",
    "RetryPolicy",
    "Run",
    "RunContext",
    "RunNotFound",
    "RunStatus",
    "RunwrightError",
    "Thread",
    "ThreadBusy",
    "Tool",
    "TriggerEnvelope",
    "default_engine",
    "done",
    "effect",
    "limit_model",
    "not_done",
    "registry",
    "replay",
    "send",
    "set_default_engine",
    "start_run",
    "thread",
    "tool",
    "version",
    "wait_for",
    "warm_up",
]
