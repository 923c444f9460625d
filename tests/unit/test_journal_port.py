"""The journal port (runner/core/journal.py): an execution, its step loop and its
tool calls see the store through it alone, it fits on one screen, and a tool
call runs a few frames below the step loop, built from a handful of parts.

The last test drives the real step loop over an in-memory journal: the port
is all the loop needs of the store."""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import sys
import uuid
from collections.abc import Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from runner.core.agent import Agent
from runner.core.clock import SYSTEM
from runner.core.journal import Journal, Start
from runner.core.observe import Observer
from runner.core.settings import Settings
from runner.core.steps.history import open_step, trigger_message
from runner.core.steps.run_context import AbortSignal, RunContext
from runner.core.steps.step_loop import StepLoop
from runner.core.steps.toolcalls import CallRunner
from runner.core.steps.tools import tool
from store.models import (
    Effect,
    Ended,
    NewApproval,
    Outcome,
    Run,
    RunStatus,
    StepCommit,
    TriggerEnvelope,
    Usage,
)

ROOT = Path(__file__).resolve().parents[2]
# The execution's path: what runs one execution, from its claim to its settle.
EXECUTION_PATH = [
    ROOT / "runner/core/journal.py",
    ROOT / "runner/core/engine/execution.py",
    *sorted((ROOT / "runner/core/steps").rglob("*.py")),
]
# What of the store the execution's path may import: plain data and pure rules.
STORE_ALLOWED = {"store.models", "store.jsonsafe", "store.rules"}


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top, lazily or for the checker."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _store_imports(path: Path) -> set[str]:
    modules = {m for m in _imports(path) if m == "store" or m.startswith("store.")}
    # ``from store.models import Run`` lists store.models.Run: its module decides.
    return {m for m in modules if not any(m.startswith(f"{ok}.") for ok in STORE_ALLOWED)}


def test_the_execution_path_imports_of_the_store_only_plain_data_and_rules() -> None:
    beyond = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in EXECUTION_PATH
        for module in _store_imports(path)
        if module not in STORE_ALLOWED
    }
    assert beyond == set()


def test_the_steps_import_nothing_of_the_engine_above_them() -> None:
    steps = [
        ROOT / "runner/core/steps/step_loop.py",
        *(ROOT / "runner/core/steps/toolcalls").glob("*.py"),
    ]
    upward = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in steps
        for module in _imports(path)
        if module.startswith("runner.core.engine")
    }
    assert upward == set()


def test_the_port_fits_on_one_screen() -> None:
    source, _ = inspect.getsourcelines(Journal)
    members = [name for name in vars(Journal) if not name.startswith("_")]
    assert len(source) <= 120, len(source)
    # 26: the version an execution runs on is recorded through it too
    # (record_version; DESIGN.md §12 names version records among its duties).
    assert len(members) <= 26, members


def test_call_runner_is_built_from_a_handful_of_parts() -> None:
    parameters = list(inspect.signature(CallRunner.__init__).parameters)[1:]
    assert len(parameters) <= 8, parameters


# ---------------------------------------------------------- frame depth


class _Journal:
    """A journal in memory: what the step loop asks of the store, no more."""

    def __init__(self, run: Run) -> None:
        self.run_ = run
        self.commits: list[StepCommit] = []
        self.effect_rows: dict[str, Effect] = {}

    @property
    def fence(self) -> Any:
        return type("Fence", (), {"run_id": self.run_.id, "epoch": 1})()

    async def commit_step(self, commit: StepCommit, *, soon: bool = False) -> Ended | None:
        self.commits.append(commit)
        return None

    async def effects(self, call_ids: list[str]) -> dict[str, Effect]:
        return {}

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the step of this test should not ask the journal for {name}")


class _Services:
    observer = Observer()
    clock = SYSTEM
    settings = Settings(secret_key="test:journal-port-test-key")
    retry_policy: Any = None
    model_retries = 0
    model_backoff_seconds = 0.0
    notify_delay = timedelta(seconds=60)

    def __init__(self, executor: ThreadPoolExecutor) -> None:
        self.tool_executor = executor
        self.tokens = type("Keys", (), {"current_id": "k1"})()
        self.feed = self

    def token(self, run_id: str, delta: dict[str, Any]) -> bool:
        return True

    def send(self, run_ids: Iterable[str]) -> None:
        pass

    async def notify_approvals(self, agent: Agent, run: Run, new: Sequence[NewApproval]) -> None:
        pass


