"""Agent versions (docs/deploying.md): what a run does when it resumes on
another version of its agent, effects across versions, and moving the runs of
an old version. The deploy itself, with real workers: tests/e2e/test_deploys.py."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from runner import Agent, Engine, effect, tool
from runner.core import versions
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from runner.testing import Request, ScriptedModel, TestEngine, call, text, tools
from store.events import EventType
from store.models import EffectStatus, RunStatus
from store.postgres import PostgresStore
from store.workers import WorkerInfo


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Sent:
    """An enqueue callable that records each run sent and the queue it names."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str | None]] = []

    def __call__(self, run_id: str, *, queue: str | None = None) -> None:
        self.sent.append((run_id, queue))


@pytest.fixture
def sent() -> Sent:
    return Sent()


@pytest.fixture
def engine(
    pg_store: PostgresStore, leases: Leases, settings: Settings, sent: Sent
) -> Iterator[Engine]:
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=sent)
    yield made
    made.close()


class Effects:
    """What the tools did, in order."""

    def __init__(self) -> None:
        self.done: list[tuple[str, Any]] = []

    def refund(self) -> Any:
        @effect
        def refund(order: str, idempotency_key: str) -> dict[str, Any]:
            """Refund an order."""
            self.done.append(("refund", order))
            return {"refunded": order}

        return refund

    def lookup(self) -> Any:
        @tool
        def lookup(order: str) -> str:
            """Look an order up."""
            self.done.append(("lookup", order))
            return f"{order}: shipped"

        return lookup


def _script(request: Request) -> Any:
    if request.step == 1:
        return tools(call("refund", {"order": "A-1"}))
    return text("done: " + str(request.tool_results()[-1]["content"]))


# One scripted model per agent, the same in each of its versions.
_models: dict[str, ScriptedModel] = {}


def define(
    name: str,
    effects: Effects,
    *,
    policy: str = "continue",
    instructions: str = "Refund what is asked.",
    version: str | None = None,
    extra: list[Any] | None = None,
) -> ScriptedModel:
    """Version of the agent ``name``: a scripted model, the refund effect
    (approved by a person) and ``extra`` tools. Defining it again replaces it,
    as a deploy of changed code does."""
    model = _models.setdefault(name, ScriptedModel(name, _script))
    Agent(
        name=name,
        model=model.model,
        instructions=instructions,
        tools=[effects.refund(), *(extra or [])],
        approvals={"refund": True},
        on_new_version=policy,  # type: ignore[arg-type]
        version=version,
        replace=True,
    )
    return model


def waiting_run(engine: Engine, name: str) -> str:
    run = engine.start(name, {"order": "A-1"})
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    return run.id


def approve(engine: Engine, run_id: str) -> None:
    [approval] = [a for a in engine.approvals(run_id) if a.pending]
    engine.decide(approval.approval_id, True, "fine", trusted=True, by="alice")


def events(engine: Engine, run_id: str, kind: EventType) -> list[dict[str, Any]]:
    return [event.data for event in engine.store.events(run_id) if event.type is kind]


def test_a_runs_first_execution_records_the_version_it_started_on(engine: Engine) -> None:
    name, effects = unique("ver-first"), Effects()
    define(name, effects, version="2026-12-07")
    from runner.core.agent import registry

    expected = registry.get(name).current_version()
    assert expected.label == "2026-12-07" and len(expected.id) == versions.VERSION_CHARS
    run_id = waiting_run(engine, name)
    run = engine.get_run(run_id)
    assert run.version == expected.id and run.started_version == expected.id
    # The version is recorded, with what it is made of, for any process to read.
    record = engine.store.agent_version(name, expected.id)
    assert record is not None and record.label == "2026-12-07"
    assert set(record.definition["tools"]) == {"refund"}
    assert events(engine, run_id, EventType.VERSION) == []  # a first version is no move


