"""One replay: a recorded run's trigger through an agent definition, in the
sandbox (runner/evals/sandbox.py), and the report that sets the two
trajectories side by side.

- ``mode="recorded"``: the model's replies come from the recording, so the
  replay checks that the code today still accepts the recorded history: its
  tools still exist, their schemas still take the recorded arguments, its
  output still validates. The first step where the replay parts from the
  recording is the :class:`Divergence`, with the reason.
- ``mode="live"``: the model is called (the agent's, or ``model``), and the
  tools are served as runner/evals/serving.py says: effects never execute.

A decision the replay's run waits for takes the recorded decision of the same
call (tool and arguments); any other is decided by ``approvals``: "approve",
"deny", "ask" (the replay stops there, unless a callable answers), or a
callable of the :class:`~store.models.Approval` that returns True (approve),
False (deny), or, for a question, the answer; None stops the replay.

Nothing is written to the recorded run: the replay's run is the sandbox's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import secrets
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from runner.core.agent import Agent, Registry
from runner.core.errors import InvalidInput
from runner.core.settings import Settings
from runner.evals.recording import Case, RecordedDecision, Recording, canonical
from runner.evals.sandbox import Sandbox, store_url
from runner.evals.serving import TOOLS_MODES, CallIds, Ledger, ToolsMode, served_tools
from store.errors import InvalidApprovalInput
from store.models import RequestKind
from store.status import RunStatus

if TYPE_CHECKING:
    from runner.core.engine.engine import Engine
    from runner.core.observe import Observer
    from runner.core.steps.run_context import RunContext
    from runner.core.steps.tools import Tool
    from store.models import Approval, Run

Mode = Literal["recorded", "live"]
MODES: tuple[str, ...] = ("recorded", "live")
Policy = Literal["approve", "deny", "ask"]
Decide = Callable[["Approval"], Any]
POLICIES: tuple[str, ...] = ("approve", "deny", "ask")
# How many waits one replay decides before it gives up on its run.
MAX_WAITS = 50


# ------------------------------------------------------------ the report


@dataclass(frozen=True)
class CallView:
    """One tool call on one side: what was asked, what came back, and (on
    the replay's side) how it was served."""

    name: str
    arguments: Any
    result: Any = None
    error: str | None = None
    served: str | None = None

    def signature(self) -> str:
        return f"{self.name}({canonical(self.arguments)})"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class StepView:
    """One model step: its words and its tool calls."""

    index: int
    text: str | None
    calls: tuple[CallView, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "text": self.text, "calls": [c.to_json() for c in self.calls]}


@dataclass(frozen=True)
class Side:
    """One trajectory: its steps and its totals. ``model_ms``: the time its
    model steps took (a run's wall time holds people's waits)."""

    status: str | None
    output: Any
    error: Any
    steps: tuple[StepView, ...]
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    model_ms: float

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def calls(self) -> list[CallView]:
        return [c for s in self.steps for c in s.calls]

    def step(self, index: int) -> StepView | None:
        return next((s for s in self.steps if s.index == index), None)

    @classmethod
    def of(cls, recording: Recording, ledger: Ledger | None = None) -> Side:
        steps = []
        for step in recording.steps:
            done = {c.call_id: c for c in recording.calls_of(step.index)}
            calls = []
            for asked in step.message.get("tool_calls") or ():
                function = asked.get("function") or {}
                recorded = done.get(asked.get("id"))
                served = ledger.of(asked.get("id")) if ledger is not None else None
                calls.append(
                    CallView(
                        name=str(function.get("name")),
                        arguments=_arguments(function.get("arguments")),
                        result=None if recorded is None else recorded.output,
                        error=None if recorded is None else _text(recorded.error),
                        served=None if served is None else served.served,
                    )
                )
            content = step.message.get("content")
            steps.append(
                StepView(step.index, content if isinstance(content, str) else None, tuple(calls))
            )
        return cls(
            status=recording.status,
            output=recording.output,
            error=recording.error,
            steps=tuple(steps),
            input_tokens=recording.input_tokens,
            output_tokens=recording.output_tokens,
            cost_usd=recording.cost_usd,
            model_ms=sum(s.duration_ms or 0.0 for s in recording.steps),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "output": self.output,
            "error": self.error,
            "steps": [s.to_json() for s in self.steps],
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "model_ms": round(self.model_ms, 3),
        }


@dataclass(frozen=True)
class Divergence:
    """Where the replay first parted from the recording, and why."""

    step: int
    reason: str


@dataclass(frozen=True)
class ReplayReport:
    """What a replay did beside what the recorded run did."""

    agent: str
    mode: str
    tools: str
    run_id: str | None  # the recorded run
    version: str  # the replayed definition's version
    original: Side
    replay: Side
    divergence: Divergence | None
    would_have_run: tuple[CallView, ...]
    ran: tuple[str, ...]  # the read-only tools that ran again, a name per call
    decisions: tuple[str, ...]  # how each wait was decided
    stopped: str | None  # why the replay stopped before its run ended
    sandbox_run: str
    wall_ms: float

    @property
    def passed(self) -> bool:
        """The replay followed the recording and its run completed."""
        return (
            self.divergence is None
            and self.stopped is None
            and self.replay.status == RunStatus.COMPLETED.value
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "mode": self.mode,
            "tools": self.tools,
            "run_id": self.run_id,
            "version": self.version,
            "passed": self.passed,
            "divergence": None if self.divergence is None else dataclasses.asdict(self.divergence),
            "would_have_run": [c.to_json() for c in self.would_have_run],
            "ran": list(self.ran),
            "decisions": list(self.decisions),
            "stopped": self.stopped,
            "sandbox_run": self.sandbox_run,
            "wall_ms": round(self.wall_ms, 3),
            "original": self.original.to_json(),
            "replay": self.replay.to_json(),
        }

    def render(self, width: int = 100) -> str:
        """The two trajectories side by side, then where they part and the totals."""
        half = (width - 8) // 2
        lines = [
            f"replay of {self.run_id or 'a case'} ({self.agent}) as {self.version}, "
            f"{self.mode}, tools {self.tools}",
            f"{'step':<6}  {'original':<{half}}{'replay':<{half}}",
        ]
        count = max([s.index for s in self.original.steps + self.replay.steps], default=0)
        for k in range(1, count + 1):
            left = _step_lines(self.original.step(k))
            right = _step_lines(self.replay.step(k))
            mark = "*" if self.divergence is not None and self.divergence.step == k else " "
            for n in range(max(len(left), len(right))):
                a = _clip(left[n] if n < len(left) else "", half - 2)
                b = _clip(right[n] if n < len(right) else "", half - 2)
                lines.append(f"{(str(k) + mark) if n == 0 else '':<6}  {a:<{half}}{b:<{half}}")
        lines.append(
            f"{'output':<6}  {_clip(_show(self.original.output), half - 2):<{half}}"
            f"{_clip(_show(self.replay.output), half - 2):<{half}}"
        )
        lines.append(
            f"{'status':<6}  {self.original.status!s:<{half}}{self.replay.status!s:<{half}}"
        )
        o, r = self.original, self.replay
        lines.append(f"{'tokens':<6}  {o.tokens:<{half}}{r.tokens:<{half}}")
        lines.append(f"{'cost':<6}  {_money(o.cost_usd):<{half}}{_money(r.cost_usd):<{half}}")
        lines.append(f"{'model':<6}  {o.model_ms:<{half}.0f}{r.model_ms:<{half}.0f}")
        if self.divergence is not None:
            lines.append(f"diverged at step {self.divergence.step}: {self.divergence.reason}")
        else:
            lines.append("no divergence")
        for call in self.would_have_run:
            lines.append(f"would have run: {call.signature()}")
        if self.ran:
            lines.append("ran again (read-only): " + ", ".join(self.ran))
        for decided in self.decisions:
            lines.append(f"decided: {decided}")
        if self.stopped:
            lines.append(f"stopped: {self.stopped}")
        return "\n".join(lines)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            return raw
    return raw


def _text(error: Any) -> str | None:
    """An error as one line (a schema's message spans several)."""
    if error is None:
        return None
    if isinstance(error, dict):
        said = str(error.get("message") or json.dumps(error, default=str))
    else:
        said = str(error)
    said = said.split("\n    For further information", 1)[0]
    return " ".join(said.split())


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.6f}"


