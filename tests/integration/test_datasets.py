"""Datasets on the command line (docs/replay-and-evals.md): ``runwright
dataset create`` from the journal by a query or from a JSON-lines file,
versioned by content; ``list``, ``show``, ``delete``; ``runwright runs
export RUN``, redacted and audited; hostile input, each one clear error with
nothing saved; and an evaluation's cases claimed by many workers at once,
none twice. The store's own contract: tests/integration/test_store_contract.py."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from runner import Agent, Engine
from runner.cli import main
from runner.core.audit import AuditAction
from runner.evals.recording import CASE_FORMAT, Case
from runner.testing import Request, ScriptedModel, text
from store.db import make_engine
from store.models import EvaluationCaseStatus, RunStatus
from store.postgres import PostgresStore

EMAIL = "ana.lopez@example.com"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cli(database_url: str, redis_url: str) -> Iterator[Any]:
    """``runwright ARGS...`` on this test's database: its result."""
    env = {
        "RUNWRIGHT_DATABASE_URL": database_url,
        "RUNWRIGHT_REDIS_URL": redis_url,
        "RUNWRIGHT_AGENTS": "",
        "RUNWRIGHT_SECRET_KEY": "test:test-secret-for-runwright-tests-only",
    }

    def run(*args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(main, list(args), env=env, input=input, catch_exceptions=False)

    yield run


def triage_agent(redact: Any = None) -> str:
    """An agent that labels a ticket in one step, quoting who wrote it."""
    name = unique("triage")

    def script(request: Request) -> Any:
        fenced = request.messages[-1]["content"]  # the trigger, as a fenced JSON block
        ticket = json.loads(fenced.removeprefix("```json\n").removesuffix("\n```"))["payload"]
        return text(f"bug, reported by {ticket.get('from')}")

    Agent(name=name, model=ScriptedModel(name, script).model, redact=redact)
    return name


def finished(engine: Engine, agent: str, payload: Any) -> str:
    run = engine.start(agent, payload)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    return run.id


def one_error(result: Result) -> str:
    """The one line a refused command prints: exit 1, ``error: ...``."""
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def exported(engine: Engine) -> list[tuple[str | None, Any]]:
    return [(e.run_id, e.detail) for e in engine.audit_log() if e.action == AuditAction.EXPORTED]


def test_a_dataset_from_the_journal_is_versioned_by_its_cases(
    cli: Any, engine: Engine, pg_store: PostgresStore
) -> None:
    agent = triage_agent()
    first = finished(engine, agent, {"from": "bo", "title": "App crashes"})
    second = finished(engine, agent, {"from": "cy", "title": "Login fails"})
    engine.start(agent, {"from": "dee", "title": "still queued"})  # not completed: left out

    made = cli("dataset", "create", "regressions", "--agent", agent, "--since", "1h", "--json")
    assert made.exit_code == 0, made.output
    info = json.loads(made.output)["dataset"]
    assert (info["name"], info["case_count"]) == ("regressions", 2)
    assert info["query"] == {"agent": agent, "status": "completed", "since": "1h", "limit": 200}
    stored = pg_store.dataset("regressions")
    assert [Case.from_json(c).reference_run for c in stored.cases] == [second, first]
    newest = Case.from_json(stored.cases[0])
    assert newest.has_expected and newest.expected == "bug, reported by cy"
    assert newest.trigger.payload == {"from": "cy", "title": "Login fails"}
    # Each run read for it is in the audit log.
    detail = {"dataset": "regressions", "version": info["version"]}
    assert exported(engine) == [(second, detail), (first, detail)]

    # The same runs again: the same version, nothing new.
    again = cli("dataset", "create", "regressions", "--agent", agent)
    assert again.exit_code == 0, again.output
    assert again.output.strip() == f"dataset regressions version {info['version']}: 2 case(s)"
    assert len(pg_store.datasets()) == 1
    # One more run: another version, the old one kept.
    third = finished(engine, agent, {"from": "eve", "title": "Slow"})
    grown = cli("dataset", "create", "regressions", "--agent", agent, "--limit", "3")
    assert grown.exit_code == 0, grown.output
    assert info["version"] not in grown.output and "3 case(s)" in grown.output
    versions = [d.version for d in pg_store.datasets()]
    assert len(versions) == 2 and versions[1] == info["version"]
    assert Case.from_json(pg_store.dataset("regressions").cases[0]).reference_run == third

    listed = cli("dataset", "list", "--json")
    assert [d["version"] for d in json.loads(listed.output)["datasets"]] == versions
    table = cli("dataset", "list")
    assert table.exit_code == 0 and "regressions" in table.output
    shown = cli("dataset", "show", "regressions", "--version", info["version"])
    assert shown.exit_code == 0, shown.output
    assert f"version {info['version']}: 2 case(s)" in shown.output
    assert "Login fails" in shown.output and "bug, reported by cy" in shown.output
    whole = json.loads(cli("dataset", "show", "regressions", "--json").output)
    assert whole["dataset"]["version"] == versions[0] and len(whole["cases"]) == 3
    views = [e.detail for e in engine.audit_log() if e.action == AuditAction.VIEWED_PAYLOADS]
    assert views == [
        {"dataset": "regressions", "version": info["version"]},
        {"dataset": "regressions", "version": versions[0]},
    ]

    gone = cli("dataset", "delete", "regressions", "--version", info["version"])
    assert gone.exit_code == 0 and "deleted 1 version(s)" in gone.output
    assert [d.version for d in pg_store.datasets()] == [versions[0]]
    assert cli("dataset", "delete", "regressions", "--json").exit_code == 0
    assert pg_store.datasets() == []


def test_runs_export_prints_a_redacted_case_that_reads_back(
    cli: Any, engine: Engine, pg_store: PostgresStore
) -> None:
    agent = triage_agent(redact=["email"])
    run_id = finished(engine, agent, {"from": EMAIL, "title": "Refund twice"})

    done = cli("runs", "export", run_id)
    assert done.exit_code == 0, done.output
    assert EMAIL not in done.output and "[redacted:email]" in done.output
    case = Case.from_json(json.loads(done.output))
    assert (case.agent, case.reference_run, case.has_expected) == (agent, run_id, True)
    assert case.trigger.payload == {"from": "[redacted:email]", "title": "Refund twice"}
    assert case.expected == "bug, reported by [redacted:email]"
    assert case.recording is not None and case.recording.status == "completed"
    assert json.loads(done.output)["format"] == CASE_FORMAT
    # The journal keeps what it had: redaction is of what leaves it.
    run = engine.get_run(run_id)
    assert run.trigger.payload["from"] == EMAIL and run.output == f"bug, reported by {EMAIL}"

    bare = cli("runs", "export", run_id, "--no-expected")
    assert bare.exit_code == 0 and "expected" not in json.loads(bare.output)
    assert exported(engine) == [(run_id, None), (run_id, None)]
    # A dataset built from the journal is redacted the same way.
    assert cli("dataset", "create", "refunds", "--agent", agent).exit_code == 0
    assert EMAIL not in json.dumps(pg_store.dataset("refunds").cases)


def test_a_dataset_from_a_file_and_its_bad_lines(
    cli: Any, engine: Engine, pg_store: PostgresStore, tmp_path: Path
) -> None:
    agent = triage_agent()
    run_id = finished(engine, agent, {"from": "bo", "title": "From the journal"})
    exported_case = cli("runs", "export", run_id).output
    lines = [
        json.dumps({"agent": agent, "payload": {"title": "bare"}}),
        "",
        json.dumps({"agent": agent, "payload": "x", "expected": {"output": "bug"}}),
        json.dumps(json.loads(exported_case)),
    ]
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(lines) + "\n")
    made = cli("dataset", "create", "mixed", "--file", str(cases), "--description", "by hand")
    assert made.exit_code == 0, made.output
    stored = pg_store.dataset("mixed")
    assert stored.info.query == {"file": "cases.jsonl"} and stored.info.description == "by hand"
    read = [Case.from_json(c) for c in stored.cases]
    assert [c.trigger.payload for c in read][:2] == [{"title": "bare"}, "x"]
    assert (read[0].has_expected, read[1].expected, read[2].reference_run) == (False, "bug", run_id)
    # The same lines from standard input: the same version.
    piped = cli("dataset", "create", "mixed", "--file", "-", "--json", input=cases.read_text())
    assert json.loads(piped.output)["dataset"]["version"] == stored.info.version

    before = pg_store.datasets()
    bad = tmp_path / "bad.jsonl"
    for content, says in [
        (f"{lines[0]}\n{{not json\n", "line 2: it is not JSON"),
        (f"{lines[0]}\n\n[1, 2]\n", "line 3: a case is a JSON object"),
        (f"{lines[0]}\n{json.dumps({'payload': 1})}\n", "line 2: a case names its agent"),
        (
            json.dumps({"agent": agent, "payload": 1, "expected": "bug"}),
            "line 1: a case's expected",
        ),
        ('{"agent": "a", "payload": NaN}', "line 1: it is not JSON: NaN"),
        ("\n\n", "holds no case"),
    ]:
        bad.write_text(content)
        assert says in one_error(cli("dataset", "create", "mixed", "--file", str(bad)))
    bad.write_bytes(lines[0].encode() + b"\n\xff\xfe\n")
    assert "not UTF-8" in one_error(cli("dataset", "create", "mixed", "--file", str(bad)))
    missing = cli("dataset", "create", "mixed", "--file", str(tmp_path / "none.jsonl"))
    assert "cannot read" in one_error(missing)
    both = cli("dataset", "create", "mixed", "--file", str(cases), "--status", "failed")
    assert "--status query the journal" in one_error(both)
    assert "give --agent" in one_error(cli("dataset", "create", "mixed"))
    assert "give --agent" in one_error(
        cli("dataset", "create", "mixed", "--agent", agent, "--file", str(cases))
    )
    assert pg_store.datasets() == before


