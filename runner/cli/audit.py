"""``runwright audit``: the audit log of people's actions on runs' data
(docs/security.md, "The audit log"), listed or exported as JSON lines, and
``runwright audit verify``, which walks its hash chain.

The other commands that act on a run as a person, or print its payloads,
name where they act from with :func:`cli_source`."""

from __future__ import annotations

import getpass
import socket
from typing import TYPE_CHECKING

import click

from runner.cli.as_json import audit_json, dumps
from runner.cli.terminal import Group, fail, inert, say

if TYPE_CHECKING:
    from runner.core.engine.engine import Engine


def login_name() -> str | None:
    """This process's login name; None when the system has none for its uid."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a bare container
        return None


def cli_source() -> str:
    """Where a command acts from, as the audit log names it: ``cli user@host``.
    The login name is the process's, whatever ``--by`` says."""
    return f"cli {login_name() or 'unknown'}@{socket.gethostname()}"


def _engine() -> Engine:
    """An engine over the store alone: the log needs neither Redis nor agents."""
    from runner.core.engine.engine import Engine
    from runner.core.settings import Settings, open_store, resolve

    settings = resolve(Settings.from_env())
    return Engine(open_store(settings), settings=settings)


@click.group("audit", cls=Group, invoke_without_command=True)
@click.option("--run", "run_id", default=None, help="Only the entries of this run.")
@click.option(
    "--after", default=0, show_default=True, type=click.IntRange(0), help="Entries after this id."
)
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--json", "as_json", is_flag=True, help="One JSON entry per line (to export).")
@click.pass_context
def audit(ctx: click.Context, run_id: str | None, after: int, limit: int, as_json: bool) -> None:
    """List the audit log: who did what to which run's data, when and from
    where, oldest first; `runwright audit verify` checks its hash chain.

    To export it all, page with --after the last id printed."""
    if ctx.invoked_subcommand is not None:
        if any(
            ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
            for name in ctx.params
        ):
            fail("the options of `runwright audit` list entries: `audit verify` takes none")
        return
    engine = _engine()
    try:
        entries = engine.audit_log(run_id, after=after, limit=limit)
    finally:
        engine.close()
    if as_json:
        for entry in entries:
            click.echo(dumps(audit_json(entry)))
        return
    if not entries:
        say("no entries")
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table("id", "at", "actor", "source", "action", "run", "detail")
    for entry in entries:
        cells = (
            entry.id,
            entry.at.isoformat(timespec="seconds"),
            entry.actor,
            entry.source or "-",
            entry.action,
            entry.run_id or "-",
            "" if entry.detail is None else dumps(dict(entry.detail)),
        )
        # Text, not str: actors and sources come from the store.
        table.add_row(*(Text(inert(cell)) for cell in cells))
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=250)  # piped: never cut ids short
    console.print(table)


@audit.command("verify")
def verify() -> None:
    """Walk the audit log's hash chain from its first entry: exit 0 if it
    holds, else name the first entry that does not follow (one before it
    deleted, or it altered) and exit 1. The newest entry deleted leaves
    nothing to tell."""
    engine = _engine()
    try:
        check = engine.verify_audit()
    finally:
        engine.close()
    if check.ok:
        say(f"the chain holds ({check.rows} rows)")
        return
    fail(f"the chain breaks at entry {check.broken_at}: {check.why}")