def _step_lines(step: StepView | None) -> list[str]:
    if step is None:
        return ["-"]
    lines = [f"{c.signature()}" + (f" [{c.served}]" if c.served else "") for c in step.calls]
    for c in step.calls:
        if c.error:
            lines.append(f"  ! {c.name}: {c.error}")
    if step.text:
        lines.append(repr(step.text) if not step.calls else f"{step.text!r}")
    return lines or ["(nothing)"]


def divergence(original: Side, replay: Side) -> Divergence | None:
    """The first step where ``replay`` parts from ``original``: other tool
    calls, a call that failed where the recorded one did not, a call the
    recording had no result for, a step one side took and the other did not,
    or another ending."""
    last = max([s.index for s in original.steps + replay.steps], default=0)
    for k in range(1, last + 1):
        o, r = original.step(k), replay.step(k)
        if o is None:
            return Divergence(k, "the replay took a model step the original did not")
        if r is None:
            ended = f"{replay.status}" + (f": {_text(replay.error)}" if replay.error else "")
            return Divergence(k, f"the replay ended ({ended}) before this step")
        asked_o = [c.signature() for c in o.calls]
        asked_r = [c.signature() for c in r.calls]
        if asked_o != asked_r:
            return Divergence(
                k,
                f"the original called {', '.join(asked_o) or 'no tool'}; "
                f"the replay called {', '.join(asked_r) or 'no tool'}",
            )
        for co, cr in zip(o.calls, r.calls, strict=True):
            if cr.error and not co.error:
                return Divergence(k, f"{cr.name}: {cr.error}")
            if cr.served == "not_recorded":
                return Divergence(k, f"{cr.name}: the recording has no result for these arguments")
    if original.status != replay.status:
        ended = f"{replay.status}" + (f": {_text(replay.error)}" if replay.error else "")
        return Divergence(last, f"the original ended {original.status}; the replay {ended}")
    return None


