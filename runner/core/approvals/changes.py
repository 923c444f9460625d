"""A tool that changed under a waiting decision (docs/approvals.md): how the
tool of a call waiting for a person differs now from when the call was
requested, as the decision will be applied.

The tool as requested is what its approval recorded: its kind (``tool``,
``effect``, ``child``) and its parameters' JSON Schema. The tool *now* is the
one the run will resume with:

- a run whose agent pins its version (``on_new_version="pin"``) resumes on
  its own version (``runs.version``), as that version recorded it;
- else, if this process registered the agent, its tools as defined here;
- else, the latest version of the agent the store recorded.

Tools made by a function of the run's context, and an MCP server's tools
(named with their server's prefix), are known only when a run builds or
lists them: their calls are never marked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runner.core import versions
from runner.core.agent import Registry
from store.models import Approval, RequestKind, Run
from store.postgres import PostgresStore


@dataclass(frozen=True)
class ToolChange:
    """How a waiting call's tool changed since it was requested."""

    tool: str
    # What changed, one line each, as a person reads them (runner/core/versions.py).
    lines: tuple[str, ...]
    # The tool now ({kind, description, parameters}); None: it no longer exists.
    now: Mapping[str, Any] | None

    @property
    def gone(self) -> bool:
        return self.now is None

    @property
    def schema(self) -> Any:
        """The parameters the call must fit now (None when the tool is gone)."""
        return None if self.now is None else self.now.get("parameters")

    @property
    def summary(self) -> str:
        return "; ".join(self.lines)


def tool_change(store: PostgresStore, registry: Registry, approval: Approval) -> ToolChange | None:
    """How ``approval``'s tool changed, or None (unchanged, or not known)."""
    if approval.kind is not RequestKind.APPROVAL or not approval.pending:
        return None
    run = store.get_run(approval.run_id)
    return _Tools(store, registry).change(run, approval)


def tool_changes(
    store: PostgresStore, registry: Registry, pending: Iterable[tuple[Run, Approval]]
) -> dict[str, ToolChange]:
    """The changes of many waiting calls, by approval id (each agent's
    tools read once)."""
    tools = _Tools(store, registry)
    found: dict[str, ToolChange] = {}
    for run, approval in pending:
        if approval.kind is RequestKind.APPROVAL and approval.pending:
            change = tools.change(run, approval)
            if change is not None:
                found[approval.approval_id] = change
    return found


class _Tools:
    """The definitions decisions are applied with, read once per agent and version."""

    def __init__(self, store: PostgresStore, registry: Registry) -> None:
        self.store = store
        self.registry = registry
        self._current: dict[str, tuple[str, Mapping[str, Any]] | None] = {}
        self._versions: dict[tuple[str, str], Mapping[str, Any] | None] = {}

    def change(self, run: Run, approval: Approval) -> ToolChange | None:
        definition = self._definition(run)
        if definition is None or "tools" not in definition:
            # No version recorded, or tools made by a function of the run: known only to a run.
            return None
        tools = definition.get("tools") or {}
        name = approval.tool_name
        now = tools.get(name)
        if now is None and _from_server(name, definition):
            return None  # an MCP server's tool: listed at run time, not defined
        if now is None:
            lines = versions.tool_changes(name, {}, None)
            lines += [
                f"tool {other} takes the same parameters (renamed?)"
                for other in self._renamed(run, approval, tools)
            ]
            return ToolChange(name, tuple(lines), None)
        lines = versions.tool_changes(name, _requested(approval, now), _compared(now))
        return ToolChange(name, tuple(lines), now) if lines else None

    def _renamed(self, run: Run, approval: Approval, tools: Mapping[str, Any]) -> list[str]:
        """The one tool now, new since the call was requested, that is the
        gone tool by its kind and parameters: a rename, most likely."""
        asked = self._version(run.agent, approval.version) if approval.version else None
        before = (asked or {}).get("tools") or {}
        same = [
            other
            for other, spec in tools.items()
            if other not in before
            and _compared(spec) == {"kind": approval.tool_kind, "parameters": approval.schema}
        ]
        return same if len(same) == 1 else []

    def _definition(self, run: Run) -> Mapping[str, Any] | None:
        current = self._current_of(run.agent)
        if current is None:
            return None
        policy, definition = current
        if policy == "pin" and run.version:
            return self._version(run.agent, run.version)
        return definition

    def _current_of(self, agent: str) -> tuple[str, Mapping[str, Any]] | None:
        if agent not in self._current:
            if agent in self.registry.names():
                spec = self.registry.get(agent)
                found: tuple[str, Mapping[str, Any]] | None = (
                    spec.on_new_version,
                    spec.current_version().definition,
                )
            else:
                records = self.store.agent_versions(agent)
                found = (records[0].policy, records[0].definition) if records else None
            self._current[agent] = found
        return self._current[agent]

    def _version(self, agent: str, version: str) -> Mapping[str, Any] | None:
        key = (agent, version)
        if key not in self._versions:
            record = self.store.agent_version(agent, version)
            self._versions[key] = None if record is None else record.definition
        return self._versions[key]


def _requested(approval: Approval, now: Mapping[str, Any]) -> dict[str, Any]:
    """The tool as its approval recorded it; what it did not record (a
    request made before versions) is taken as unchanged."""
    return {
        "kind": approval.tool_kind or now.get("kind"),
        "parameters": approval.schema
        if isinstance(approval.schema, dict)
        else now.get("parameters"),
    }


def _compared(now: Mapping[str, Any]) -> dict[str, Any]:
    # An approval does not record the description: a changed one is no change of the call.
    return {"kind": now.get("kind"), "parameters": now.get("parameters")}


def _from_server(name: str, definition: Mapping[str, Any]) -> bool:
    servers = definition.get("mcp") or []
    return any(
        isinstance(server, dict) and name.startswith(f"{server.get('name')}_") for server in servers
    )
