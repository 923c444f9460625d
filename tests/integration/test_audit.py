"""The audit log (docs/security.md, "The audit log"): each action of a person
on a run appends one entry, with who, from where, which run and what (ids
and names, never the values typed); a refused action appends nothing; and
``runwright audit`` lists the log, and ``runwright audit verify`` finds a
row deleted with SQL. The chain itself: tests/integration/test_audit_chain.py;
the console's views: tests/console/test_audit_views.py."""

from __future__ import annotations

import getpass
import json
import logging
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from runner import Agent, Engine, effect, tool
from runner.cli import main
from runner.core.audit import AuditAction
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from runner.testing import Reply, Request, ScriptedModel, TestEngine, call, text, tools
from store.errors import (
    ApprovalAlreadyDecided,
    InvalidApprovalInput,
    InvalidInput,
    InvalidTransition,
    WrongRequestKind,
)
from store.models import RunStatus
from store.pg.audit import AuditEntry
from store.postgres import PostgresStore
from tests.integration.test_unknown_effects import Refunds, crashed_mid_refund
from tests.integration.test_versions import Effects, define
from tests.integration.test_versions import waiting_run as waiting_on_version

SOURCE = "cli ana@desk"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def queued() -> list[str]:
    return []


@pytest.fixture
def engine(
    pg_store: PostgresStore, leases: Leases, settings: Settings, queued: list[str]
) -> Iterator[Engine]:
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=queued.append)
    yield made
    made.close()


def refund_agent() -> str:
    """Step 1 asks to refund 30 euros (a person approves it) and asks a
    question; step 2 ends."""
    name = unique("audit")

    @effect
    def refund(amount: int, idempotency_key: str, note: str = "") -> dict[str, Any]:
        """Refund money."""
        return {"refunded": amount}

    def script(request: Request) -> Any:
        if request.step == 1:
            asks = [call("refund", {"amount": 30, "note": "broken"})]
            return Reply("Refunding.", [*asks, call("ask_human", {"question": "Which order?"})])
        return text("done")

    model = ScriptedModel(name, script)
    Agent(name=name, model=model.model, tools=[refund], approvals={"refund": True}, ask_human=True)
    return name


def plain_agent() -> str:
    name = unique("plain")

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return f"{order}: shipped"

    def script(request: Request) -> Any:
        if request.step == 1:
            return tools(call("lookup", {"order": "A-1"}))
        return text("done")

    Agent(name=name, model=ScriptedModel(name, script).model, tools=[lookup])
    return name


def waiting(engine: Engine, queued: list[str]) -> tuple[str, str, str]:
    """A run waiting on a refund to approve and a question: its id, the
    approval's id and the question's."""
    run = engine.start(refund_agent(), {})
    engine.execute(queued.pop(0))
    asked = {a.kind.value: a.approval_id for a in engine.approvals(run.id)}
    return run.id, asked["approval"], asked["input"]


def entries(engine: Engine, after: int = 0) -> list[AuditEntry]:
    return engine.audit_log(after=after)


def last_id(engine: Engine) -> int:
    found = entries(engine)
    return found[-1].id if found else 0


def test_a_decision_with_edited_arguments_is_one_edited_entry_naming_the_fields(
    engine: Engine, queued: list[str]
) -> None:
    run_id, approval_id, question_id = waiting(engine, queued)
    engine.decide(
        approval_id,
        True,
        trusted=True,
        by="ana",
        source=SOURCE,
        arguments={"amount": 25},  # and no note
    )
    engine.answer(question_id, "A-1001", trusted=True, by="ana", source=SOURCE)
    edited, answered = entries(engine)
    assert (edited.actor, edited.source, edited.action, edited.run_id) == (
        "ana",
        SOURCE,
        AuditAction.EDITED,
        run_id,
    )
    assert edited.detail == {
        "approval_id": approval_id,
        "tool": "refund",
        "decision": "approved",
        "edited": ["amount", "note"],
    }
    # Names of fields, never values (the approval's id is random, and may hold "25").
    assert "25" not in json.dumps({k: v for k, v in edited.detail.items() if k != "approval_id"})
    assert (answered.action, answered.run_id, answered.detail) == (
        AuditAction.ANSWERED,
        run_id,
        {"approval_id": question_id},
    )
    assert "A-1001" not in json.dumps(answered.detail)
    assert engine.verify_audit().ok