def test_the_same_code_is_the_same_version_and_a_change_of_behaviour_another() -> None:
    name, effects = unique("ver-same"), Effects()
    define(name, effects, instructions="Be brief.")
    from runner.core.agent import registry

    first = registry.get(name).current_version()
    define(name, effects, instructions="Be brief.")
    assert registry.get(name).current_version().id == first.id
    define(name, effects, instructions="Be thorough.")
    changed = registry.get(name).current_version()
    assert changed.id != first.id
    assert versions.diff(first.definition, changed.definition) == ["instructions changed"]


def test_continue_resumes_on_the_new_version_and_records_what_changed(engine: Engine) -> None:
    name, effects = unique("ver-continue"), Effects()
    define(name, effects)
    run_id = waiting_run(engine, name)
    old = engine.get_run(run_id).version
    define(name, effects, instructions="Refund, then say so.", extra=[effects.lookup()])
    approve(engine, run_id)
    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert effects.done == [("refund", "A-1")]
    run = engine.get_run(run_id)
    assert run.started_version == old and run.version != old
    [moved] = events(engine, run_id, EventType.VERSION)
    assert moved["from"] == old and moved["to"] == run.version
    assert moved["changes"] == ["instructions changed", "tool lookup added"]


def test_fail_ends_the_run_version_changed_and_retry_runs_it_on_the_new_one(
    engine: Engine,
) -> None:
    name, effects = unique("ver-fail"), Effects()
    define(name, effects, policy="fail")
    run_id = waiting_run(engine, name)
    old = engine.get_run(run_id).version
    define(name, effects, policy="fail", instructions="Changed.")
    approve(engine, run_id)
    failed = engine.execute(run_id)
    assert failed is not None and failed.status is RunStatus.FAILED
    assert failed.error is not None and failed.error.code == "version_changed"
    assert "instructions changed" in failed.error.message
    assert f"runwright retry {run_id}" in failed.error.message
    assert effects.done == []  # the approved call did not run on a version it was not asked on

    engine.retry(run_id)
    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert effects.done == [("refund", "A-1")]
    run = engine.get_run(run_id)
    assert run.started_version == old and run.version != old


def test_pin_waits_for_a_worker_of_its_version_and_is_never_failed_for_it(
    engine: Engine, leases: Leases, sent: Sent, settings: Settings
) -> None:
    name, effects = unique("ver-pin"), Effects()
    define(name, effects, policy="pin")
    run_id = waiting_run(engine, name)
    old = engine.get_run(run_id).version
    assert old is not None
    define(name, effects, policy="pin", instructions="Changed.")
    approve(engine, run_id)
    sent.sent.clear()

    # No live worker runs the run's version: it waits, parked, and is not sent.
    parked = engine.execute(run_id)
    assert parked is not None and parked.status is RunStatus.QUEUED
    assert parked.parked_key == versions.waiting_key(name, old)
    assert parked.version == old and effects.done == []
    assert sent.sent == []
    assert engine.get_run(run_id).error is None

    # A worker of the run's version starts: the run goes to that version's queue.
    define(name, effects, policy="pin")
    assert engine.versions_loaded() == 1
    assert sent.sent == [(run_id, versions.queue_for(settings.queue, old))]
    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert effects.done == [("refund", "A-1")]

    # With a live worker of the version, a run resumed elsewhere is sent to it at once.
    second = waiting_run(engine, name)
    define(name, effects, policy="pin", instructions="Changed again.")
    approve(engine, second)
    info = WorkerInfo("old-worker", seen_at=time.time(), agent_versions={name: old})
    leases.mark_worker(info, 30)
    sent.sent.clear()
    bounced = engine.execute(second)
    assert bounced is not None and bounced.status is RunStatus.QUEUED
    assert sent.sent == [(second, versions.queue_for(settings.queue, old))]


