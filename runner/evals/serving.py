"""The tools of a replay: each call is served from the recording, run again,
or held, and the :class:`Ledger` says which.

- An effect never executes. A call whose tool and arguments match a call the
  recording journaled returns that call's recorded result (each recorded
  call serves one call); any other returns a marked placeholder and is
  listed as one that *would have run*.
- A read-only tool runs again (``tools="live"``), or returns its recorded
  result for the same arguments (``tools="recorded"``); a call the recording
  has no result for then returns a marked placeholder (*not recorded*).
- A child agent's tool (``Agent.as_tool``) is served like an effect: a
  replay starts no child run.

Arguments match when their JSON is equal, keys in any order: the arguments
the model gave, not the defaults the tool's schema fills in.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pydantic

from runner.core.errors import RunwrightError
from runner.core.observe import Observer, ToolCall
from runner.core.steps.tools import Tool
from runner.evals.recording import RecordedCall, Recording, canonical

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from runner.core.steps.run_context import RunContext
    from store.models import Run

ToolsMode = Literal["live", "recorded"]
Served = Literal["recorded", "ran", "would_have_run", "not_recorded"]
TOOLS_MODES: tuple[str, ...] = ("live", "recorded")

# The key of a placeholder result: a model (and a scorer) can tell it apart.
PLACEHOLDER = "runwright_replay"

_call_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "runwright_replay_call", default=None
)


class RecordedToolError(RunwrightError):
    """A recorded call that failed fails the same way in a replay."""


@dataclass(frozen=True)
class ServedCall:
    """How one call of the replay was served."""

    call_id: str | None
    name: str
    arguments: Any
    served: Served
    effect: bool


class Ledger:
    """The recording's calls a replay may be served, and what it was served."""

    def __init__(self, recording: Recording | None, tools: ToolsMode) -> None:
        self.tools = tools
        self._left: list[RecordedCall] = [] if recording is None else list(recording.calls)
        self.served: list[ServedCall] = []
        self._lock = threading.Lock()

    def take(self, name: str, arguments: Any) -> RecordedCall | None:
        """The first recorded call of ``name`` with these arguments not yet
        served, now served; None if there is none."""
        wanted = canonical(arguments)
        with self._lock:
            for n, recorded in enumerate(self._left):
                if recorded.name == name and canonical(recorded.arguments) == wanted:
                    del self._left[n]
                    return recorded
        return None

    def note(self, name: str, arguments: Any, served: Served, effect: bool) -> None:
        with self._lock:
            self.served.append(ServedCall(_call_id.get(), name, arguments, served, effect))

    def of(self, call_id: str | None) -> ServedCall | None:
        with self._lock:
            return next((s for s in self.served if s.call_id == call_id), None)

    def would_have_run(self) -> list[ServedCall]:
        with self._lock:
            return [s for s in self.served if s.served == "would_have_run"]

    def ran(self) -> list[ServedCall]:
        with self._lock:
            return [s for s in self.served if s.served == "ran"]


def placeholder(name: str, arguments: Any, served: Served) -> dict[str, Any]:
    """The result a held call returns in place of one."""
    said = {
        "would_have_run": "effects do not run in a replay; this call would have run",
        "not_recorded": "the recording has no result of this call with these arguments",
    }[served]
    return {PLACEHOLDER: served, "tool": name, "arguments": arguments, "note": said}


class ServedTool(Tool):
    """``tool`` as a replay offers it: same name, description and schema,
    served by ``ledger`` (see the module docstring)."""

    def __init__(self, tool: Tool, ledger: Ledger, *, held: bool) -> None:
        super().__init__(
            tool.fn,
            name=tool.name,
            description=tool.description,
            params=tool.params,
            effect=tool.effect or held,
            retry=tool.retry,
            ctx_param=tool.ctx_param,
            key_param=tool.key_param,
        )
        self.original = tool
        self.ledger = ledger
        self.held = held or tool.effect  # never executed
        self.mcp_server = tool.mcp_server

    def about(self) -> dict[str, Any] | None:
        return self.original.about()

    def schema(self) -> dict[str, Any]:
        return self.original.schema()

    async def invoke(
        self,
        args: pydantic.BaseModel,
        ctx: RunContext,
        *,
        idempotency_key: str | None = None,
        executor: Executor | None = None,
    ) -> Any:
        given = args.model_dump(mode="json", exclude_unset=True)
        if self.held or self.ledger.tools == "recorded":
            recorded = self.ledger.take(self.name, given)
            if recorded is None and not self.held:
                self.ledger.note(self.name, given, "not_recorded", False)
                return placeholder(self.name, given, "not_recorded")
            if recorded is None:
                self.ledger.note(self.name, given, "would_have_run", True)
                return placeholder(self.name, given, "would_have_run")
            self.ledger.note(self.name, given, "recorded", self.held)
            if recorded.error is not None:
                raise RecordedToolError(_error_text(recorded.error))
            return recorded.output
        self.ledger.note(self.name, given, "ran", False)
        return await self.original.invoke(
            args, ctx, idempotency_key=idempotency_key, executor=executor
        )


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def served_tools(tools: list[Tool], ledger: Ledger) -> list[Tool]:
    """``tools`` as a replay offers them."""
    from runner.core.children import ChildTool

    return [ServedTool(t, ledger, held=isinstance(t, ChildTool)) for t in tools]


class CallIds(Observer):
    """Tells the served tools which call they serve (the ledger keys by it)."""

    @contextmanager
    def tool_call(self, run: Run, call: ToolCall) -> Iterator[None]:
        token = _call_id.set(call.call_id)
        try:
            yield
        finally:
            _call_id.reset(token)