def test_hostile_names_and_unknowns_are_one_error_and_change_nothing(
    cli: Any, engine: Engine, pg_store: PostgresStore
) -> None:
    agent = triage_agent()
    finished(engine, agent, {"from": "bo"})
    for name in ("../etc", "_x", "a b", "x" * 101, "naïve"):
        refused = cli("dataset", "create", name, "--agent", agent)
        assert "a dataset's name is" in one_error(refused)
    assert "unknown status" in one_error(
        cli("dataset", "create", "d", "--agent", agent, "--status", "done")
    )
    assert "not a duration" in one_error(
        cli("dataset", "create", "d", "--agent", agent, "--since", "lately")
    )
    nothing = cli("dataset", "create", "d", "--agent", unique("nobody"))
    assert "nothing saved" in one_error(nothing)
    failed = cli("dataset", "create", "d", "--agent", agent, "--status", "failed")
    assert "no failed run" in one_error(failed)
    assert "no dataset named 'nobody'" in one_error(cli("dataset", "show", "nobody"))
    assert "no dataset named" in one_error(cli("dataset", "show", "../etc"))
    assert "has no version" in one_error(cli("dataset", "show", "d", "--version", "zz"))
    assert "no dataset named 'nobody'" in one_error(cli("dataset", "delete", "nobody"))
    unknown = str(uuid.uuid4())
    assert f"no run with id '{unknown}'" in one_error(cli("runs", "export", unknown))
    assert "no run with id" in one_error(cli("runs", "export", "not-a-run\x1b[31m"))
    assert pg_store.datasets() == []
    assert exported(engine) == []


