"""``runwright versions`` and ``runwright runs upgrade``: each agent's
versions with their runs and the live workers that run them, and moving the
runs of an old version to another (docs/deploying.md).

The lines are the engine's (runner/core/engine/versioning.py); this module
says them in words, or as :func:`runner.cli.as_json.versions_json` and
:func:`runner.cli.as_json.upgrade_json`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from runner.cli.as_json import Document, json_option, upgrade_json, versions_json
from runner.cli.terminal import inert, say

if TYPE_CHECKING:
    from runner.core.engine.engine import Engine
    from runner.core.engine.versioning import UpgradeReport, VersionLine


def _engine() -> Engine:
    from runner.cli.commands import _engine as engine

    return engine()


@click.command("versions")
@click.option("--agent", default=None, help="Only this agent's versions.")
@json_option
def versions(agent: str | None, as_json: bool) -> Document | None:
    """Show each agent's versions: the current one, the runs on each that have
    not ended (running, queued, parked, waiting) and the live workers that run
    it, so that you know when an old version's workers can stop."""
    engine = _engine()
    try:
        lines = engine.versions(agent)
    finally:
        engine.close()
    if as_json:
        return versions_json(lines)
    if not lines:
        which = f"of agent {agent!r} " if agent else ""
        say(f"no version {which}is recorded: a worker records its agents' versions as it starts")
        return None
    from rich.table import Table
    from rich.text import Text

    from runner.cli.commands import _console

    table = Table(
        "agent", "version", "", "running", "queued", "parked", "waiting", "workers", "its workers"
    )
    for line in lines:
        cells = (
            line.agent,
            line.title,
            "current" if line.current else "",
            str(line.running),
            str(line.queued),
            str(line.parked),
            str(line.waiting),
            ", ".join(line.workers) or "-",
            drain_words(line),
        )
        # Text, not str: names and labels reach the store from worker records.
        table.add_row(*(Text(inert(cell)) for cell in cells))
    _console().print(table)
    return None


def drain_words(line: VersionLine) -> str:
    """Whether the workers of an old version can stop: not while runs are
    running on them, nor while pinned runs wait for them."""
    if line.current:
        return "serve new runs"
    if not line.workers:
        return "none live"
    pinned = line.record is not None and line.record.policy == "pin"
    if line.running:
        return f"keep: {line.running} run(s) running on them"
    if pinned and line.runs:
        return f"keep: {line.runs} pinned run(s) wait for them, or move them (runs upgrade)"
    return "can stop"


@click.command("upgrade")
@click.option("--agent", required=True, help="The agent whose runs to move.")
@click.option(
    "--from", "old", required=True, help="The version they are on: its id, a prefix, or its label."
)
@click.option(
    "--to",
    "new",
    default=None,
    help="The version to move them to (default: the current one, as `runwright versions` marks).",
)
@click.option("--by", default=None, help="Who moves them (default: your login name).")
@json_option
def upgrade(
    agent: str, old: str, new: str | None, by: str | None, as_json: bool
) -> Document | None:
    """Move the runs of an agent's version that are not running (waiting,
    queued, parked for a worker of that version) to another version, each
    with a version event saying what changed. A run waiting on a call of a
    tool the new version no longer has is refused, with the reason."""
    from runner.cli.commands import _operator

    who = _operator(by)
    engine = _engine()
    try:
        report = engine.upgrade_runs(agent, old, new, by=who)
    finally:
        engine.close()
    if as_json:
        return upgrade_json(report)
    for line in upgrade_lines(report, who):
        say(line)
    return None


def upgrade_lines(report: UpgradeReport, by: str) -> list[str]:
    """What ``runs upgrade`` did, in words: the runs moved, those refused
    and why, and what changed between the two versions."""
    lines = [
        f"moved {len(report.moved)} run(s) of {report.agent} from version {report.old} to "
        f"{report.new} as {by}; refused {len(report.refused)}"
    ]
    lines.extend(f"  moved    {run_id}" for run_id in report.moved)
    lines.extend(f"  refused  {run_id}: {why}" for run_id, why in report.refused)
    if report.changes:
        lines.append("what changed")
        lines.extend(f"  {change}" for change in report.changes)
    else:
        lines.append("what changed: nothing of its behaviour")
    return lines
