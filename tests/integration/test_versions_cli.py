"""Agent versions on the command line (docs/operations.md, "Agent versions"):
``runwright versions``, ``runwright runs upgrade``, ``runwright runs
--version`` and what ``runwright show`` says of a run's versions, run in
this process against the test's own Postgres and Redis."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from runner import Agent, Engine, effect, tool
from runner.cli import main
from runner.core import versions
from runner.core.agent import registry
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import RunStatus
from store.postgres import PostgresStore
from store.workers import WorkerInfo

# What the command line's engine sends (RUNWRIGHT_ENQUEUE names this list's append).
sent_runs: list[str] = []


def send(run_id: str, **_: Any) -> None:
    sent_runs.append(run_id)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def engine(pg_store: PostgresStore, leases: Leases, settings: Settings) -> Iterator[Engine]:
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=lambda *a, **k: None)
    yield made
    made.close()


@pytest.fixture
def cli(database_url: str, redis_url: str) -> Iterator[Any]:
    """``runwright ARGS...`` on this test's services: its result."""
    env = {
        "RUNWRIGHT_DATABASE_URL": database_url,
        "RUNWRIGHT_REDIS_URL": redis_url,
        "RUNWRIGHT_ENQUEUE": f"{__name__}:send",
        "RUNWRIGHT_AGENTS": "",
        "RUNWRIGHT_SECRET_KEY": "test:test-secret-for-runwright-tests-only",
    }
    sent_runs.clear()

    def run(*args: str) -> Result:
        return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)

    yield run


def script(request: Request) -> Any:
    if request.step == 1:
        return tools(call("refund", {"order": "A-1"}))
    return text("done")


_models: dict[str, ScriptedModel] = {}


