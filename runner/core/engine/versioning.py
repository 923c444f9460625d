"""Agent versions as operators drain and move them (docs/deploying.md): the
versions a process loaded, the runs of each, and moving the waiting runs of
one version to another (``runwright versions``, ``runwright runs upgrade``).

What an execution does on another version than its run's is the execution's
(runner/core/engine/execution.py, ``_on_version``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.core import versions
from runner.core.engine.deps import Deps
from runner.core.errors import InvalidInput
from store.models import RequestKind, RunStatus
from store.pg.versions import VersionCount, VersionRecord
from store.workers import WorkerInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VersionLine:
    """One version of one agent: its record (None for runs on a version no
    process recorded), its runs not ended, and the live workers that run it."""

    agent: str
    version: str | None
    record: VersionRecord | None
    running: int = 0
    queued: int = 0
    parked: int = 0
    waiting: int = 0
    workers: tuple[str, ...] = ()
    # The version the agent's live workers run, or that was loaded last.
    current: bool = False

    @property
    def runs(self) -> int:
        return self.running + self.queued + self.parked + self.waiting

    @property
    def title(self) -> str:
        if self.record is not None:
            return self.record.title
        return self.version or "(no version yet)"


@dataclass
class UpgradeReport:
    """What ``runs upgrade`` did: the runs moved, and those refused, each with why."""

    agent: str
    old: str
    new: str
    moved: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)


def loaded(deps: Deps) -> int:
    """This process loaded its agents (a worker starting): record their
    versions, and send each pinned run waiting for one of them to that
    version's queue. How many runs it sent."""
    registry = deps.registry
    found = [registry.get(name).current_version() for name in registry.names()]
    if not found:
        return 0
    deps.store.note_versions([versions.version_row(version) for version in found])
    pinned = {
        versions.waiting_key(version.agent, version.id): version
        for version in found
        if version.policy == "pin"
    }
    woken = deps.store.wake_versions(list(pinned))
    for run_id, key in woken:
        queue = versions.queue_for(deps.settings.queue, pinned[key].id)
        deps.send([run_id], queue=queue)
    if woken:
        log.info("sent %d pinned run(s) waiting for this worker's versions", len(woken))
    return len(woken)


def lines(
    deps: Deps, workers: Mapping[str, WorkerInfo] | None, agent: str | None = None
) -> list[VersionLine]:
    """Each agent's versions with their runs and workers: every version with
    runs not ended or a live worker, and the latest loaded."""
    records = deps.store.agent_versions(agent)
    by_key = {(r.agent, r.version): r for r in records}
    counts: dict[tuple[str, str | None], VersionCount] = {
        (c.agent, c.version): c for c in deps.store.version_counts(agent)
    }
    serving: dict[tuple[str, str], list[str]] = {}
    for name, worker in (workers or {}).items():
        for loaded_agent, loaded in (worker.agent_versions or {}).items():
            if agent is None or loaded_agent == agent:
                serving.setdefault((loaded_agent, loaded), []).append(name)
    keys: set[tuple[str, str | None]] = set(counts) | set(serving)
    latest: dict[str, str] = {}
    for record in records:  # the latest loaded first, by agent
        latest.setdefault(record.agent, record.version)
    keys |= set(latest.items())
    current = _current(serving, latest)
    found = []
    for key in keys:
        agent_name, version = key
        count = counts.get(key)
        found.append(
            VersionLine(
                agent=agent_name,
                version=version,
                record=by_key.get((agent_name, version)) if version is not None else None,
                running=count.running if count else 0,
                queued=count.queued if count else 0,
                parked=count.parked if count else 0,
                waiting=count.waiting if count else 0,
                workers=tuple(sorted(serving.get((agent_name, version), []) if version else [])),
                current=version is not None and current.get(agent_name) == version,
            )
        )
    order = {record.version: i for i, record in enumerate(records)}
    found.sort(key=lambda line: (line.agent, order.get(line.version or "", len(order))))
    return found


def _current(
    serving: Mapping[tuple[str, str], list[str]], latest: Mapping[str, str]
) -> dict[str, str]:
    """Each agent's current version: the one most of its live workers run,
    else the one loaded last."""
    by_agent: dict[str, tuple[int, str]] = {}
    for (agent, version), names in serving.items():
        best = by_agent.get(agent)
        if best is None or len(names) > best[0]:
            by_agent[agent] = (len(names), version)
    current = {agent: version for agent, (_, version) in by_agent.items()}
    for agent, version in latest.items():
        current.setdefault(agent, version)
    return current


