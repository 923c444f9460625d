"""A production run as a regression test, in a line (docs/replay-and-evals.md)::

    def test_the_refund_incident():
        replay_case("tests/cases/refund-incident.json", agent=support)

The case file is what ``runwright runs export RUN`` printed (redacted). The
replay runs in the sandbox schema of a test database: the given engine's
(a :class:`~runner.testing.kit.TestEngine` or an engine), else a database of
its own, cloned from the kit's migrated template and dropped afterwards.
It fails the test, with both trajectories side by side, when the replay
diverges from the recording, ends otherwise than completed, or (when the
case expects an output) ends with another output.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.evals.recording import canonical, load_case

if TYPE_CHECKING:
    from runner.core.agent import Agent
    from runner.core.engine.engine import Engine
    from runner.evals.replay import Decide, Mode, Policy, ReplayReport
    from runner.evals.serving import ToolsMode
    from runner.testing.databases import Databases
    from runner.testing.kit import TestEngine

_databases: Databases | None = None
_lock = threading.Lock()


class CaseFailed(AssertionError):
    """The replay of a case did not do what the case recorded or expects."""


def replay_case(
    case: Any,
    *,
    agent: str | Agent | None = None,
    mode: Mode = "recorded",
    tools: ToolsMode | None = None,
    model: str | None = None,
    approvals: Policy | Decide = "approve",
    engine: TestEngine | Engine | None = None,
    check: bool = True,
) -> ReplayReport:
    """Replay ``case`` (a case file's path, its JSON, or a
    :class:`~runner.evals.recording.Case`) through ``agent`` (default: the
    case's agent as registered now) and fail with :class:`CaseFailed` unless
    it passes (see the module docstring); the report when it does.
    ``mode``, ``tools``, ``model`` and ``approvals`` are
    :func:`runner.evals.replay.replay`'s. ``check=False``: return the
    report whatever it says, for a test that asserts on it itself."""
    from runner.evals.replay import replay

    loaded = load_case(case)
    with _database(engine) as url:
        report = replay(
            loaded,
            agent=agent,
            mode=mode,
            tools=tools,
            model=model,
            approvals=approvals,
            engine=_engine(engine),
            database_url=url,
        )
    if not check:
        return report
    if not report.passed:
        raise CaseFailed(f"the replay of the case did not pass:\n{report.render()}")
    if loaded.has_expected and canonical(report.replay.output) != canonical(loaded.expected):
        raise CaseFailed(
            f"the case expects the output {loaded.expected!r}; the replay gave "
            f"{report.replay.output!r}:\n{report.render()}"
        )
    return report


def _engine(engine: TestEngine | Engine | None) -> Engine | None:
    from runner.testing.kit import TestEngine

    return engine.engine if isinstance(engine, TestEngine) else engine


@contextmanager
def _database(engine: TestEngine | Engine | None) -> Iterator[str | None]:
    """The URL of the database the sandbox goes in: None (the engine's), or a
    clone of the kit's template of this process's own, dropped after."""
    if engine is not None:
        yield None
        return
    databases = _session()
    name = databases.new_database()
    try:
        yield databases.database_url(name)
    finally:
        databases.drop_database(name)


def _session() -> Databases:
    global _databases
    with _lock:
        if _databases is None:
            from runner.testing.databases import Databases, open_databases

            _databases = open_databases(os.environ, Path(".runwright"), cls=Databases)
            atexit.register(_databases.close)
        return _databases