def define(
    name: str,
    *,
    label: str,
    policy: str = "pin",
    instructions: str = "Refund.",
    refunds: bool = True,
) -> str:
    """Version ``label`` of agent ``name`` (its refund asks a person first;
    without ``refunds``, the tool is gone); its id."""

    @effect
    def refund(order: str, idempotency_key: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return order

    model = _models.setdefault(name, ScriptedModel(name, script))
    Agent(
        name=name,
        model=model.model,
        instructions=instructions,
        tools=[refund] if refunds else [lookup],
        approvals={"refund": True} if refunds else {},
        on_new_version=policy,  # type: ignore[arg-type]
        version=label,
        replace=True,
    )
    return registry.get(name).current_version().id


def waiting_run(engine: Engine, name: str) -> str:
    run = engine.start(name, {"order": "A-1"})
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    return run.id


def pinned_run(engine: Engine, name: str, new_label: str) -> tuple[str, str]:
    """A run of ``name`` parked for a worker of the version it ran on, after
    a deploy of version ``new_label``: (its id, its version)."""
    run_id = waiting_run(engine, name)
    old = engine.get_run(run_id).version
    assert old is not None
    define(name, label=new_label, instructions=new_label)
    [asked] = [a for a in engine.approvals(run_id) if a.pending]
    engine.decide(asked.approval_id, True, "fine", trusted=True, by="alice")
    parked = engine.execute(run_id)
    assert parked is not None and parked.parked_key == versions.waiting_key(name, old)
    return run_id, old


def test_versions_lists_each_version_its_runs_and_the_workers_that_can_stop(
    engine: Engine, leases: Leases, cli: Any
) -> None:
    name = unique("vcli-list")
    old = define(name, label="a")
    first = waiting_run(engine, name)
    new = define(name, label="b", instructions="b")
    waiting_run(engine, name)
    leases.mark_worker(WorkerInfo("old@h", seen_at=time.time(), agent_versions={name: old}), 30)
    leases.mark_worker(WorkerInfo("new1@h", seen_at=time.time(), agent_versions={name: new}), 30)
    leases.mark_worker(WorkerInfo("new2@h", seen_at=time.time(), agent_versions={name: new}), 30)

    shown = cli("versions", "--agent", name, "--json")
    assert shown.exit_code == 0, shown.output
    found = {line["version"]: line for line in json.loads(shown.output)["versions"]}
    assert set(found) == {old, new}
    assert found[old]["title"] == f"a ({old})" and found[old]["label"] == "a"
    assert found[old]["waiting"] == 1 and found[old]["running"] == 0
    assert found[old]["workers"] == ["old@h"] and not found[old]["current"]
    assert found[new]["current"] and found[new]["workers"] == ["new1@h", "new2@h"]
    assert found[new]["policy"] == "pin"

    table = cli("versions", "--agent", name)
    assert table.exit_code == 0, table.output
    [old_row] = [row for row in table.output.splitlines() if old in row]
    # A pinned run waits for the old version's worker: it must not stop yet.
    assert "a (" in old_row and "old@h" in old_row and "keep: 1 pinned run(s)" in old_row
    [new_row] = [row for row in table.output.splitlines() if new in row]
    assert "current" in new_row and "serve new runs" in new_row

    # Once its run is moved, the old version's worker can stop.
    engine.upgrade_runs(name, "a", "b", by="ops")
    again = cli("versions", "--agent", name)
    [old_row] = [row for row in again.output.splitlines() if old in row]
    assert "can stop" in old_row, again.output
    assert engine.get_run(first).version == new

    none = cli("versions", "--agent", unique("nobody"))
    assert none.exit_code == 0 and "no version of agent" in none.output


def test_runs_upgrade_prints_the_runs_moved_and_refused_and_what_changed(
    engine: Engine, cli: Any
) -> None:
    name = unique("vcli-upgrade")
    define(name, label="a")
    first, second = waiting_run(engine, name), waiting_run(engine, name)
    b = define(name, label="b", instructions="b")
    engine.versions_loaded()  # a worker of version b starts, and records it

    moved = cli("runs", "upgrade", "--agent", name, "--from", "a", "--to", "b", "--by", "ops")
    assert moved.exit_code == 0, moved.output
    lines = moved.output.splitlines()
    assert lines[0].startswith(f"moved 2 run(s) of {name} from version ")
    assert f"to {b} as ops; refused 0" in lines[0]
    assert {f"  moved    {first}", f"  moved    {second}"} <= set(lines)
    assert "what changed" in lines and "  label: a → b" in lines
    assert "  instructions changed" in lines
    assert {engine.get_run(r).version for r in (first, second)} == {b}

    # A version without the tool the runs wait on: each refused with why, none moved.
    c = define(name, label="c", refunds=False)
    engine.versions_loaded()
    refused = cli("runs", "upgrade", "--agent", name, "--from", "b", "--json", "--by", "ops")
    assert refused.exit_code == 0, refused.output
    report = json.loads(refused.output)
    assert report["from"] == b and report["to"] == c and report["moved"] == []
    assert sorted(r["run_id"] for r in report["refused"]) == sorted([first, second])
    assert all("waits on a call of refund" in r["reason"] for r in report["refused"])
    assert {"tool refund removed", "tool lookup added"} <= set(report["changes"])
    assert {engine.get_run(r).version for r in (first, second)} == {b}

    # Bad input: one line, nothing moved.
    unknown = cli("runs", "upgrade", "--agent", name, "--from", "nope", "--by", "ops")
    assert unknown.exit_code == 1 and "has no version 'nope'" in unknown.stderr
    assert {engine.get_run(r).version for r in (first, second)} == {b}
    misplaced = cli("runs", "--status", "waiting", "upgrade", "--agent", name, "--from", "b")
    assert misplaced.exit_code == 1 and "give upgrade's after it" in misplaced.stderr


def test_runs_lists_as_before_and_filters_by_version(engine: Engine, cli: Any) -> None:
    name = unique("vcli-runs")
    a = define(name, label="a")
    on_a = waiting_run(engine, name)
    b = define(name, label="b", instructions="b")
    on_b = waiting_run(engine, name)

    # `runwright runs` with its options, as before it had a subcommand.
    listed = cli("runs", "--agent", name, "--status", "waiting", "--limit", "5", "--json")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)["runs"]
    assert [row["id"] for row in rows] == [on_b, on_a]
    assert [row["version"] for row in rows] == [b, a]
    table = cli("runs", "--agent", name)
    assert table.exit_code == 0 and on_a in table.output and a in table.output
    bare = cli("runs")
    assert bare.exit_code == 0 and on_b in bare.output

    for given, expected in (("a", [on_a]), ("b", [on_b]), (a[:6], [on_a]), (b, [on_b])):
        found = cli("runs", "--agent", name, "--version", given, "--json")
        assert found.exit_code == 0, found.output
        assert [row["id"] for row in json.loads(found.output)["runs"]] == expected, given
    none = cli("runs", "--version", "zzz", "--json")
    assert none.exit_code == 0 and json.loads(none.output)["runs"] == []
    bad = cli("runs", "--version", "a b;--")
    assert bad.exit_code == 1 and "is not a version's id" in bad.stderr
    # The group's own options are checked as a command's are: text only.
    not_text = cli("runs", "--agent", "fleet\udcff")
    assert not_text.exit_code == 1 and "--agent is not valid UTF-8 text" in not_text.stderr