# ------------------------------------------------------------ the replay


def load_agent(spec: str | Agent | None, name: str, registry: Registry | None = None) -> Agent:
    """The definition to replay with: an :class:`Agent`; ``"module:attribute"``
    (an Agent in an importable module); an agent's name; or None, the agent
    the recording names, as this process registers it now (its current version)."""
    if isinstance(spec, Agent):
        return spec
    from runner.core.agent import registry as default_registry

    found_in = registry or default_registry
    if spec is None or spec == "current":
        return found_in.get(name)
    if ":" not in spec:
        return found_in.get(spec)
    module, _, attribute = spec.partition(":")
    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:
        raise InvalidInput(f"cannot import {module!r} for --agent: {exc}") from None
    agent = getattr(loaded, attribute, None)
    if not isinstance(agent, Agent):
        raise InvalidInput(f"{spec!r} is not an Agent (MODULE:NAME names one)")
    return agent


def recorded_model(recording: Recording) -> Any:
    """A scripted model that replies, step by step, what the recording's model
    replied; a step past the recording fails as a bad request
    (:class:`~runner.testing.scripted.BeyondRecording`)."""
    from runner.testing.scripted import ScriptedModel, recorded_script

    return ScriptedModel(
        f"replay-{uuid.uuid4().hex[:12]}", recorded_script(recording), strict=False
    )


