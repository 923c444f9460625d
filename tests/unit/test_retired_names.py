"""Each name the glossary retired (docs/concepts.md, "Glossary") still works for
one release, and warns: a DeprecationWarning naming the new name
(CHANGELOG.md, "Unreleased")."""

from __future__ import annotations

import asyncio
import importlib
import sys
import warnings
from datetime import UTC, datetime
from typing import Any

import pytest

from runner.core.engine.deps import Deps
from runner.core.engine.engine import Engine
from runner.core.events.feed import statuses
from runner.core.observe import Observer, Observers, TickReport
from runner.testing.kit import TestEngine
from runner.testing.scripted import ScriptedModel, text
from store.models import Ended, Run, RunStatus, TriggerEnvelope, Usage

RUN: Any = object()  # what an observer is handed; these hooks only pass it on


class _Engine(Engine):
    """An engine whose new methods record their calls (no store needed)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def decide(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("decide", args, kwargs))
        return "decided"

    async def execute_async(self, run_id: str) -> Any:
        self.calls.append(("execute_async", (run_id,), {}))
        return "executed"


def test_engine_respond_is_decide_and_warns() -> None:
    engine = _Engine()
    with pytest.warns(DeprecationWarning, match=r"Engine\.respond .*Engine\.decide"):
        done = engine.respond("a1", False, "no", trusted=True, by="ada", for_run=False)
    assert done == "decided"
    assert engine.calls == [
        ("decide", ("a1", False, "no"), {"trusted": True, "by": "ada", "for_run": False})
    ]


def test_engine_aexecute_is_execute_async_and_warns() -> None:
    engine = _Engine()
    with pytest.warns(DeprecationWarning, match=r"Engine\.aexecute .*Engine\.execute_async"):
        done = asyncio.run(engine.aexecute("r1"))
    assert done == "executed" and engine.calls == [("execute_async", ("r1",), {})]


def test_deps_after_settle_is_after_end_and_warns() -> None:
    seen: list[Ended] = []

    class _Deps(Deps):
        def after_end(self, ended: Ended) -> None:
            seen.append(ended)

    deps = object.__new__(_Deps)
    ended = Ended(run=RUN)
    with pytest.warns(DeprecationWarning, match=r"Deps\.after_settle .*Deps\.after_end"):
        deps.after_settle(ended)
    assert seen == [ended]


def test_an_observer_that_defines_settled_warns_and_still_hears_each_end() -> None:
    heard: list[tuple[Any, float]] = []
    with pytest.warns(DeprecationWarning, match=r"Old\.settled .*ended"):

        class Old(Observer):
            def settled(self, run: Any, seconds: float) -> None:
                heard.append((run, seconds))

    class New(Observer):
        def ended(self, run: Any, seconds: float) -> None:
            heard.append(("new", seconds))

    Observers([Old(), New()]).ended(RUN, 1.5)
    assert heard == [(RUN, 1.5), ("new", 1.5)]


def test_observers_settled_is_ended_and_warns() -> None:
    heard: list[float] = []

    class New(Observer):
        def ended(self, run: Any, seconds: float) -> None:
            heard.append(seconds)

    with pytest.warns(DeprecationWarning, match=r"Observers\.settled .*Observers\.ended"):
        Observers([New()]).settled(RUN, 2.0)
    assert heard == [2.0]


def test_tick_report_recovered_is_lapsed_and_warns() -> None:
    report = TickReport(lapsed=["r1"])
    with pytest.warns(DeprecationWarning, match=r"TickReport\.recovered .*TickReport\.lapsed"):
        assert report.recovered == ["r1"]
    with pytest.warns(DeprecationWarning, match=r"TickReport\.recovered"):
        report.recovered = ["r2"]
    assert report.lapsed == ["r2"]


def test_until_settled_is_until_ended_and_warns() -> None:
    with pytest.warns(DeprecationWarning, match=r'until="settled" .*until="ended"'):
        old = statuses("settled")
    assert old == statuses("ended")
    assert {s.value for s in old} == {"completed", "failed", "cancelled"}


def test_scripted_model_respond_is_reply_to_and_warns() -> None:
    model = ScriptedModel("retired-respond", [text("one"), text("two")])
    messages = [{"role": "user", "content": "hello"}]
    with pytest.warns(DeprecationWarning, match=r"ScriptedModel\.respond .*reply_to"):
        reply, step = asyncio.run(model.respond(messages, []))
    assert step == 1 and reply.content == "one"
    reply, step = asyncio.run(model.reply_to(messages, []))
    assert reply.content == "one" and step == 1  # the same request, the same reply


def test_the_rerun_module_is_retry_fork_and_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "runner.core.engine.rerun", raising=False)
    with pytest.warns(DeprecationWarning, match=r"runner\.engine\.rerun .*retry_fork"):
        old = importlib.import_module("runner.core.engine.rerun")
    new = importlib.import_module("runner.core.engine.retry_fork")
    assert old.retry is new.retry and old.fork is new.fork


def test_run_and_status_settled_are_ended_and_warn() -> None:
    for status in RunStatus:
        with pytest.warns(DeprecationWarning, match=r"RunStatus\.settled .*RunStatus\.ended"):
            assert status.settled is status.ended
    now = datetime.now(UTC)
    for status in (RunStatus.QUEUED, RunStatus.COMPLETED):
        moved = Run("r1", "a", status, TriggerEnvelope(), Usage(), now, now)
        with pytest.warns(DeprecationWarning, match=r"Run\.settled .*Run\.ended"):
            assert moved.settled is moved.ended is status.ended


class _Kit(TestEngine):
    """A test engine whose new methods record their calls (no database needed)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def run_until_ended(self, run_id: str) -> Any:
        self.calls.append(("run_until_ended", run_id))
        return "ended"

    def take_over(self, run_id: str) -> Any:
        self.calls.append(("take_over", run_id))
        return "taken over"

    def assert_taken_over(self, run_id: str) -> Any:
        self.calls.append(("assert_taken_over", run_id))
        return "checked"


