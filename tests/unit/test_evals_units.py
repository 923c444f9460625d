"""The pure parts of replays and evaluations (docs/replay-and-evals.md):
recordings and cases as JSON, divergence, the scorers, the summary's paired
difference and its interval."""

from __future__ import annotations

from typing import Any

import pytest

from runner.evals.recording import (
    Case,
    RecordedCall,
    RecordedStep,
    Recording,
    Trigger,
    canonical,
    load_case,
)
from runner.evals.replay import CallView, ReplayReport, Side, StepView, divergence
from runner.evals.scorers import BUILT_IN, Score, as_score, load_scorers, within
from runner.evals.summary import render, summarize
from store.errors import InvalidInput


def _step(index: int, *calls: tuple[str, dict[str, Any]], text: str | None = None) -> StepView:
    return StepView(index, text, tuple(CallView(name, args) for name, args in calls))


def _side(*steps: StepView, status: str = "completed", output: Any = "done") -> Side:
    return Side(status, output, None, steps, 10, 5, 0.001, 3.0)


def _report(original: Side, replay: Side, **kwargs: Any) -> ReplayReport:
    fields: dict[str, Any] = {
        "agent": "a",
        "mode": "live",
        "tools": "live",
        "run_id": None,
        "version": "v",
        "original": original,
        "replay": replay,
        "divergence": divergence(original, replay),
        "would_have_run": (),
        "ran": (),
        "decisions": (),
        "stopped": None,
        "sandbox_run": "s",
        "wall_ms": 1.0,
    }
    return ReplayReport(**{**fields, **kwargs})


def test_a_recording_reads_back_from_its_json() -> None:
    recording = Recording(
        agent="a",
        trigger=Trigger({"x": 1}, "webhook", "orders", {"customer": "42"}),
        steps=(RecordedStep(1, {"role": "assistant", "content": "hi"}, "stop", 3, 4, 0.1, 2.0),),
        calls=(RecordedCall(1, "t", "c1", {"a": 1}, {"ok": True}, None, True),),
        run_id="r",
        status="completed",
        output="hi",
    )
    assert Recording.from_json(recording.to_json()) == recording
    case = Case(
        agent="a", trigger=recording.trigger, expected="hi", has_expected=True, recording=recording
    )
    assert Case.from_json(case.to_json()) == Case(
        agent="a",
        trigger=recording.trigger,
        expected="hi",
        has_expected=True,
        reference_run="r",
        recording=recording,
    )
    assert load_case({"agent": "a", "payload": {"x": 1}}).trigger.payload == {"x": 1}
    calls_only = Case.from_json({"agent": "a", "payload": 1, "expected": {"tool_calls": ["t"]}})
    assert calls_only.expected_calls == ("t",) and not calls_only.has_expected
    assert Case.from_json(calls_only.to_json()) == calls_only


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ([], "a case is a JSON object"),
        ({"payload": 1}, "names its agent"),
        ({"agent": "a"}, "has a trigger"),
        ({"agent": "a", "payload": 1, "expected": 3}, "expected is"),
        ({"agent": "a", "payload": 1, "expected": {}}, "expected is"),
        ({"agent": "a", "payload": 1, "expected": {"outcome": 1}}, "expected is"),
        ({"agent": "a", "payload": 1, "expected": {"tool_calls": "refund"}}, "list of tool names"),
        ({"agent": "a", "payload": 1, "expected": {"tool_calls": [""]}}, "list of tool names"),
        ({"agent": "a", "format": "other/1", "payload": 1}, "format is"),
        ({"agent": "a", "trigger": {"keys": {"k": 1}}}, "keys map names to text"),
        ({"agent": "a", "recording": {"format": "x"}}, "a recording is"),
    ],
)
def test_a_bad_case_is_one_clear_error(data: Any, said: str) -> None:
    with pytest.raises(InvalidInput, match=said):
        Case.from_json(data)


