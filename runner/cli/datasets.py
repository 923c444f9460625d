"""``runwright dataset``: datasets of cases to replay and evaluate an agent
on (docs/replay-and-evals.md), built from the journal by a query or from a
JSON-lines file, versioned by their content; and ``runwright runs export
RUN``, which prints one run as a case.

A case taken from the journal carries a run's payloads out of it: it is
redacted with its agent's redactor (the project's, ``RUNWRIGHT_REDACT``,
when this process does not load the agent), as everything that leaves the
journal is (docs/security.md), and each run read for it is an `exported`
entry in the audit log.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from runner.cli.args import Command, parse_duration
from runner.cli.as_json import Document, dataset_json, dumps, json_option
from runner.cli.audit import cli_source, login_name
from runner.cli.step_lines import clip
from runner.cli.terminal import Group, inert, say
from store.errors import DatasetNotFound, InvalidInput
from store.status import RunStatus

if TYPE_CHECKING:
    from runner.core.engine.engine import Engine
    from runner.evals.recording import Case
    from store.models import DatasetInfo
    from store.postgres import PostgresStore

# The most cases a dataset holds (store/pg/evals.py refuses more): the most
# runs a query takes, and lines a file gives.
MAX_CASES = 10_000


def _engine() -> Engine:
    """An engine over the store alone (no Redis: nothing is sent), with the
    agents of ``RUNWRIGHT_AGENTS`` loaded for their redactors."""
    from runner.core.agent import registry
    from runner.core.engine.engine import Engine
    from runner.core.settings import Settings, open_store, resolve
    from store.summary import require_schema

    settings = resolve(Settings.from_env())
    if settings.database_url:
        require_schema(settings.database_url)
    registry.load(settings.agents)
    return Engine(open_store(settings), settings=settings)


def _store() -> PostgresStore:
    from runner.core.settings import Settings, open_store, resolve
    from store.summary import require_schema

    settings = resolve(Settings.from_env())
    if settings.database_url:
        require_schema(settings.database_url)
    return open_store(settings)


def exported_case(engine: Engine, run_id: str, *, expect: bool = True) -> Case:
    """Run ``run_id`` as a case, redacted by its agent's redactor (the
    project's when this process has no agent of that name)."""
    from runner.core.agent import registry
    from runner.evals.recording import Case

    run = engine.get_run(run_id)
    return Case.of_run(engine, run.id, redactor=registry.redactor(run.agent), expect=expect)


def read_cases(lines: Iterable[str], where: str) -> list[dict[str, Any]]:
    """The cases of a JSON-lines text, each line a case's JSON (or a bare
    ``{"agent", "payload", "expected"}``), as case JSON; blank lines are
    skipped. A bad line is one :class:`InvalidInput` naming it."""
    from runner.evals.recording import Case
    from store.jsonsafe import loads_strict

    cases: list[dict[str, Any]] = []
    number = 0
    try:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            if len(cases) == MAX_CASES:
                raise InvalidInput(f"{where} holds more than {MAX_CASES} cases")
            try:
                case = Case.from_json(loads_strict(line, "it"))
            except InvalidInput as exc:
                raise InvalidInput(f"{where}, line {number}: {exc.message}") from None
            cases.append(case.to_json())
    except UnicodeDecodeError:
        raise InvalidInput(f"{where}, line {number + 1}: not UTF-8 text") from None
    if not cases:
        raise InvalidInput(f"{where} holds no case")
    return cases


def _file_cases(path: str) -> list[dict[str, Any]]:
    if path == "-":
        return read_cases(sys.stdin, "stdin")
    try:
        with open(path, encoding="utf-8") as lines:
            return read_cases(lines, path)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _when(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="seconds")


def _info_line(info: DatasetInfo) -> str:
    by = f" by {info.created_by}" if info.created_by else ""
    return (
        f"dataset {info.name} version {info.version}: {info.case_count} case(s), "
        f"created {_when(info.created_at)}{by}"
    )


