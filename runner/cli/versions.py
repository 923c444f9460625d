"""How agent versions read in ``runwright versions`` and ``runwright runs
upgrade`` (docs/operations.md, "Agent versions"): whether an old version's
workers can stop, and what an upgrade did. The lines and the report are the
engine's (runner/core/engine/versioning.py); their JSON is
:func:`runner.cli.as_json.versions_json` and :func:`runner.cli.as_json.upgrade_json`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runner.core.engine.versioning import UpgradeReport, VersionLine


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
