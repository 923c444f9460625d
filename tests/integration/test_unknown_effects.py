"""Effects whose outcome is unknown (issue 26, items 1 and 2): a worker dies
after an effect ran and before its outcome was written. The run that goes on
is flagged until a person resolves the effect, with an ERROR line naming the
run and the tool; an effect with a ``reconcile`` callable resolves itself."""

from __future__ import annotations

import logging
import uuid

import pytest

from runner import Agent, effect
from runner.core.errors import InvalidInput
from runner.core.steps.tools import Reconciled, done, not_done
from runner.testing import ScriptedModel, TestEngine, call, text, tools
from store.errors import EffectNotFound, InvalidTransition
from store.models import EffectOutcome, EffectStatus, RunStatus


class Refunds:
    def __init__(self, reconcile: object = None) -> None:
        self.name = f"refunds-{uuid.uuid4().hex[:8]}"
        self.made: list[str] = []
        self.asked: list[str] = []

        def check(key: str) -> Reconciled | None:
            self.asked.append(key)
            answer = reconcile(key) if callable(reconcile) else reconcile
            return answer  # type: ignore[return-value]

        @effect(reconcile=check if reconcile is not None else None)
        def refund(order: str, idempotency_key: str) -> str:
            """Refund an order."""
            self.made.append(order)
            return f"refund r-{order}"

        self.model = ScriptedModel(
            self.name, [tools(call("refund", {"order": "A1"}, id="call_refund")), text("done")]
        )
        self.agent = Agent(name=self.name, model=self.model.model, tools=[refund])

    def told(self) -> str:
        return str(self.model.calls[-1].tool_results()[-1]["content"])


def crashed_mid_refund(rw: TestEngine, refunds: Refunds) -> str:
    run = rw.start(refunds.agent)
    rw.crash(run.id, at="after_effect_call")  # the refund ran; its outcome is not written
    assert refunds.made == ["A1"]
    rw.take_over(run.id)
    return run.id