def _paying(name: str, marker: str, ran: list[str], *, plain: bool = False) -> Agent:
    """Version ``marker`` of agent ``name``: its refund an effect run again
    after a crash (``at_least_once``), or (``plain``) no longer an effect."""

    def refund(order: str) -> dict[str, Any]:
        """Refund an order."""
        ran.append(marker)
        return {"refunded": order, "by": marker}

    made = tool(refund) if plain else effect(retry="at_least_once")(refund)
    model = ScriptedModel(
        unique("ver-effect-model"), [tools(call("refund", {"order": "A-1"})), text("done")]
    )
    return Agent(name=name, model=model.model, instructions=marker, tools=[made], replace=True)


def test_an_effect_started_under_another_version_is_unknown_never_run_again(
    runwright_engine: TestEngine,
) -> None:
    rw, name, ran = runwright_engine, unique("ver-effect"), []
    run = rw.start(_paying(name, "a", ran))
    rw.crash(run.id, at="after_effect_start")  # version a journaled it started, then died
    version_a = rw.get_run(run.id).version
    assert ran == []
    # Version b's tool would run it again after a crash (at_least_once): not
    # one that version a started.
    _paying(name, "b", ran)
    done = rw.take_over(run.id)
    assert done.status is RunStatus.COMPLETED and ran == []
    [unknown] = rw.engine.unknown_effects(run.id)
    assert unknown.status is EffectStatus.UNKNOWN and unknown.version == version_a
    assert rw.get_run(run.id).needs_attention


def test_an_effect_completed_under_another_version_is_served_from_the_journal(
    runwright_engine: TestEngine,
) -> None:
    rw, name, ran = runwright_engine, unique("ver-served"), []
    run = rw.start(_paying(name, "a", ran))
    rw.crash(run.id, at="after_effect_complete")  # done and journaled; the step not committed
    assert ran == ["a"]
    _paying(name, "b", ran, plain=True)  # version b made it a plain tool
    done = rw.take_over(run.id)
    assert done.status is RunStatus.COMPLETED and ran == ["a"]  # never run again
    result = rw.engine.checkpoint(run.id).messages  # type: ignore[union-attr]
    assert any('"by": "a"' in str(m.get("content")) for m in result if m.get("role") == "tool")


def test_upgrade_moves_waiting_runs_of_a_version_one_event_each_and_refuses_gone_calls(
    engine: Engine,
) -> None:
    name, effects = unique("ver-upgrade"), Effects()
    define(name, effects, policy="pin", version="a")
    first, second = waiting_run(engine, name), waiting_run(engine, name)
    old = engine.get_run(first).version
    assert old is not None
    # Version b renames nothing: both can move.
    define(name, effects, policy="pin", version="b", instructions="b")
    lines = {line.version: line for line in engine.versions(name)}
    assert lines[old].waiting == 2 and lines[old].record is not None
    report = engine.upgrade_runs(name, "a", by="ops")
    assert sorted(report.moved) == sorted([first, second]) and report.refused == []
    assert report.changes == ["label: a → b", "instructions changed"]
    for run_id in (first, second):
        [moved] = events(engine, run_id, EventType.VERSION)
        assert moved["from"] == old and moved["by"] == "ops"
    # A version without the tool the run waits on: refused, with the reason, left as it is.
    third = waiting_run(engine, name)
    on_b = engine.get_run(third).version
    Agent(
        name=name,
        model=ScriptedModel(unique("c"), _script).model,
        tools=[effects.lookup()],
        on_new_version="pin",
        version="c",
        replace=True,
    )
    from runner.core.agent import registry

    engine.deps.note_version(registry.get(name).current_version())
    report = engine.upgrade_runs(name, "b", "c")
    assert report.moved == []
    assert sorted(run_id for run_id, _ in report.refused) == sorted([first, second, third])
    assert all("waits on a call of refund" in why for _, why in report.refused)
    assert {engine.get_run(r).version for r in (first, second, third)} == {on_b}


def test_upgrade_refuses_a_version_that_is_not_recorded(engine: Engine) -> None:
    name, effects = unique("ver-unknown"), Effects()
    define(name, effects)
    waiting_run(engine, name)
    with pytest.raises(Exception, match="has no version 'nope'"):
        engine.upgrade_runs(name, "nope")