def replay(
    source: str | Recording | Case,
    *,
    agent: str | Agent | None = None,
    mode: Mode = "recorded",
    tools: ToolsMode | None = None,
    model: str | None = None,
    approvals: Policy | Decide = "approve",
    engine: Engine | None = None,
    database_url: str | None = None,
    observers: Sequence[Observer] = (),
) -> ReplayReport:
    """Replay ``source`` (a run id in ``engine``'s journal, a
    :class:`Recording` or a :class:`Case`) through ``agent`` (see
    :func:`load_agent`; default: the recorded agent as defined now) in the
    sandbox, and report it beside the recording (see the module docstring).

    ``tools``: "live" or "recorded" for the read-only tools (default: as the
    ``mode``). ``model``: a litellm model string for a live replay. The
    sandbox is in ``database_url``'s database (default: ``engine``'s, else
    ``RUNWRIGHT_DATABASE_URL``'s)."""
    if mode not in MODES:
        raise InvalidInput(f"a replay's mode is one of {', '.join(MODES)}, not {mode!r}")
    chosen: str = tools or ("recorded" if mode == "recorded" else "live")
    if chosen not in TOOLS_MODES:
        raise InvalidInput(f"a replay's tools are one of {', '.join(TOOLS_MODES)}, not {chosen!r}")
    if not callable(approvals) and approvals not in POLICIES:
        raise InvalidInput(
            f"a replay's approvals are one of {', '.join(POLICIES)} or a callable, "
            f"not {approvals!r}"
        )
    if model is not None and mode != "live":
        raise InvalidInput("a model is given to a live replay; a recorded one replies as recorded")
    owned = None
    if isinstance(source, str) and engine is None:
        from runner.core.engine.engine import Engine as EngineType

        engine = owned = EngineType.from_env()
    try:
        recording, case = _source(source, engine)
        if recording is None and mode == "recorded":
            raise InvalidInput("a recorded replay needs a recording; this case has none")
        name = recording.agent if recording is not None else case.agent if case else ""
        definition = load_agent(agent, name, engine.deps.registry if engine else None)
        url = database_url or (store_url(engine.deps.store) if engine is not None else None)
        if url is None:
            url = Settings.from_env().database_url
        if not url:
            raise InvalidInput("a replay needs a database for its sandbox (RUNWRIGHT_DATABASE_URL)")
        cipher = engine.deps.store.sealing.cipher if engine is not None else None
        trigger = recording.trigger if recording is not None else case.trigger  # type: ignore[union-attr]
        return _replay(
            recording,
            trigger,
            definition,
            mode=mode,
            tools=chosen,  # type: ignore[arg-type]
            model=model,
            approvals=approvals,
            url=url,
            cipher=cipher,
            observers=observers,
        )
    finally:
        if owned is not None:
            owned.close()


def _source(
    source: str | Recording | Case, engine: Engine | None
) -> tuple[Recording | None, Case | None]:
    if isinstance(source, Recording):
        return source, None
    if isinstance(source, Case):
        return source.recording, source
    if isinstance(source, str):
        assert engine is not None
        return Recording.of_run(engine, source), None
    raise InvalidInput(f"a replay takes a run id, a Recording or a Case, not {source!r}")


def _replay(
    recording: Recording | None,
    trigger: Any,
    definition: Agent,
    *,
    mode: Mode,
    tools: ToolsMode,
    model: str | None,
    approvals: Policy | Decide,
    url: str,
    cipher: Any,
    observers: Sequence[Observer],
) -> ReplayReport:
    began = time.monotonic()
    version = definition.current_version()
    ledger = Ledger(recording, tools)
    scripted = recorded_model(recording) if mode == "recorded" and recording else None

    def offered(ctx: RunContext) -> list[Tool]:
        return served_tools(definition.build_tools(ctx), ledger)

    copy = dataclasses.replace(
        definition,
        model=scripted.model if scripted is not None else model or definition.model,
        tools=offered,
        mcp=(),
        register=False,
        replace=False,
        notifier=None,
        on_error=None,
        concurrency=None,
        concurrency_key=None,
        max_running=None,
    )
    registry = Registry()
    registry.add(copy)
    settings = Settings(secret_key="replay:" + secrets.token_urlsafe(24))
    with (
        _forgotten(scripted),
        Sandbox(
            url, registry, settings=settings, cipher=cipher, observers=[CallIds(), *observers]
        ) as sandbox,
    ):
        run = sandbox.engine.start(
            copy.name,
            trigger.payload,
            source=trigger.source,
            trigger=trigger.trigger,
            keys=trigger.keys,
        )
        decisions: list[str] = []
        left = list(recording.decisions) if recording is not None else []
        stopped = None
        for _ in range(MAX_WAITS):
            run = sandbox.run_until_stopped(run.id)
            if run.status is not RunStatus.WAITING:
                break
            stopped = _decide(sandbox.engine, run, left, approvals, decisions)
            if stopped is not None:
                sandbox.engine.cancel(run.id, by="replay")
                run = sandbox.run_until_stopped(run.id)
                break
        else:
            stopped = f"the run still waited after {MAX_WAITS} decisions"
        played = Recording.of_run(sandbox.engine, run.id)
    original = Side.of(recording) if recording is not None else _empty()
    replayed = Side.of(played, ledger)
    return ReplayReport(
        agent=definition.name,
        mode=mode,
        tools=tools,
        run_id=recording.run_id if recording is not None else None,
        version=version.title,
        original=original,
        replay=replayed,
        divergence=divergence(original, replayed) if recording is not None else None,
        would_have_run=tuple(
            CallView(s.name, s.arguments, served="would_have_run") for s in ledger.would_have_run()
        ),
        ran=tuple(s.name for s in ledger.ran()),
        decisions=tuple(decisions),
        stopped=stopped,
        sandbox_run=run.id,
        wall_ms=(time.monotonic() - began) * 1000,
    )