def resolve(deps: Deps, agent: str, given: str) -> VersionRecord:
    """The version of ``agent`` an operator named: its id, a prefix of it, or
    its label. One clear error if none or several match."""
    if not isinstance(given, str) or not given.strip():
        raise InvalidInput("name a version: its id, a prefix of it, or its label")
    records = deps.store.agent_versions(agent)
    exact = [r for r in records if given in (r.version, r.label)]
    if len(exact) == 1:
        return exact[0]
    found = exact or [r for r in records if r.version.startswith(given)]
    if len(found) == 1:
        return found[0]
    known = ", ".join(r.title for r in records) or "none recorded"
    if not found:
        raise InvalidInput(f"agent {agent!r} has no version {given!r} (known: {known})")
    raise InvalidInput(
        f"{given!r} names {len(found)} versions of {agent!r} ({known}); give more of its id"
    )


def current(deps: Deps, workers: Mapping[str, WorkerInfo] | None, agent: str) -> VersionRecord:
    """The version of ``agent`` runs move to by default: this process's own,
    if it loaded the agent; else the one most of the live workers run; else
    the one loaded last."""
    if agent in deps.registry.names():
        mine = deps.registry.get(agent).current_version()
        deps.note_version(mine)
        record = deps.store.agent_version(agent, mine.id)
        assert record is not None
        return record
    for line in lines(deps, workers, agent):
        if line.current and line.record is not None:
            return line.record
    raise InvalidInput(f"no version of agent {agent!r} is recorded: has a worker loaded it?")


def upgrade(
    deps: Deps,
    workers: Mapping[str, WorkerInfo] | None,
    agent: str,
    old: str,
    new: str | None = None,
    *,
    by: str | None = None,
) -> UpgradeReport:
    """Move the runs of ``agent`` on version ``old`` that are not running
    (waiting, queued, parked for a worker of ``old``) to ``new`` (default:
    the current version), one version event each. A run whose waiting call's
    tool is gone in ``new`` is refused, with the reason, and left as it is."""
    source = resolve(deps, agent, old)
    target = resolve(deps, agent, new) if new is not None else current(deps, workers, agent)
    if source.version == target.version:
        raise InvalidInput(f"version {source.title} of {agent!r} is the version to move to")
    changes = versions.diff(source.definition, target.definition)
    report = UpgradeReport(agent, source.version, target.version, changes=changes)
    tools = target.definition.get("tools")
    servers = [server.get("name") for server in target.definition.get("mcp") or ()]
    for run in deps.store.movable_runs(agent, source.version):
        why = _stays(deps, run.id, run.status, tools, servers)
        if why is not None:
            report.refused.append((run.id, why))
            continue
        change: dict[str, Any] = {"changes": changes}
        if by:
            change["by"] = by
        moved = deps.store.move_run(run.id, source.version, target.version, change)
        if moved is None:
            report.refused.append((run.id, "it moved on meanwhile (it is running or ended)"))
            continue
        report.moved.append(run.id)
        if moved.status is RunStatus.QUEUED and run.parked_key != moved.parked_key:
            deps.send([run.id], priority=moved.priority)  # no longer waits for a worker of old
    return report


def _stays(
    deps: Deps, run_id: str, status: RunStatus, tools: Any, servers: list[Any]
) -> str | None:
    """Why a waiting run cannot move: a call it waits on names a tool the
    new version does not have. None if it can. (Tools made by a function,
    and an MCP server's, are known only when a run builds or lists them.)"""
    if status is not RunStatus.WAITING or not isinstance(tools, dict):
        return None
    for approval in deps.store.approvals(run_id):
        if not approval.pending or approval.kind is not RequestKind.APPROVAL:
            continue
        listed = any(approval.tool_name.startswith(f"{server}_") for server in servers)
        if approval.tool_name not in tools and not listed:
            return (
                f"it waits on a call of {approval.tool_name}, which the new version no longer "
                "has; decide it (deny it, or fail the run) first"
            )
    return None