def test_show_says_the_runs_versions_its_moves_and_why_it_waits(
    engine: Engine, leases: Leases, cli: Any
) -> None:
    name = unique("vcli-show")
    define(name, label="a")
    run_id, old = pinned_run(engine, name, "b")

    shown = cli("show", run_id)
    assert shown.exit_code == 0, shown.output
    assert f"version  a ({old})" in shown.output
    assert f"why      waiting for a worker of version {old} of '{name}'" in shown.output
    assert "none of the 0 live worker(s) runs it" in shown.output
    assert f"runwright runs upgrade --agent {name} --from {old}" in shown.output
    assert "versions (moves" not in shown.output  # it has not moved
    listed = cli("runs", "--agent", name)
    [row] = [line for line in listed.output.splitlines() if run_id in line]
    assert "queued (for a worker of its version)" in row and old in row

    leases.mark_worker(WorkerInfo("old@h", seen_at=time.time(), agent_versions={name: old}), 30)
    served = cli("show", run_id)
    assert "sent to its queue, which 1 live worker(s) of that version take" in served.output

    upgraded = cli("runs", "upgrade", "--agent", name, "--from", old, "--by", "ops")
    assert upgraded.exit_code == 0, upgraded.output
    assert sent_runs == [run_id]  # no longer parked for the old version's worker
    new = engine.get_run(run_id).version
    shown = cli("show", run_id)
    assert f"version  b ({new}), started on a ({old})" in shown.output
    lines = shown.output.splitlines()
    at = lines.index("versions (moves to another version)")
    assert lines[at + 1].endswith(f"a ({old}) -> b ({new}) by ops")
    assert lines[at + 2 : at + 4] == ["    label: a → b", "    instructions changed"]
    assert "waiting for a worker of version" not in shown.output

    document = json.loads(cli("show", run_id, "--json").output)
    assert document["run"]["version"] == new and document["run"]["started_version"] == old
    [move] = document["version_events"]
    assert move["from"] == old and move["to"] == new and move["by"] == "ops"
    assert move["changes"] == ["label: a → b", "instructions changed"]
    assert document["version_titles"] == {old: f"a ({old})", new: f"b ({new})"}


def test_watch_says_a_pinned_run_waits_for_its_version_and_prints_its_moves(
    engine: Engine, database_url: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli.follow import follow

    name = unique("vcli-watch")
    define(name, label="a")
    run_id, old = pinned_run(engine, name, "b")
    settings = Settings(database_url=database_url, redis_url=redis_url)
    assert follow(settings, run_id, 0.2, False) is RunStatus.QUEUED
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"-- queued (waiting for a worker of version {old})", lines

    engine.versions_loaded()
    engine.upgrade_runs(name, "a", by="ops")
    new = engine.get_run(run_id).version
    follow(settings, run_id, 0.2, False)
    lines = capsys.readouterr().out.splitlines()
    assert f"-- version {old} -> {new} by ops: label: a → b; instructions changed" in lines
