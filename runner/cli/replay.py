"""``runwright replay RUN``: a recorded run through an agent definition, in
the sandbox, with no worker and no effect executed; and ``runwright sandbox
prune``, which deletes the sandbox's ended runs (docs/replay-and-evals.md).

``replay`` prints the two trajectories side by side (``--json``: the report
as one document). A ``--recorded`` replay that diverges exits with status 3,
so that a script or CI can gate on it; a ``--live`` one exits 0 when it ran.
The report holds the run's payloads: printing it is a read of payloads, in
the audit log like the console's.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from runner.cli.args import Command, parse_duration
from runner.cli.as_json import dumps
from runner.cli.audit import cli_source, login_name
from runner.cli.terminal import Group, fail, say

# The exit status of a --recorded replay that diverged (1 is an error's).
DIVERGED = 3

if TYPE_CHECKING:
    from runner.core.engine.engine import Engine
    from store.models import Approval


def _engine() -> Engine:
    """An engine over the store, with the agents of RUNWRIGHT_AGENTS: a
    replay needs neither Redis nor a broker."""
    from runner.core.agent import registry
    from runner.core.engine.engine import Engine
    from runner.core.settings import Settings, open_store, resolve
    from store.summary import require_schema

    settings = resolve(Settings.from_env())
    if settings.database_url:
        require_schema(settings.database_url)
    registry.load(settings.agents)
    return Engine(open_store(settings), settings=settings)


def _ask(approval: Approval) -> Any:
    """A decision the recording does not have, asked at the terminal."""
    if not sys.stdin.isatty():
        return None
    if approval.kind.value == "input":
        return click.prompt(f"{approval.tool_name} asks: {approval.input}", default="")
    return click.confirm(f"approve {approval.tool_name}({approval.input})?", default=False)


@click.command("replay", cls=Command)
@click.argument("run_id")
@click.option("--agent", "agent_spec", metavar="MODULE:NAME", help="The definition to replay with.")
@click.option(
    "--version",
    "version",
    type=click.Choice(["current"]),
    default=None,
    help="Replay with the agent as this process defines it now (the default).",
)
@click.option("--live", "mode", flag_value="live", help="Call the model for real.")
@click.option(
    "--recorded",
    "mode",
    flag_value="recorded",
    default=True,
    help="Reply as the recorded model did (the default): does the code still accept the run?",
)
@click.option("--model", default=None, help="A litellm model string for a --live replay.")
@click.option(
    "--tools",
    type=click.Choice(["live", "recorded"]),
    default=None,
    help="Read-only tools run again (live) or return their recorded results.",
)
@click.option(
    "--approvals",
    type=click.Choice(["approve", "deny", "ask"]),
    default="approve",
    show_default=True,
    help="How a call the recording has no decision for is decided.",
)
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON document.")
def replay(
    run_id: str,
    agent_spec: str | None,
    version: str | None,
    mode: str,
    model: str | None,
    tools: str | None,
    approvals: str,
    as_json: bool,
) -> None:
    """Replay RUN's trigger through an agent definition, in a sandbox: no
    worker, nothing written to RUN, no effect executed."""
    from runner.core.audit import AuditAction
    from runner.evals.replay import replay as run_replay

    if agent_spec is not None and version is not None:
        fail("give --agent or --version, not both")
    engine = _engine()
    try:
        decide: Any = _ask if approvals == "ask" else approvals
        report = run_replay(
            run_id,
            agent=agent_spec,
            mode=mode,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
            model=model,
            approvals=decide,
            engine=engine,
        )
        engine.audit(
            AuditAction.VIEWED_PAYLOADS,
            by=login_name(),
            run_id=run_id,
            source=cli_source(),
            detail={"via": "replay", "mode": mode},
        )
    finally:
        engine.close()
    if as_json:
        click.echo(dumps(report.to_json()))
    else:
        say(report.render())
    if mode == "recorded" and report.divergence is not None:
        sys.exit(DIVERGED)


@click.group("sandbox", cls=Group)
def sandbox() -> None:
    """The sandbox where replays and evaluations run."""


@sandbox.command("prune")
@click.option(
    "--older-than",
    default="0s",
    show_default=True,
    help="Delete the replays' runs that ended longer ago than this (e.g. 7d).",
)
def prune(older_than: str) -> None:
    """Delete the sandbox's ended runs; the real runs are not touched."""
    from runner.core.settings import Settings, open_store, resolve
    from runner.evals.sandbox import prepare, store_url
    from store.models import utcnow
    from store.postgres import PostgresStore

    cutoff = utcnow() - parse_duration(older_than)
    store = open_store(resolve(Settings.from_env()))
    try:
        url = prepare(store_url(store))
    finally:
        store.close()
    sandboxed = PostgresStore.from_url(url, pool_size=1)
    try:
        deleted = sandboxed.prune(cutoff)  # the sandbox's ended runs
    finally:
        sandboxed.close()
    say(f"deleted {deleted} replay runs")