def test_a_plain_decision_is_decided_and_no_name_is_unknown(
    engine: Engine, queued: list[str]
) -> None:
    run_id, approval_id, _ = waiting(engine, queued)
    engine.decide(approval_id, False, "too much", trusted=True, for_run=False)
    (entry,) = entries(engine)
    assert (entry.actor, entry.source, entry.action, entry.run_id) == (
        "unknown",
        None,
        AuditAction.DECIDED,
        run_id,
    )
    assert entry.detail == {"approval_id": approval_id, "tool": "refund", "decision": "denied"}
    assert "too much" not in json.dumps(entry.detail)  # the reason may quote the payload


def test_refused_decisions_and_answers_append_nothing(engine: Engine, queued: list[str]) -> None:
    _, approval_id, question_id = waiting(engine, queued)
    with pytest.raises(InvalidApprovalInput):
        engine.decide(approval_id, True, trusted=True, by="ana", arguments={"amount": "lots"})
    with pytest.raises(WrongRequestKind):
        engine.answer(approval_id, "yes", trusted=True, by="ana")
    with pytest.raises(InvalidApprovalInput):
        engine.answer(question_id, {"not": "text"}, trusted=True, by="ana")
    assert entries(engine) == []
    engine.decide(approval_id, True, trusted=True, by="ana")
    with pytest.raises(ApprovalAlreadyDecided):
        engine.decide(approval_id, False, trusted=True, by="bo")
    assert [(e.actor, e.action) for e in entries(engine)] == [("ana", AuditAction.DECIDED)]


def test_cancel_retry_and_fork_append_one_entry_each_and_nothing_when_refused(
    engine: Engine, queued: list[str]
) -> None:
    run = engine.start(plain_agent(), {})
    engine.cancel(run.id, by="ana", source=SOURCE)
    engine.cancel(run.id, by="ana", source=SOURCE)  # already ended: nothing done
    engine.retry(run.id, extra_steps=2, by="bo", source=SOURCE)
    engine.retry(run.id, by="bo", source=SOURCE)  # queued already: nothing done
    queued.clear()
    engine.execute(run.id)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    with pytest.raises(InvalidTransition):
        engine.retry(run.id, by="bo")
    with pytest.raises(InvalidInput):
        engine.fork(run.id, 1, id="\x00", by="cy")
    fork = engine.fork(run.id, 1, model="openai/gpt-4o-mini", by="cy", source=SOURCE)
    cancelled, retried, forked = entries(engine)
    assert (cancelled.actor, cancelled.action, cancelled.run_id, cancelled.detail) == (
        "ana",
        AuditAction.CANCELLED,
        run.id,
        {"action": "cancelled"},
    )
    assert (retried.actor, retried.action, retried.detail) == (
        "bo",
        AuditAction.RETRIED,
        {"extra_steps": 2, "keep_standing": False},
    )
    assert (forked.actor, forked.action, forked.run_id, forked.source) == (
        "cy",
        AuditAction.FORKED,
        run.id,
        SOURCE,
    )
    assert forked.detail is not None and forked.detail["fork"] == fork.id
    assert (forked.detail["at_step"], forked.detail["model"]) == (1, "openai/gpt-4o-mini")


def test_resolving_an_effect_is_one_entry_without_the_note(
    runwright_engine: TestEngine,
) -> None:
    run_id = crashed_mid_refund(runwright_engine, Refunds())
    engine = runwright_engine.engine
    with pytest.raises(InvalidInput):
        engine.resolve_effect(run_id, "call_refund", "maybe", by="ana")
    engine.resolve_effect(
        run_id, "call_refund", "done", note="seen in the PSP", by="ana", source=SOURCE
    )
    (entry,) = engine.audit_log()
    assert (entry.actor, entry.action, entry.run_id, entry.source) == (
        "ana",
        AuditAction.RESOLVED_EFFECT,
        run_id,
        SOURCE,
    )
    assert entry.detail == {"call_id": "call_refund", "outcome": "done"}


def test_upgrading_runs_is_one_entry_per_run_moved(engine: Engine) -> None:
    name, effects = unique("audit-upgrade"), Effects()
    define(name, effects, policy="pin", version="a")
    first, second = waiting_on_version(engine, name), waiting_on_version(engine, name)
    old = engine.get_run(first).version
    define(name, effects, policy="pin", version="b", instructions="b")
    with pytest.raises(InvalidInput):
        engine.upgrade_runs(name, "b", "b", by="ops")
    assert entries(engine) == []
    report = engine.upgrade_runs(name, "a", by="ops", source=SOURCE)
    found = entries(engine)
    assert sorted(e.run_id or "" for e in found) == sorted([first, second])
    assert {(e.actor, e.action, e.source) for e in found} == {
        ("ops", AuditAction.UPGRADED_RUNS, SOURCE)
    }
    assert found[0].detail == {"agent": name, "from": old, "to": report.new}