class _Host:
    def __init__(self, journal: Journal, signal: AbortSignal) -> None:
        self.journal = journal
        self.signal = signal

    async def end(self, outcome: Outcome) -> Ended:
        raise AssertionError("the step of this test does not settle")

    async def end_aborted(self, agent: Agent) -> Ended:
        raise AssertionError("the step of this test is not aborted")


def _ours(frame: Any) -> bool:
    """A frame of the project's code: not asyncio's, threading's or any library's."""
    return frame.f_code.co_filename.startswith(str(ROOT))


def _frames(frame: Any) -> list[Any]:
    """The frames from ``frame`` outwards within one task: up to the event
    loop's handle that runs the task's step."""
    found = []
    while frame is not None and not (
        frame.f_code.co_name == "_run" and frame.f_code.co_filename == asyncio.events.__file__
    ):
        found.append(frame)
        frame = frame.f_back
    return found


def test_a_tool_runs_at_most_4_frames_below_the_step_loop() -> None:
    """From the step loop's method to the tool's own function, counting the
    frames of each task on the way (where a task was created, its creator's
    frames), but for asyncio's, threading's and any library's."""
    depth: list[int] = []
    creators: dict[asyncio.Task[Any], list[Any]] = {}

    def logical_stack(frame: Any) -> list[Any]:
        stack = _frames(frame)
        task = asyncio.current_task()
        while task is not None and task in creators:
            stack += creators[task]
            task = getattr(task, "_runwright_parent", None)
        return stack

    @tool
    async def lookup(city: str) -> str:
        here = sys._getframe()
        stack = [f for f in logical_stack(here) if _ours(f)]
        loop_at = next(
            i for i, f in enumerate(stack) if isinstance(f.f_locals.get("self"), StepLoop)
        )
        depth.append(loop_at)  # frames below StepLoop's: the tool's own is the last
        return f"sunny in {city}"

    name = f"port-depth-{uuid.uuid4().hex[:8]}"
    agent = Agent(name=name, model="scripted/none", tools=[lookup], register=False)
    now = datetime.now(UTC)
    trigger = TriggerEnvelope(payload={"city": "Oslo"})
    run = Run(str(uuid.uuid4()), name, RunStatus.RUNNING, trigger, Usage(), now, now)
    call = {"id": "c1", "type": "function", "function": {"name": "lookup"}}
    call["function"]["arguments"] = json.dumps({"city": "Oslo"})  # type: ignore[index]
    history = [trigger_message(trigger), {"role": "assistant", "tool_calls": [call]}]

    async def go() -> None:
        loop = asyncio.get_running_loop()

        def factory(
            event_loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kw: Any
        ) -> asyncio.Task[Any]:
            parent = asyncio.current_task(event_loop)
            task = asyncio.Task(coro, loop=event_loop, **kw)
            creators[task] = _frames(sys._getframe(1))
            task._runwright_parent = parent  # type: ignore[attr-defined]
            return task

        loop.set_task_factory(factory)
        signal = AbortSignal(loop)
        journal = _Journal(run)
        with ThreadPoolExecutor(1) as executor:
            services = _Services(executor)
            ctx = RunContext(run.id, name, trigger, signal)
            start = Start(run, None, None)
            step_loop = StepLoop(_Host(journal, signal), services, agent, ctx, start)  # type: ignore[arg-type]
            step_loop.messages = list(history)
            step_loop.tools = {"lookup": lookup}
            step_loop.calls = CallRunner(journal, services, agent, run, ctx, step_loop.tools)  # type: ignore[arg-type]
            await step_loop._step(1, open_step(step_loop.messages))
        assert [r.tool_call_id for r in journal.commits[0].tool_steps] == ["c1"]

    asyncio.run(go())
    assert depth and depth[0] <= 4, depth


def test_the_fault_points_wrap_the_journal_only_while_one_is_armed() -> None:
    from runner.core import faults

    now = datetime.now(UTC)
    run = Run("r1", "a", RunStatus.RUNNING, TriggerEnvelope(), Usage(), now, now)
    journal = _Journal(run)
    assert faults.wrap(journal) is journal  # type: ignore[arg-type]
    hits: list[str] = []
    faults.arm(faults.AFTER_COMMIT, hits.append)
    try:
        wrapped = faults.wrap(journal)  # type: ignore[arg-type]
        commit = StepCommit(step_index=1, base_count=0, new_messages=[])
        assert asyncio.run(wrapped.commit_step(commit)) is None
    finally:
        faults.disarm()
    assert isinstance(wrapped, faults.Faulted)
    assert hits == [faults.AFTER_COMMIT] and journal.commits == [commit]