def test_arguments_match_whatever_their_key_order() -> None:
    assert canonical({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == canonical(
        {"a": [1, {"c": 3, "d": 2}], "b": 1}
    )


def test_divergence_names_the_first_step_that_differs_and_why() -> None:
    same = _side(_step(1, ("look", {"id": 1})), _step(2, text="ok"))
    assert divergence(same, same) is None
    other_args = _side(_step(1, ("look", {"id": 2})), _step(2, text="ok"))
    found = divergence(same, other_args)
    assert found is not None and found.step == 1 and "look" in found.reason
    failed = _side(
        StepView(1, None, (CallView("look", {"id": 1}, error="invalid arguments for look"),)),
        _step(2, text="ok"),
    )
    found = divergence(same, failed)
    assert found is not None and (found.step, found.reason) == (
        1,
        "look: invalid arguments for look",
    )
    shorter = _side(_step(1, ("look", {"id": 1})), status="failed")
    found = divergence(same, shorter)
    assert found is not None and found.step == 2 and "ended (failed)" in found.reason
    longer = _side(_step(1, ("look", {"id": 1})), _step(2, text="ok"), _step(3, text="more"))
    found = divergence(same, longer)
    assert found is not None and found.step == 3
    cancelled = _side(_step(1, ("look", {"id": 1})), _step(2, text="ok"), status="cancelled")
    found = divergence(same, cancelled)
    assert found is not None and "ended completed; the replay cancelled" in found.reason


def test_the_built_in_scorers() -> None:
    original = _side(_step(1, ("look", {"id": 1}), ("pay", {"n": 2})), _step(2, text="ok"))
    case = Case(
        agent="a",
        trigger=Trigger(),
        expected="done",
        has_expected=True,
        recording=Recording(agent="a", trigger=Trigger()),
    )
    replayed = _side(
        _step(1, ("look", {"id": 1})),
        _step(2, ("other", {}), ("pay", {"n": 9})),
        _step(3, text="ok"),
    )
    report = _report(original, replayed)
    assert BUILT_IN["output"](case, report) == Score(True, 1.0, None)
    assert BUILT_IN["tool_calls"](case, report).passed is True  # in order, others between
    missing = _report(original, _side(_step(1, ("pay", {"n": 2})), _step(2, ("look", {"id": 1}))))
    found = BUILT_IN["tool_calls"](case, missing)
    assert found.passed is False and found.score == 0.5 and "pay" in str(found.detail)
    held = _report(original, replayed, would_have_run=(CallView("pay", {"n": 9}),))
    assert BUILT_IN["no_would_have_run"](case, held) == Score(False, 0.0, "would have run: pay")
    stopped = _report(original, replayed, stopped="a wait")
    assert BUILT_IN["completed"](case, stopped).passed is False
    no_expected = Case(agent="a", trigger=Trigger())
    assert BUILT_IN["output"](no_expected, report) == Score(None)
    assert BUILT_IN["tool_calls"](no_expected, report) == Score(None)
    assert within(max_steps=2)(case, report).detail == "3 steps > 2"
    told = Case(agent="a", trigger=Trigger(), expected_calls=("pay", "look"))
    found = BUILT_IN["tool_calls"](told, report)  # the case's list, not the reference run's
    assert found.passed is False and found.detail == "not called (in order): look"
    assert within(max_cost_usd=0.0001)(case, report).passed is False


def test_a_scorer_that_raises_fails_its_case_and_says_why() -> None:
    (broken,) = load_scorers(["tests.unit.test_evals_units:_raises"])
    found = broken(Case(agent="a", trigger=Trigger()), _report(_side(), _side()))
    assert found.passed is False and "ZeroDivisionError" in str(found.detail)
    assert as_score(0.7) == Score(True, 0.7) and as_score(2) == Score(True, 1.0)
    assert as_score(False) == Score(False, 0.0) and as_score(None) == Score(None)
    with pytest.raises(InvalidInput):
        as_score(float("nan"))


def _raises(case: Any, report: Any) -> Any:
    return 1 / 0


def test_summaries_of_paired_verdicts() -> None:
    here = [{"s": {"passed": p}} for p in [True] * 30 + [False] * 10]
    there = [{"s": {"passed": True}} for _ in range(40)]
    (summary,) = summarize(here, there)
    assert summary.pass_rate == 0.75 and summary.baseline_pass_rate == 1.0
    assert summary.difference == pytest.approx(-0.25)
    assert summary.low is not None and summary.high is not None
    assert summary.low < -0.25 < summary.high < 0  # ten worse cases in forty: a real drop
    (alone,) = summarize([{"s": {"passed": True}}], [{"s": {"passed": False}}])
    assert alone.difference == 1.0 and alone.low is None  # one pair has no interval
    (skipped,) = summarize([{"s": {"passed": None}}, None])
    assert skipped.scored == 0 and skipped.pass_rate is None
    (same,) = summarize(there, there)
    assert (same.difference, same.low, same.high) == (0.0, 0.0, 0.0)
    assert "-25.0%" in render([summary]) and "30/40" in render([summary])
