"""Scorers: what an evaluation asks of each case's replay.

A scorer is a function of the case and the replay's report that returns a
:class:`Score`, a bool (passed or not) or a number in [0, 1]; ``None`` when
it does not apply to the case (a case with no expected output, say), so that
it is left out of the scorer's pass rate. :func:`scorer` names one; the
built-ins are:

- ``output``: the replay's output equals the case's expected output (JSON
  equal, so a structured output matches whatever its key order);
- ``tool_calls``: the tools the case expects (``"expected": {"tool_calls":
  [...]}``), else those its reference run called, were called, in that
  order (others may come between);
- ``no_would_have_run``: no effect call was held as "would have run";
- ``completed``: the replay's run completed;
- :func:`within` ``(max_cost_usd=..., max_steps=...)``: cost and step limits;
- :func:`judge` ``(rubric, model=...)``: a model grades the output by a rubric.

Scorers are named on the command line as built-in names or
``module:function`` (a function decorated with :func:`scorer`), so that
worker processes can load them.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from runner.core.errors import InvalidInput
from runner.evals.recording import canonical
from store.status import RunStatus

if TYPE_CHECKING:
    from runner.evals.recording import Case
    from runner.evals.replay import ReplayReport

# ``completed`` is named after the run status it checks.
DEFAULT_SCORERS = ("output", "tool_calls", "no_would_have_run", RunStatus.COMPLETED.value)


@dataclass(frozen=True)
class Score:
    """One scorer's verdict on one case. ``passed`` None: it did not apply."""

    passed: bool | None
    score: float | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "score": self.score, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Score:
        return cls(data.get("passed"), data.get("score"), data.get("detail"))


ScoreFn = Callable[["Case", "ReplayReport"], Any]


@dataclass(frozen=True)
class Scorer:
    """A named scorer (see the module docstring)."""

    name: str
    fn: ScoreFn

    def __call__(self, case: Case, report: ReplayReport) -> Score:
        try:
            found = self.fn(case, report)
        except Exception as exc:  # a scorer's bug fails its case, and says so
            return Score(False, 0.0, f"the scorer raised {type(exc).__name__}: {exc}")
        return as_score(found)


def as_score(found: Any) -> Score:
    if found is None or isinstance(found, Score):
        return found or Score(None)
    if isinstance(found, bool):
        return Score(found, 1.0 if found else 0.0)
    if isinstance(found, int | float) and math.isfinite(found):
        value = min(max(float(found), 0.0), 1.0)
        return Score(value >= 0.5, value)
    raise InvalidInput(f"a scorer returns a Score, a bool, a number or None, not {found!r}")


@overload
def scorer(fn: ScoreFn, *, name: str | None = None) -> Scorer: ...
@overload
def scorer(fn: None = None, *, name: str | None = None) -> Callable[[ScoreFn], Scorer]: ...
def scorer(fn: ScoreFn | None = None, *, name: str | None = None) -> Any:
    """Make ``fn(case, report)`` a :class:`Scorer` (by its name, or ``name``)."""

    def make(f: ScoreFn) -> Scorer:
        return Scorer(name or str(getattr(f, "__name__", "scorer")), f)

    return make(fn) if fn is not None else make


@scorer(name="output")
def _output(case: Case, report: ReplayReport) -> Score | None:
    if not case.has_expected:
        return None
    same = canonical(report.replay.output) == canonical(case.expected)
    return Score(same, 1.0 if same else 0.0, None if same else "the output differs")


@scorer(name="tool_calls")
def _tool_calls(case: Case, report: ReplayReport) -> Score | None:
    if case.expected_calls is not None:
        wanted = list(case.expected_calls)
    elif case.recording is not None:
        wanted = [c.name for c in report.original.calls]
    else:
        return None
    made = iter(c.name for c in report.replay.calls)
    missing = [name for name in wanted if not any(m == name for m in made)]
    if not wanted:
        return Score(True, 1.0)
    found = len(wanted) - len(missing)
    detail = None if not missing else "not called (in order): " + ", ".join(missing)
    return Score(not missing, found / len(wanted), detail)