@contextlib.contextmanager
def _forgotten(scripted: Any) -> Iterator[None]:
    """The recorded model is forgotten when its replay ends: an evaluation's
    worker replays thousands of runs, each with a model of its own."""
    try:
        yield
    finally:
        if scripted is not None:
            from runner.testing.scripted import unregister

            unregister(scripted)


def _empty() -> Side:
    return Side(None, None, None, (), 0, 0, None, 0.0)


def _decide(
    engine: Engine,
    run: Run,
    left: list[RecordedDecision],
    approvals: Policy | Decide,
    decisions: list[str],
) -> str | None:
    """Decide what the replay's run waits for; why the replay stops, or None."""
    pending = [a for a in engine.approvals(run.id) if a.decision is None and a.answer is None]
    if not pending:
        return f"the run waits ({run.waiting}) for something a replay does not decide"
    for approval in pending:
        question = approval.kind is RequestKind.INPUT
        recorded = _recorded(left, approval, "input" if question else "approval")
        try:
            if recorded is not None and question:
                engine.answer(approval.approval_id, recorded.answer, trusted=True, by="replay")
                decisions.append(f"{approval.tool_name}: the recorded answer")
                continue
            if recorded is not None and recorded.approved is not None:
                engine.decide(
                    approval.approval_id,
                    recorded.approved,
                    recorded.reason,
                    trusted=True,
                    by="replay",
                    arguments=recorded.edited if recorded.approved else None,
                    for_run=recorded.for_run,
                )
                said = "approved" if recorded.approved else "denied"
                decisions.append(f"{approval.tool_name}: the recorded decision ({said})")
                continue
        except InvalidApprovalInput as exc:
            decisions.append(f"{approval.tool_name}: the recorded decision no longer fits ({exc})")
        verdict: Any
        if callable(approvals):
            verdict = approvals(approval)
        elif approvals == "ask":
            verdict = None
        else:
            verdict = approvals == "approve"
        if verdict is None:
            return f"{approval.tool_name} waits for a decision the recording does not have"
        if question:
            engine.answer(approval.approval_id, verdict, trusted=True, by="replay")
            decisions.append(f"{approval.tool_name}: answered by the replay")
        else:
            engine.decide(
                approval.approval_id,
                bool(verdict),
                None if verdict else "denied by the replay's policy",
                trusted=True,
                by="replay",
            )
            said = "approved" if verdict else "denied"
            decisions.append(f"{approval.tool_name}: {said} by the replay's policy")
    return None


def _recorded(
    left: list[RecordedDecision], approval: Approval, kind: str
) -> RecordedDecision | None:
    wanted = canonical(approval.input)
    for n, recorded in enumerate(left):
        if (
            recorded.kind == kind
            and recorded.tool == approval.tool_name
            and canonical(recorded.arguments) == wanted
        ):
            return left.pop(n)
    return None