def test_an_entry_that_cannot_be_appended_is_an_error_line_and_the_action_stands(
    engine: Engine, queued: list[str], monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    run = engine.start(plain_agent(), {})

    def down(*args: Any, **kwargs: Any) -> int:
        raise sa.exc.OperationalError("INSERT", {}, Exception("the server closed"))

    monkeypatch.setattr(engine.store, "append_audit", down)
    with caplog.at_level(logging.ERROR, logger="runner.core.audit"):
        result = engine.cancel(run.id, by="ana")
    assert result.run.status is RunStatus.CANCELLED
    (line,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "cancelled by ana" in line.getMessage() and run.id in line.getMessage()


def test_the_audit_log_refuses_a_bad_page(engine: Engine) -> None:
    with pytest.raises(InvalidInput):
        engine.audit_log(limit=0)
    with pytest.raises(InvalidInput):
        engine.audit_log(after=-1)


# ------------------------------------------------------------ the CLI


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

    def run(*args: str) -> Result:
        return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)

    yield run


def send(run_id: str, **_: Any) -> None:
    """What the command line's engine sends to: nowhere (the tests execute)."""


def test_cli_actions_name_the_login_and_host_and_show_and_watch_are_views(
    cli: Any, engine: Engine, queued: list[str]
) -> None:
    run = engine.start(plain_agent(), {})
    assert cli("show", run.id).exit_code == 0
    watched = cli("watch", run.id, "--timeout", "0.2")
    assert watched.exit_code == 1 and "still queued" in watched.output
    assert cli("cancel", run.id, "--by", "ana").exit_code == 0
    retried = cli("retry", run.id, "--by", "bo", "--json")
    assert retried.exit_code == 0 and json.loads(retried.output)["retried"] is True
    where = f"cli {getpass.getuser()}@{socket.gethostname()}"
    found = [(e.actor, e.action, e.source, e.run_id) for e in entries(engine)]
    assert found == [
        (getpass.getuser(), AuditAction.VIEWED_PAYLOADS, where, run.id),
        (getpass.getuser(), AuditAction.VIEWED_PAYLOADS, where, run.id),
        ("ana", AuditAction.CANCELLED, where, run.id),
        ("bo", AuditAction.RETRIED, where, run.id),
    ]


def test_cli_lists_and_exports_json_lines_and_verify_finds_a_deleted_row(
    cli: Any, engine: Engine, pg_store: PostgresStore
) -> None:
    one, two = str(uuid.uuid4()), str(uuid.uuid4())
    ids = [
        engine.audit(AuditAction.CANCELLED, by="ana", run_id=one, source=SOURCE),
        engine.audit(AuditAction.RETRIED, by="bo", run_id=two, detail={"extra_steps": 1}),
        engine.audit(AuditAction.CANCELLED, by="cy", run_id=one),
        engine.audit(AuditAction.ROTATED_KEYS, by="ops"),
    ]
    exported = cli("audit", "--json")
    assert exported.exit_code == 0
    lines = [json.loads(line) for line in exported.output.splitlines()]
    assert [line["id"] for line in lines] == ids
    assert lines[1]["actor"] == "bo" and lines[1]["detail"] == {"extra_steps": 1}
    assert lines[0]["source"] == SOURCE and lines[1]["prev_hash"] == lines[0]["hash"]
    of_one = cli("audit", "--run", one, "--json").output.splitlines()
    assert [json.loads(line)["actor"] for line in of_one] == ["ana", "cy"]
    paged = cli("audit", "--after", str(ids[0]), "--limit", "2", "--json").output.splitlines()
    assert [json.loads(line)["id"] for line in paged] == ids[1:3]
    table = cli("audit")
    assert table.exit_code == 0 and "rotated_keys" in table.output and SOURCE in table.output

    holds = cli("audit", "verify")
    assert (holds.exit_code, holds.output.strip()) == (0, "the chain holds (4 rows)")
    with pg_store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM audit WHERE id = :id"), {"id": ids[1]})
    broken = cli("audit", "verify")
    assert broken.exit_code == 1
    assert f"breaks at entry {ids[2]}" in broken.output and "missing" in broken.output


def test_cli_audit_refuses_bad_options_and_changes_nothing(cli: Any, engine: Engine) -> None:
    assert cli("audit", "--limit", "0").exit_code == 2
    bad_run = cli("audit", "--run", "nope")
    assert bad_run.exit_code == 1 and "no run with id" in bad_run.output
    mixed = cli("audit", "--json", "verify")
    assert mixed.exit_code == 1 and "takes none" in mixed.output
    assert entries(engine) == []