def _table(*columns: str) -> Any:
    from rich.table import Table

    return Table(*columns)


def _print(table: Any) -> None:
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=200)  # piped: never cut versions short
    console.print(table)


def _row(table: Any, *cells: object) -> None:
    from rich.text import Text

    # Text, not str: names and payloads come from the store.
    table.add_row(*(Text(inert(str(cell))) for cell in cells))


@click.group("dataset", cls=Group)
def dataset() -> None:
    """Datasets of cases to replay and evaluate agents on, versioned by
    their content (docs/replay-and-evals.md)."""


@dataset.command("create")
@click.argument("name")
@click.option("--agent", default=None, help="Cases from the journal: this agent's runs.")
@click.option(
    "--status",
    default=RunStatus.COMPLETED.value,
    show_default=True,
    help="With --agent: only runs with this status.",
)
@click.option("--since", default=None, help="With --agent: only runs created this recently (7d).")
@click.option(
    "--limit",
    default=200,
    show_default=True,
    type=click.IntRange(1, MAX_CASES),
    help="With --agent: at most this many runs, newest first.",
)
@click.option(
    "--file",
    "path",
    default=None,
    help="Cases from a JSON-lines file ('-': standard input) instead of the journal.",
)
@click.option("--description", default=None, help="What the dataset is for.")
@click.option(
    "--no-expected", is_flag=True, help="With --agent: do not expect the runs' outputs again."
)
@json_option
@click.pass_context
def create(
    ctx: click.Context,
    name: str,
    agent: str | None,
    status: str,
    since: str | None,
    limit: int,
    path: str | None,
    description: str | None,
    no_expected: bool,
    as_json: bool,
) -> Document | None:
    """Save dataset NAME: each run of --agent that matches (newest first) as
    a case, redacted, its output as what is expected of a completed run; or
    each line of --file. The same cases as a version already saved are that
    version; changed cases are a new one. Prints the name, the version and
    how many cases."""
    from store.pg.evals import check_dataset_name

    check_dataset_name(name)
    if (agent is None) == (path is None):
        raise InvalidInput("give --agent (runs from the journal) or --file (a JSON-lines file)")
    who = login_name()
    if path is not None:
        journal_only = [
            f"--{option.replace('_', '-')}"
            for option in ("status", "since", "limit", "no_expected")
            if ctx.get_parameter_source(option) is click.core.ParameterSource.COMMANDLINE
        ]
        if journal_only:
            raise InvalidInput(f"{', '.join(journal_only)} query the journal: --file takes none")
        cases = _file_cases(path)
        store = _store()
        try:
            info = store.save_dataset(
                name,
                cases,
                created_by=who,
                query={"file": "-" if path == "-" else os.path.basename(path)},
                description=description,
            )
        finally:
            store.close()
    else:
        assert agent is not None
        info = _from_journal(name, agent, status, since, limit, description, not no_expected)
    if as_json:
        return {"dataset": dataset_json(info)}
    say(f"dataset {info.name} version {info.version}: {info.case_count} case(s)")
    return None


def _from_journal(
    name: str,
    agent: str,
    status: str,
    since: str | None,
    limit: int,
    description: str | None,
    expect: bool,
) -> DatasetInfo:
    """The dataset of ``agent``'s runs that match, saved; each run read is
    an `exported` entry in the audit log."""
    from runner.core.audit import AuditAction

    after = None if since is None else datetime.now(UTC) - parse_duration(since)
    engine = _engine()
    try:
        runs = engine.list_runs(
            agent=agent, status=status, since=after, limit=limit, payloads=False
        )
        runs = [run for run in runs if run.erased_at is None]  # their payloads are gone
        if not runs:
            within = "" if since is None else f" created in the last {since}"
            raise InvalidInput(f"no {status} run of agent {agent!r}{within}; nothing saved")
        cases = [exported_case(engine, run.id, expect=expect).to_json() for run in runs]
        query = {"agent": agent, "status": status, "since": since, "limit": limit}
        who = login_name()
        info = engine.deps.store.save_dataset(
            name, cases, created_by=who, query=query, description=description
        )
        for run in runs:
            engine.audit(
                AuditAction.EXPORTED,
                by=who,
                run_id=run.id,
                source=cli_source(),
                detail={"dataset": info.name, "version": info.version},
            )
    finally:
        engine.close()
    return info