@scorer(name="no_would_have_run")
def _no_would_have_run(case: Case, report: ReplayReport) -> Score:
    held = [c.name for c in report.would_have_run]
    return Score(
        not held, 0.0 if held else 1.0, ("would have run: " + ", ".join(held)) if held else None
    )


@scorer(name=RunStatus.COMPLETED.value)
def _completed(case: Case, report: ReplayReport) -> Score:
    done = report.replay.status == RunStatus.COMPLETED.value and report.stopped is None
    return Score(done, 1.0 if done else 0.0, None if done else f"ended {report.replay.status}")


def within(*, max_cost_usd: float | None = None, max_steps: int | None = None) -> Scorer:
    """Passes when the replay cost at most ``max_cost_usd`` and took at most
    ``max_steps`` model steps."""

    def check(case: Case, report: ReplayReport) -> Score:
        over = []
        cost = report.replay.cost_usd or 0.0
        if max_cost_usd is not None and cost > max_cost_usd:
            over.append(f"cost ${cost:.6f} > ${max_cost_usd:.6f}")
        steps = len(report.replay.steps)
        if max_steps is not None and steps > max_steps:
            over.append(f"{steps} steps > {max_steps}")
        return Score(not over, 0.0 if over else 1.0, "; ".join(over) or None)

    return Scorer("within", check)


JUDGE_INSTRUCTIONS = (
    "You grade an AI agent's answer against a rubric. Reply with one JSON object: "
    '{"passed": true or false, "score": a number from 0 to 1, "reason": "one sentence"}.'
)


def judge(rubric: str, *, model: str, name: str = "judge", **settings: Any) -> Scorer:
    """A model grades each replay's output by ``rubric`` (a litellm model
    string; ``settings`` go with the call, e.g. ``api_base``), through the
    model adapter as an agent's calls go."""

    def grade(case: Case, report: ReplayReport) -> Score:
        from runner.core.model import complete
        from runner.core.runtime import runtime

        asked = {
            "rubric": rubric,
            "task": case.trigger.payload,
            "expected": case.expected if case.has_expected else None,
            "answer": report.replay.output,
        }
        messages = [
            {"role": "system", "content": JUDGE_INSTRUCTIONS},
            {"role": "user", "content": json.dumps(asked, default=str)},
        ]
        # The model adapter's call (its retries of a provider's blips), on
        # the process's loop, where the runs' calls go.
        reply = runtime().run(complete(model, messages, [], settings))
        content = reply.message.get("content")
        text = content if isinstance(content, str) else ""
        try:
            verdict = json.loads(text[text.index("{") : text.rindex("}") + 1])
        except ValueError:
            return Score(False, 0.0, f"the judge's reply is not JSON: {text[:200]}")
        score = verdict.get("score")
        return Score(
            bool(verdict.get("passed")),
            float(score) if isinstance(score, int | float) else None,
            str(verdict.get("reason") or "") or None,
        )

    return Scorer(name, grade)


BUILT_IN: dict[str, Scorer] = {
    s.name: s for s in (_output, _tool_calls, _no_would_have_run, _completed)
}


def load_scorers(names: Sequence[str | Scorer]) -> list[Scorer]:
    """Scorers by name: a built-in's, or ``module:attribute`` naming a
    :class:`Scorer` (or a function, scored by its name)."""
    found: list[Scorer] = []
    for item in names:
        if isinstance(item, Scorer):
            found.append(item)
            continue
        if item in BUILT_IN:
            found.append(BUILT_IN[item])
            continue
        module, _, attribute = item.partition(":")
        if not attribute:
            known = ", ".join(BUILT_IN)
            raise InvalidInput(f"no scorer {item!r}: a built-in ({known}) or MODULE:NAME")
        try:
            loaded = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as exc:
            raise InvalidInput(f"cannot load the scorer {item!r}: {exc}") from None
        if isinstance(loaded, Scorer):
            found.append(loaded)
        elif callable(loaded):
            found.append(Scorer(attribute, loaded))
        else:
            raise InvalidInput(f"{item!r} is not a scorer")
    names_seen = [s.name for s in found]
    twice = {n for n in names_seen if names_seen.count(n) > 1}
    if twice:
        raise InvalidInput(f"two scorers are named {', '.join(sorted(twice))}")
    return found
