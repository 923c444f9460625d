"""Replays of recorded runs (issue 55; docs/replay-and-evals.md).

A run with a read-only tool and two effects, one approved by a person, is
recorded at an OpenAI-compatible server on loopback. Replayed live with
changed instructions, at a server that now asks for a third effect, its two
journaled effects return their recorded results, the third is listed as one
that would have run, no effect executes (the tools count their calls), and
the recorded run is the same row for row. Replayed from the recording after a
tool gained a required parameter, 50 runs report the divergence at the step
that called it, and the rest pass.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from runner import Agent, ApprovalPolicy, effect, tool
from runner.evals.recording import Case, Recording
from runner.evals.replay import replay
from runner.evals.serving import PLACEHOLDER
from runner.testing import ScriptedModel, TestEngine, call, scripted, text, tools
from store.errors import InvalidInput, RunNotFound
from store.models import RunStatus
from tests.helpers import unique
from tests.provider import Provider, answer, tool_calls

pytestmark = pytest.mark.runwright_allow_model_requests

CALLED: Counter[str] = Counter()


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order."""
    CALLED["lookup_order"] += 1
    return {"order_id": order_id, "total": 30, "email": "ann@example.com"}


@effect
def refund(order_id: str, amount: int) -> dict[str, Any]:
    """Refund an order."""
    CALLED["refund"] += 1
    return {"refund_id": f"rf-{order_id}", "amount": amount}


@effect
def notify(to: str, body: str) -> str:
    """Send an e-mail."""
    CALLED["notify"] += 1
    return f"message-id-{to}"


@effect
def store_credit(order_id: str, amount: int) -> dict[str, Any]:
    """Give store credit."""
    CALLED["store_credit"] += 1
    return {"credit": amount}


V2 = "Refund, notify, and add a goodwill credit."


def script(step: int, body: dict[str, Any]) -> dict[str, Any]:
    """Version 1 looks the order up, refunds and notifies; version 2 (its
    instructions say so) also gives store credit."""
    messages = body["messages"]
    asked = [m for m in messages if m["role"] == "assistant"]
    v2 = V2 in messages[0]["content"]
    if len(asked) == 0:
        return tool_calls(("c-lookup", "lookup_order", {"order_id": "A-7"}))
    if len(asked) == 1:
        calls = [
            ("c-refund", "refund", {"order_id": "A-7", "amount": 30}),
            ("c-notify", "notify", {"to": "ann@example.com", "body": "Refunded"}),
        ]
        if v2:
            calls.append(("c-credit", "store_credit", {"order_id": "A-7", "amount": 5}))
        return tool_calls(*calls)
    return answer("Refunded A-7" + (" with credit" if v2 else ""))


@pytest.fixture
def provider() -> Iterator[Provider]:
    with Provider(script) as server:
        yield server


def _agent(server: Provider, name: str, instructions: str, register: bool = True) -> Agent:
    return Agent(
        name=name,
        model=f"openai/{name}",
        model_settings={"api_base": server.base_url, "api_key": "sk-loopback"},
        instructions=instructions,
        tools=[lookup_order, refund, notify, store_credit],
        approvals={"refund": ApprovalPolicy()},
        register=register,
    )


def _journal(kit: TestEngine, run_id: str) -> str:
    """Everything the journal holds of a run, as one text to compare."""
    engine = kit.engine
    parts = {
        "run": engine.get_run(run_id),
        "steps": engine.steps(run_id),
        "effects": engine.effects(run_id),
        "approvals": engine.approvals(run_id),
        "checkpoint": engine.checkpoint(run_id),
    }
    return json.dumps({k: repr(v) for k, v in parts.items()})


def _recorded_run(kit: TestEngine, name: str) -> str:
    run = kit.run(name, {"order": "A-7"})
    assert run.status is RunStatus.WAITING
    run = kit.approve(run.id, "refund", by="ann")
    assert run.status is RunStatus.COMPLETED, run.error
    return run.id


@pytest.fixture
def recorded(runwright_engine: TestEngine, provider: Provider) -> tuple[str, str]:
    """A run of version 1, recorded: its agent's name and its id."""
    name = unique("refunds")
    _agent(provider, name, "Refund and notify.")
    return name, _recorded_run(runwright_engine, name)