@dataset.command("list")
@json_option
def list_datasets(as_json: bool) -> Document | None:
    """List every version of every dataset, newest first."""
    store = _store()
    try:
        found = store.datasets()
    finally:
        store.close()
    if as_json:
        return {"datasets": [dataset_json(info) for info in found]}
    if not found:
        say("no datasets")
        return None
    table = _table("name", "version", "cases", "created", "by", "description")
    for info in found:
        _row(
            table,
            info.name,
            info.version,
            info.case_count,
            _when(info.created_at),
            info.created_by or "-",
            clip(info.description or "", 60),
        )
    _print(table)
    return None


@dataset.command("show")
@click.argument("name")
@click.option("--version", default=None, help="This version (default: the newest).")
@json_option
def show(name: str, version: str | None, as_json: bool) -> Document | None:
    """Show a dataset's version and its cases: each one's agent, payload and
    what is expected of it (with --json, the cases whole). The cases hold
    runs' payloads: showing them is a `viewed_payloads` entry in the audit
    log."""
    from runner.core.audit import AuditAction, record

    store = _store()
    try:
        found = store.dataset(name, version)
        record(
            store,
            AuditAction.VIEWED_PAYLOADS,
            login_name(),
            source=cli_source(),
            detail={"dataset": found.info.name, "version": found.info.version},
        )
    finally:
        store.close()
    if as_json:
        return {"dataset": dataset_json(found.info), "cases": found.cases}
    say(_info_line(found.info))
    if found.info.description:
        say(f"  {found.info.description}")
    if found.info.query:
        say(f"  built from {json.dumps(found.info.query, sort_keys=True)}")
    table = _table("case", "agent", "payload", "expected")
    for position, case in enumerate(found.cases):
        trigger = case.get("trigger")
        payload = trigger.get("payload") if isinstance(trigger, dict) else None
        expected = case.get("expected")
        _row(
            table,
            position,
            case.get("agent", "-"),
            clip(json.dumps(payload, ensure_ascii=False), 60),
            "-" if not isinstance(expected, dict) else clip(json.dumps(expected.get("output")), 40),
        )
    _print(table)
    return None


@dataset.command("delete")
@click.argument("name")
@click.option("--version", default=None, help="Only this version (default: every version).")
@json_option
def delete(name: str, version: str | None, as_json: bool) -> Document | None:
    """Delete a dataset's version, or all its versions, with their cases.
    The evaluations that ran it keep their results."""
    store = _store()
    try:
        deleted = store.delete_dataset(name, version)
    finally:
        store.close()
    if not deleted:
        which = "" if version is None else f" with version {version!r}"
        raise DatasetNotFound(f"no dataset named {name!r}{which}")
    if as_json:
        return {"name": name, "version": version, "deleted": deleted}
    say(f"deleted {deleted} version(s) of dataset {name}")
    return None


@click.command("export", cls=Command)
@click.argument("run_id")
@click.option(
    "--no-expected", is_flag=True, help="Do not expect the run's output again (a case to explore)."
)
def export(run_id: str, no_expected: bool) -> None:
    """Print run RUN_ID as a case (JSON, redacted with its agent's
    redactor): `runwright runs export RUN > case.json` makes a regression
    case of a run (docs/replay-and-evals.md). Goes in the audit log as
    `exported`."""
    from runner.core.audit import AuditAction

    engine = _engine()
    try:
        case = exported_case(engine, run_id, expect=not no_expected)
        engine.audit(AuditAction.EXPORTED, by=login_name(), run_id=run_id, source=cli_source())
    finally:
        engine.close()
    click.echo(dumps(case.to_json(), indent=2))