@pytest.mark.parametrize(
    ("old", "new", "returned"),
    [
        ("run_until_settled", "run_until_ended", "ended"),
        ("recover", "take_over", "taken over"),
        ("assert_recovered", "assert_taken_over", "checked"),
    ],
)
def test_the_kit_s_old_names_call_the_new_ones_and_warn(old: str, new: str, returned: str) -> None:
    kit = _Kit()
    with pytest.warns(DeprecationWarning, match=rf"TestEngine\.{old} .*TestEngine\.{new}"):
        assert getattr(kit, old)("r1") == returned
    assert kit.calls == [(new, "r1")]


def test_a_core_module_s_old_path_warns_and_is_the_same_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """0.1's paths of the core's modules (``runner.engine.engine``) keep
    working for a release: the module at the new path itself, its own spec kept."""
    import runner.core.engine.engine as moved

    for old in ("runner.engine", "runner.engine.engine"):
        monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning) as caught:
        import runner.engine.engine as old
    assert [str(w.message).split(" is ")[0] for w in caught] == [
        "the module runner.engine",
        "the module runner.engine.engine",
    ]
    assert "use runner.core.engine.engine" in str(caught[1].message)
    assert caught[1].filename == __file__  # the importer's line, not the import system's
    assert old is moved and old.Engine is moved.Engine
    assert moved.__spec__ is not None and moved.__spec__.name == "runner.core.engine.engine"
    assert moved.__name__ == "runner.core.engine.engine"
    # A public path is a module of its own, with no warning: runner.errors stays.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from runner.errors import RunNotFound
    from runner.core.errors import RunNotFound as core_error

    assert RunNotFound is core_error


def test_a_path_that_never_existed_is_still_not_found() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # runner.engine's own
        with pytest.raises(ModuleNotFoundError, match=r"runner\.engine\.no_such_module"):
            importlib.import_module("runner.engine.no_such_module")