def test_a_live_replay_serves_the_journaled_effects_and_holds_a_new_one(
    runwright_engine: TestEngine, provider: Provider, recorded: tuple[str, str]
) -> None:
    name, run_id = recorded
    assert CALLED["refund"] == CALLED["notify"] == 1
    before = _journal(runwright_engine, run_id)
    runs_before = len(runwright_engine.engine.list_runs(limit=100))
    CALLED.clear()
    recorded_requests = len(provider.answered())

    changed = _agent(provider, name, V2, register=False)
    report = replay(run_id, agent=changed, mode="live", engine=runwright_engine.engine)

    # Nothing executed but the read-only tool; the model was called for real.
    assert Counter({"lookup_order": 1}) == CALLED, CALLED
    assert len(provider.answered()) == recorded_requests + 3
    served = {c.name: c for c in report.replay.calls}
    assert served["refund"].served == served["notify"].served == "recorded"
    assert served["refund"].result == {"refund_id": "rf-A-7", "amount": 30}
    assert served["notify"].result == "message-id-ann@example.com"
    assert served["lookup_order"].served == "ran"
    assert [(c.name, c.arguments) for c in report.would_have_run] == [
        ("store_credit", {"order_id": "A-7", "amount": 5})
    ]
    assert served["store_credit"].result[PLACEHOLDER] == "would_have_run"
    # The model was told the recorded results, and the placeholder.
    last = provider.answered()[-1].body["messages"]
    told = {m["tool_call_id"]: m["content"] for m in last if m["role"] == "tool"}
    assert "rf-A-7" in told["c-refund"] and "would_have_run" in told["c-credit"]
    assert report.decisions == ("refund: the recorded decision (approved)",)
    assert (
        report.replay.status == "completed" and report.replay.output == "Refunded A-7 with credit"
    )
    assert report.divergence is not None and report.divergence.step == 2
    assert "store_credit" in report.divergence.reason
    # The recorded run is the same, and no run was added beside it.
    assert _journal(runwright_engine, run_id) == before
    assert len(runwright_engine.engine.list_runs(limit=100)) == runs_before
    rendered = report.render()
    assert "would have run: store_credit" in rendered and "diverged at step 2" in rendered


def test_recorded_tools_are_not_run_again(
    runwright_engine: TestEngine, recorded: tuple[str, str]
) -> None:
    _, run_id = recorded
    CALLED.clear()
    report = replay(run_id, mode="live", tools="recorded", engine=runwright_engine.engine)
    assert Counter() == CALLED
    assert report.ran == ()
    assert [c.served for c in report.replay.calls] == ["recorded"] * 3
    assert report.divergence is None and report.passed, report.render()


def test_a_recorded_replay_of_an_unchanged_agent_passes(
    runwright_engine: TestEngine, provider: Provider, recorded: tuple[str, str]
) -> None:
    _, run_id = recorded
    requests = len(provider.answered())
    CALLED.clear()
    models = len(scripted._scripts)
    report = replay(run_id, engine=runwright_engine.engine)
    assert report.passed, report.render()
    assert len(scripted._scripts) == models  # the replay's recorded model is forgotten
    assert len(provider.answered()) == requests  # the model replied from the journal
    assert Counter() == CALLED
    assert report.replay.tokens == report.original.tokens


def test_calls_without_a_recorded_decision_follow_the_policy(
    runwright_engine: TestEngine, provider: Provider, recorded: tuple[str, str]
) -> None:
    name, run_id = recorded
    strict = Agent(
        name=name,
        model=f"openai/{name}",
        model_settings={"api_base": provider.base_url, "api_key": "sk-loopback"},
        instructions="Refund and notify.",
        tools=[lookup_order, refund, notify, store_credit],
        approvals={"refund": ApprovalPolicy(), "notify": ApprovalPolicy()},
        register=False,
    )
    denied = replay(run_id, agent=strict, approvals="deny", engine=runwright_engine.engine)
    assert "notify: denied by the replay's policy" in denied.decisions
    assert "refund: the recorded decision (approved)" in denied.decisions
    asked = replay(run_id, agent=strict, approvals="ask", engine=runwright_engine.engine)
    assert asked.stopped == "notify waits for a decision the recording does not have"
    assert asked.replay.status == "cancelled" and not asked.passed
    seen: list[str] = []
    by_hand = replay(
        run_id,
        agent=strict,
        approvals=lambda a: seen.append(a.tool_name) or True,
        engine=runwright_engine.engine,
    )
    assert seen == ["notify"] and by_hand.passed, by_hand.render()


def test_hostile_input_is_one_clear_error_and_changes_nothing(
    runwright_engine: TestEngine, provider: Provider, recorded: tuple[str, str]
) -> None:
    name, run_id = recorded
    before = _journal(runwright_engine, run_id)
    engine = runwright_engine.engine
    with pytest.raises(RunNotFound):
        replay("0190c0de-0000-7000-8000-000000000000", engine=engine)
    with pytest.raises(InvalidInput, match="mode is one of"):
        replay(run_id, mode="sideways", engine=engine)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="tools are one of"):
        replay(run_id, tools="all", engine=engine)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="approvals are one of"):
        replay(run_id, approvals="maybe", engine=engine)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="live replay"):
        replay(run_id, model="openai/other", engine=engine)
    with pytest.raises(InvalidInput, match="not an Agent"):
        replay(run_id, agent="tests.integration.test_replay:script", engine=engine)
    case = Case(agent=name, trigger=Recording.of_run(engine, run_id).trigger)
    with pytest.raises(InvalidInput, match="needs a recording"):
        replay(case, engine=engine)
    assert _journal(runwright_engine, run_id) == before
    other = _recorded_run(runwright_engine, name)
    engine.erase([other], by="dpo")
    with pytest.raises(InvalidInput, match="was erased"):
        replay(other, engine=engine)


