"""A run as the journal recorded it, in the shape a replay reads: its
trigger, each model step's reply, each tool call with its arguments and
result (and whether the tool was an effect), each person's decision, and its
totals. A :class:`Recording` is read from a run (:meth:`Recording.of_run`) or
from JSON (:meth:`Recording.from_json`: an exported case, docs/replay-and-evals.md),
and is JSON itself (:meth:`Recording.to_json`), so that a case file carries
everything a replay needs without the database it came from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.core.errors import InvalidInput
from store.models import RequestKind, StepKind
from store.status import RunStatus

if TYPE_CHECKING:
    from runner.core.engine.engine import Engine
    from runner.core.redaction import Redactor

# The version of the JSON shape of a recording and of a case.
FORMAT = "runwright.recording/1"
CASE_FORMAT = "runwright.case/1"


def canonical(value: Any) -> str:
    """``value`` as one JSON text that equal values share (keys sorted), to
    match a call's arguments with a recorded call's."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class RecordedCall:
    """One tool call: which tool, with what, and what it was told."""

    step: int
    name: str
    call_id: str | None
    arguments: Any
    output: Any = None
    error: Any = None
    effect: bool = False  # the tool was an effect (its call is in the effect journal)

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "name": self.name,
            "call_id": self.call_id,
            "arguments": self.arguments,
            "output": self.output,
            "error": self.error,
            "effect": self.effect,
        }


@dataclass(frozen=True)
class RecordedDecision:
    """A person's decision on a call (``kind`` "approval") or answer to the
    model's question (``kind`` "input")."""

    tool: str
    arguments: Any
    kind: str = "approval"
    approved: bool | None = None  # None: not decided (the run ended first)
    edited: dict[str, Any] | None = None  # the arguments approved in place of the model's
    for_run: bool = False
    reason: str | None = None
    answer: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "arguments": self.arguments,
            "kind": self.kind,
            "approved": self.approved,
            "edited": self.edited,
            "for_run": self.for_run,
            "reason": self.reason,
            "answer": self.answer,
        }


@dataclass(frozen=True)
class RecordedStep:
    """One model step: the assistant message it got back, and what it cost."""

    index: int
    message: dict[str, Any]
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    duration_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "message": self.message,
            "finish_reason": self.finish_reason,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "duration_ms": self.duration_ms,
        }


@dataclass(frozen=True)
class Trigger:
    """What started the run: a replay starts its own run with the same."""

    payload: Any = None
    source: str = "manual"
    trigger: str = "manual"
    keys: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "payload": self.payload,
            "source": self.source,
            "trigger": self.trigger,
            "keys": dict(self.keys),
        }

    @classmethod
    def from_json(cls, data: Any) -> Trigger:
        if not isinstance(data, Mapping):
            raise InvalidInput("a case's trigger is an object with a payload")
        keys = data.get("keys") or {}
        if not isinstance(keys, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in keys.items()
        ):
            raise InvalidInput("a trigger's keys map names to text")
        return cls(
            payload=data.get("payload"),
            source=str(data.get("source") or "manual"),
            trigger=str(data.get("trigger") or "manual"),
            keys=dict(keys),
        )