def test_many_workers_claim_an_evaluations_cases_none_twice(
    database_url: str, pg_store: PostgresStore
) -> None:
    """Eight workers (threads, each on its own connection) claim and finish
    the cases of one evaluation at once: each case is claimed once, by one
    worker, and done once."""
    cases = [{"agent": "triage", "trigger": {"payload": {"n": n}}} for n in range(60)]
    data = pg_store.save_dataset("race", cases)
    pg_store.create_evaluation(
        "race-1", dataset="race", version=data.version, agent="triage", label="v1", case_count=60
    )
    store = PostgresStore(make_engine(database_url, pool_size=8))
    start = threading.Barrier(8)
    claims: list[tuple[int, str]] = []
    refused: list[int] = []
    lock = threading.Lock()

    def work(worker: str) -> None:
        start.wait(timeout=30)
        while (case := store.claim_eval_case("race-1", worker, 60)) is not None:
            with lock:
                claims.append((case.position, worker))
            if not store.finish_eval_case(
                "race-1", case.position, worker, result={"by": worker}, scores={}
            ):
                with lock:
                    refused.append(case.position)

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        store.close()
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(position for position, _ in claims) == list(range(60))
    assert refused == []
    assert len({worker for _, worker in claims}) > 1  # they did run side by side
    done = pg_store.evaluation("race-1")
    assert done.info.done == 60
    by = dict(claims)
    for case in done.cases:
        assert case.status is EvaluationCaseStatus.DONE and case.attempts == 1
        assert case.result == {"by": by[case.position]} and case.claimed_by == by[case.position]


def test_an_erased_run_is_no_case(cli: Any, engine: Engine, pg_store: PostgresStore) -> None:
    agent = triage_agent()
    kept = finished(engine, agent, {"from": "fay", "title": "Crash"})
    erased = finished(engine, agent, {"from": "gus", "title": "Refund"})
    engine.erase([erased], by="dpo")
    made = cli("dataset", "create", "after-erasure", "--agent", agent)
    assert made.exit_code == 0, made.output
    assert [Case.from_json(c).reference_run for c in pg_store.dataset("after-erasure").cases] == [
        kept
    ]
    assert "was erased" in one_error(cli("runs", "export", erased))