def test_an_unknown_outcome_flags_the_run_until_a_person_resolves_it(
    runwright_engine: TestEngine, caplog: pytest.LogCaptureFixture
) -> None:
    refunds = Refunds()
    with caplog.at_level(logging.ERROR, logger="runner.core.steps.toolcalls"):
        run_id = crashed_mid_refund(runwright_engine, refunds)
    run = runwright_engine.get_run(run_id)
    assert run.status is RunStatus.COMPLETED and refunds.made == ["A1"]  # not run again
    assert run.needs_attention
    assert "outcome unknown" in refunds.told()
    (line,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert run_id in line.getMessage() and "refund" in line.getMessage()
    assert "needs a person" in line.getMessage()

    engine = runwright_engine.engine
    (unknown,) = engine.unknown_effects(run_id)
    assert unknown.status is EffectStatus.UNKNOWN and unknown.unresolved
    assert (unknown.tool, unknown.input, unknown.call_id) == (
        "refund",
        {"order": "A1"},
        "call_refund",
    )
    assert unknown.key == f"{run_id}:call_refund" and unknown.epoch == 1  # the epoch that died
    assert [r.id for r in engine.list_runs(needs_attention=True)] == [run_id]

    resolved = engine.resolve_effect(
        run_id, "call_refund", "done", note="seen in the PSP dashboard", by="ana"
    )
    assert (resolved.resolved_outcome, resolved.resolved_by) == (EffectOutcome.DONE, "ana")
    assert resolved.resolved_note == "seen in the PSP dashboard" and resolved.resolved_at
    assert not engine.get_run(run_id).needs_attention
    assert engine.list_runs(needs_attention=True) == []
    with pytest.raises(InvalidTransition, match="already resolved done by ana"):
        engine.resolve_effect(run_id, "call_refund", "not_done", by="bo")


def test_resolving_refuses_bad_input_and_changes_nothing(runwright_engine: TestEngine) -> None:
    refunds = Refunds()
    run_id = crashed_mid_refund(runwright_engine, refunds)
    engine = runwright_engine.engine
    with pytest.raises(InvalidInput, match="'done' or 'not_done', not 'maybe'"):
        engine.resolve_effect(run_id, "call_refund", "maybe")
    with pytest.raises(InvalidInput, match="the limit is 2000"):
        engine.resolve_effect(run_id, "call_refund", "done", note="x" * 2001)
    with pytest.raises(InvalidInput, match="the note contains a NUL"):
        engine.resolve_effect(run_id, "call_refund", "done", note="a\x00b")
    with pytest.raises(InvalidInput, match="lone surrogate"):
        engine.resolve_effect(run_id, "call_refund", "done", by="\udc80")
    with pytest.raises(InvalidInput, match="the tool call id contains a NUL"):
        engine.resolve_effect(run_id, "call\x00", "done")
    with pytest.raises(InvalidInput, match="the tool call id is 1001 characters"):
        engine.resolve_effect(run_id, "c" * 1001, "done")
    with pytest.raises(EffectNotFound, match="no effect for tool call 'call_nope'"):
        engine.resolve_effect(run_id, "call_nope", "done")
    assert engine.get_run(run_id).needs_attention
    assert engine.unknown_effects(run_id)[0].unresolved


def test_a_completed_effect_has_nothing_to_resolve(runwright_engine: TestEngine) -> None:
    refunds = Refunds()
    run = runwright_engine.run(refunds.agent)
    assert run.status is RunStatus.COMPLETED and not run.needs_attention
    with pytest.raises(InvalidTransition, match="is completed, not of unknown outcome"):
        runwright_engine.engine.resolve_effect(run.id, "call_refund", "done")


@pytest.mark.parametrize(
    ("answer", "told", "status"),
    [
        (done("refund r-A1 (found)"), "refund r-A1 (found)", EffectStatus.COMPLETED),
        (not_done(), "not done:", EffectStatus.FAILED),
    ],
)
def test_a_reconcile_callable_resolves_it_and_the_model_hears_the_truth(
    runwright_engine: TestEngine, answer: Reconciled, told: str, status: EffectStatus
) -> None:
    refunds = Refunds(reconcile=answer)
    run_id = crashed_mid_refund(runwright_engine, refunds)
    run = runwright_engine.get_run(run_id)
    assert run.status is RunStatus.COMPLETED and not run.needs_attention
    assert refunds.asked == [f"{run_id}:call_refund"]  # asked with the idempotency key
    assert told in refunds.told() and refunds.made == ["A1"]
    (journal,) = runwright_engine.effects(run_id)
    assert journal.status is status
    assert runwright_engine.engine.unknown_effects(run_id) == []


@pytest.mark.parametrize("answer", [None, "yes", RuntimeError("the PSP is down")])
def test_a_reconcile_that_cannot_tell_leaves_it_to_a_person(
    runwright_engine: TestEngine, answer: object
) -> None:
    def reconcile(key: str) -> object:
        if isinstance(answer, Exception):
            raise answer
        return answer

    refunds = Refunds(reconcile=reconcile)
    run_id = crashed_mid_refund(runwright_engine, refunds)
    assert runwright_engine.get_run(run_id).needs_attention
    assert "outcome unknown" in refunds.told()


def test_the_metrics_count_unknown_effects_and_gauge_the_unresolved(
    runwright_database_url: str,
) -> None:
    from prometheus_client import CollectorRegistry

    from runner.observe.metrics import Metrics, MetricsObserver, ScrapeTimeCollector

    registry = CollectorRegistry()
    metrics = MetricsObserver(Metrics(registry))
    with TestEngine(runwright_database_url, observers=[metrics]) as rw:
        store = rw.store
        registry.register(
            ScrapeTimeCollector(
                store.approval_backlog,
                lambda: None,
                unresolved=store.unresolved_effects,
                cache_seconds=0,
            )
        )
        refunds = Refunds()
        run_id = crashed_mid_refund(rw, refunds)
        labels = {"agent": refunds.name, "tool": "refund"}
        assert registry.get_sample_value("runwright_effects_unknown_total", labels) == 1
        assert registry.get_sample_value("runwright_effects_unknown_unresolved") == 1
        rw.engine.resolve_effect(run_id, "call_refund", "not_done", by="ana")
        assert registry.get_sample_value("runwright_effects_unknown_unresolved") == 0
        assert registry.get_sample_value("runwright_effects_unknown_total", labels) == 1