@dataclass(frozen=True)
class Recording:
    """A run as it happened (see the module docstring)."""

    agent: str
    trigger: Trigger
    steps: tuple[RecordedStep, ...] = ()
    calls: tuple[RecordedCall, ...] = ()
    decisions: tuple[RecordedDecision, ...] = ()
    run_id: str | None = None
    version: str | None = None
    status: str | None = None
    output: Any = None
    error: Any = None
    cost_usd: float | None = None
    duration_ms: float | None = None

    @property
    def input_tokens(self) -> int:
        return sum(s.input_tokens for s in self.steps)

    @property
    def output_tokens(self) -> int:
        return sum(s.output_tokens for s in self.steps)

    def calls_of(self, step: int) -> list[RecordedCall]:
        return [c for c in self.calls if c.step == step]

    # ----------------------------------------------------------- reading

    @classmethod
    def of_run(cls, engine: Engine, run_id: str) -> Recording:
        """The recording of run ``run_id`` in ``engine``'s journal."""
        run = engine.get_run(run_id)
        if run.erased_at is not None:
            raise InvalidInput(
                f"run {run_id} was erased ({run.erased_at:%Y-%m-%d}): its payloads are gone, "
                "so there is nothing to replay or export"
            )
        effects = {e.key.rpartition(":")[2] for e in engine.effects(run_id)}
        steps: list[RecordedStep] = []
        calls: list[RecordedCall] = []
        for step in engine.steps(run_id):
            if step.kind is StepKind.LLM and isinstance(step.output, Mapping):
                message = step.output.get("message")
                if not isinstance(message, Mapping):
                    continue
                duration = None
                if step.finished_at is not None:
                    duration = (step.finished_at - step.started_at).total_seconds() * 1000
                usage = step.usage
                steps.append(
                    RecordedStep(
                        index=step.index,
                        message=dict(message),
                        finish_reason=step.output.get("finish_reason"),
                        input_tokens=usage.input_tokens if usage else 0,
                        output_tokens=usage.output_tokens if usage else 0,
                        cost_usd=step.cost_usd,
                        duration_ms=duration,
                    )
                )
            elif step.kind is StepKind.TOOL and step.name:
                calls.append(
                    RecordedCall(
                        step=step.index,
                        name=step.name,
                        call_id=step.tool_call_id,
                        arguments=step.input,
                        output=step.output,
                        error=step.error,
                        effect=step.tool_call_id in effects,
                    )
                )
        decisions = [
            RecordedDecision(
                tool=a.tool_name,
                arguments=a.input,
                kind="input" if a.kind is RequestKind.INPUT else "approval",
                approved=None if a.decision is None else a.decision.value == "approved",
                edited=a.arguments,
                for_run=a.for_run,
                reason=a.reason,
                answer=a.answer,
            )
            for a in engine.approvals(run_id)
        ]
        duration = None
        if run.started_at is not None and run.finished_at is not None:
            duration = (run.finished_at - run.started_at).total_seconds() * 1000
        envelope = run.trigger
        return cls(
            agent=run.agent,
            trigger=Trigger(
                envelope.payload, envelope.source, envelope.trigger, dict(envelope.keys)
            ),
            steps=tuple(steps),
            calls=tuple(calls),
            decisions=tuple(decisions),
            run_id=run.id,
            version=run.version,
            status=run.status.value,
            output=run.output,
            error=run.error,
            cost_usd=run.cost_usd,
            duration_ms=duration,
        )

    # -------------------------------------------------------------- JSON

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "agent": self.agent,
            "run_id": self.run_id,
            "version": self.version,
            "status": self.status,
            "trigger": self.trigger.to_json(),
            "steps": [s.to_json() for s in self.steps],
            "calls": [c.to_json() for c in self.calls],
            "decisions": [d.to_json() for d in self.decisions],
            "output": self.output,
            "error": self.error,
            "cost_usd": self.cost_usd,
            "duration_ms": self.duration_ms,
        }

    @classmethod
    def from_json(cls, data: Any) -> Recording:
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise InvalidInput(f"a recording is a JSON object of format {FORMAT!r}")
        try:
            return cls(
                agent=str(data["agent"]),
                trigger=Trigger.from_json(data.get("trigger") or {}),
                steps=tuple(RecordedStep(**s) for s in data.get("steps") or ()),
                calls=tuple(RecordedCall(**c) for c in data.get("calls") or ()),
                decisions=tuple(RecordedDecision(**d) for d in data.get("decisions") or ()),
                run_id=data.get("run_id"),
                version=data.get("version"),
                status=data.get("status"),
                output=data.get("output"),
                error=data.get("error"),
                cost_usd=data.get("cost_usd"),
                duration_ms=data.get("duration_ms"),
            )
        except (KeyError, TypeError) as exc:
            raise InvalidInput(f"the recording is not whole: {exc}") from None

    def redacted(self, redactor: Redactor) -> Recording:
        """This recording with ``redactor`` applied to every value people wrote
        or the run saw (for an export that leaves the journal)."""
        if not redactor:
            return self
        return Recording.from_json(
            {**redactor.redact(self.to_json()), "format": FORMAT, "agent": self.agent}
        )