# ------------------------------------------- 50 runs after a tool changed


@tool
def check_stock(sku: str) -> int:
    """How many are in stock."""
    return 3


@effect
def reserve(sku: str, quantity: int) -> str:
    """Reserve stock."""
    return f"held {quantity} of {sku}"


def _plan(n: int) -> list[Any]:
    """Run n's replies: every third run reserves at step 2, every fifth at
    step 1, the rest only check the stock."""
    if n % 3 == 0:
        return [
            tools(call("check_stock", {"sku": f"s{n}"})),
            tools(call("reserve", {"sku": f"s{n}", "quantity": 1})),
            text("reserved"),
        ]
    if n % 5 == 0:
        return [tools(call("reserve", {"sku": f"s{n}", "quantity": 2})), text("reserved")]
    return [tools(call("check_stock", {"sku": f"s{n}"})), text("in stock")]


def test_recorded_replays_of_50_runs_find_each_run_a_changed_tool_breaks(
    runwright_engine: TestEngine,
) -> None:
    expected: dict[str, int | None] = {}
    for n in range(50):
        name = unique("stock")
        model = ScriptedModel(name, _plan(n))
        Agent(name=name, model=model.model, tools=[check_stock, reserve])
        run = runwright_engine.run(name, {"n": n})
        assert run.status is RunStatus.COMPLETED, run.error
        expected[run.id] = 2 if n % 3 == 0 else 1 if n % 5 == 0 else None

    found: dict[str, int | None] = {}
    for run_id in expected:
        run = runwright_engine.get_run(run_id)
        changed = Agent(
            name=run.agent,
            model="openai/unused",
            tools=[check_stock, _reserve_in],  # reserve, with a required warehouse
            register=False,
        )
        report = replay(run_id, agent=changed, engine=runwright_engine.engine)
        found[run_id] = None if report.divergence is None else report.divergence.step
        if report.divergence is not None:
            assert "reserve" in report.divergence.reason
            assert (
                "warehouse" in report.divergence.reason
                and "Field required" in report.divergence.reason
            )
        else:
            assert report.passed, report.render()
    assert found == expected
    # 17 runs reserve at step 2 (n % 3 == 0), 6 more at step 1 (n % 5 == 0).
    assert sum(1 for step in found.values() if step is not None) == 17 + 6


def test_the_command_prints_the_report_and_exits_3_on_a_divergence(
    runwright_engine: TestEngine, monkeypatch: pytest.MonkeyPatch, runwright_database_url: str
) -> None:
    from runner.cli.commands import main
    from runner.cli.replay import DIVERGED

    name = unique("stock")
    model = ScriptedModel(name, _plan(3))
    Agent(name=name, model=model.model, tools=[check_stock, reserve])
    run = runwright_engine.run(name, {"n": 3})
    monkeypatch.setenv("RUNWRIGHT_DATABASE_URL", runwright_database_url)
    # A replay connects to no Redis; the settings ask for the pair.
    monkeypatch.setenv("RUNWRIGHT_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("RUNWRIGHT_SECRET_KEY", "replay-test-secret-replay-test-secret-0123")
    runner = CliRunner()
    passed = runner.invoke(main, ["replay", run.id])
    assert passed.exit_code == 0, passed.output
    assert "no divergence" in passed.output and "reserve" in passed.output
    as_json = runner.invoke(main, ["replay", run.id, "--json"])
    assert json.loads(as_json.output)["passed"] is True
    diverged = runner.invoke(
        main, ["replay", run.id, "--agent", "tests.integration.test_replay:CHANGED_STOCK"]
    )
    assert diverged.exit_code == DIVERGED, diverged.output
    assert "diverged at step 2" in diverged.output
    entries = runwright_engine.engine.audit_log(run.id)
    assert [e.detail.get("via") for e in entries if e.action == "viewed_payloads"] == ["replay"] * 3
    unknown = runner.invoke(main, ["replay", "0190c0de-0000-7000-8000-000000000000"])
    assert unknown.exit_code == 1 and unknown.output.count("\n") == 1, unknown.output
    # The three replays' runs are the sandbox's; pruning them leaves the real run.
    pruned = runner.invoke(main, ["sandbox", "prune"])
    assert pruned.exit_code == 0 and pruned.output.strip() == "deleted 3 replay runs", pruned.output
    assert runner.invoke(main, ["sandbox", "prune"]).output.strip() == "deleted 0 replay runs"
    assert runwright_engine.get_run(run.id).status is RunStatus.COMPLETED


@effect(name="reserve")
def _reserve_in(sku: str, quantity: int, warehouse: str) -> str:
    """Reserve stock in a warehouse."""
    return "held"


CHANGED_STOCK = Agent(
    name="stock-changed", model="openai/unused", tools=[check_stock, _reserve_in], register=False
)