@dataclass(frozen=True)
class Case:
    """One case of a dataset: a trigger for an agent, with what is expected
    of it (its structured output or final text), a reference run, and the
    reference run's recording (which serves its effects and decisions in a
    replay)."""

    agent: str
    trigger: Trigger
    expected: Any = None
    has_expected: bool = False
    # The tools the agent is expected to call, in order (others may come
    # between); None: those its reference run called, if it has one.
    expected_calls: tuple[str, ...] | None = None
    reference_run: str | None = None
    recording: Recording | None = None
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": CASE_FORMAT,
            "agent": self.agent,
            "trigger": self.trigger.to_json(),
        }
        if self.name is not None:
            data["name"] = self.name
        expected: dict[str, Any] = {}
        if self.has_expected:
            expected["output"] = self.expected
        if self.expected_calls is not None:
            expected["tool_calls"] = list(self.expected_calls)
        if expected:
            data["expected"] = expected
        if self.reference_run is not None:
            data["reference_run"] = self.reference_run
        if self.recording is not None:
            data["recording"] = self.recording.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any) -> Case:
        """A case from its JSON: the format above, or a bare ``{"agent",
        "payload"}`` line of a JSON-lines file."""
        if not isinstance(data, Mapping):
            raise InvalidInput("a case is a JSON object")
        if data.get("format") not in (None, CASE_FORMAT):
            raise InvalidInput(f"a case's format is {CASE_FORMAT!r}, not {data.get('format')!r}")
        recording = None
        if data.get("recording") is not None:
            recording = Recording.from_json(data["recording"])
        agent = data.get("agent") or (recording.agent if recording else None)
        if not isinstance(agent, str) or not agent:
            raise InvalidInput("a case names its agent")
        if "trigger" in data:
            trigger = Trigger.from_json(data["trigger"])
        elif "payload" in data:
            trigger = Trigger(payload=data["payload"])
        elif recording is not None:
            trigger = recording.trigger
        else:
            raise InvalidInput("a case has a trigger (or a payload)")
        expected = data.get("expected")
        if expected is not None and not (
            isinstance(expected, Mapping) and expected and set(expected) <= {"output", "tool_calls"}
        ):
            raise InvalidInput(
                'a case\'s expected is {"output": ...} and/or {"tool_calls": [tool names]}'
            )
        calls = None if expected is None else expected.get("tool_calls")
        if calls is not None and not (
            isinstance(calls, list) and all(isinstance(c, str) and c for c in calls)
        ):
            raise InvalidInput("a case's expected tool_calls is a list of tool names")
        name = data.get("name")
        return cls(
            agent=agent,
            trigger=trigger,
            expected=None if expected is None else expected.get("output"),
            has_expected=expected is not None and "output" in expected,
            expected_calls=None if calls is None else tuple(calls),
            reference_run=data.get("reference_run") or (recording.run_id if recording else None),
            recording=recording,
            name=None if name is None else str(name),
        )

    @classmethod
    def of_run(
        cls, engine: Engine, run_id: str, *, redactor: Redactor | None = None, expect: bool = True
    ) -> Case:
        """Run ``run_id`` as a case: its trigger, its recording, and (with
        ``expect``, for a completed run) its output as what is expected."""
        recording = Recording.of_run(engine, run_id)
        if redactor is not None:
            recording = recording.redacted(redactor)
        completed = recording.status == RunStatus.COMPLETED.value
        return cls(
            agent=recording.agent,
            trigger=recording.trigger,
            expected=recording.output if expect and completed else None,
            has_expected=expect and completed,
            reference_run=run_id,
            recording=recording,
        )


def load_case(source: Any) -> Case:
    """A case from a :class:`Case`, its JSON (a dict), or the path of a case file."""
    if isinstance(source, Case):
        return source
    if isinstance(source, Mapping):
        return Case.from_json(source)
    if isinstance(source, str | PathLike):
        path = Path(source)
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise InvalidInput(f"cannot read the case file {str(path)!r}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"the case file {str(path)!r} is not JSON: {exc}") from None
        return Case.from_json(data)
    raise InvalidInput(f"a case is a Case, its JSON or a file's path, not {source!r}")


def load_recording(source: Any) -> Recording:
    """A recording from a :class:`Recording`, or from a case (see
    :func:`load_case`) that has one."""
    if isinstance(source, Recording):
        return source
    if isinstance(source, Mapping) and source.get("format") == FORMAT:
        return Recording.from_json(source)
    case = load_case(source)
    if case.recording is None:
        raise InvalidInput("the case has no recording of a run to take a script from")
    return case.recording
