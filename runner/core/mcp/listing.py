"""The MCP tools a run's model was offered, as the run's record keeps them.

The step that first offers a run's MCP tools records them with its model
call (the ``llm`` step's ``input``: ``{"mcp_tools": {name: {server,
digest}}}``), and so does the first step after the list changed, with what
changed (``mcp_tools_changed``: added, removed and changed names). A
later execution (a takeover, a retry, a fork) then reads the last record
(``PostgresStore.mcp_listing``) and records again only if the servers' tools
are not what the model was last offered; the step's event carries the change
to the event feed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from runner.core.steps.tools import Tool

log = logging.getLogger(__name__)
Listing = dict[str, dict[str, str]]


def listing(tools: Iterable[Tool]) -> Listing:
    """The MCP tools among ``tools``, by the model's name for them."""
    found: Listing = {}
    for tool in tools:
        digest = getattr(tool, "digest", None)
        if tool.mcp_server is not None and isinstance(digest, str):
            found[tool.name] = {"server": tool.mcp_server, "digest": digest}
    return found


def record(offered: Listing, last: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What the step records of ``offered``: None if the model was last
    offered the same (``last``: the run's last record, None if none)."""
    if last is not None and dict(last) == offered:
        return None
    entry: dict[str, Any] = {"mcp_tools": offered}
    if last is not None:
        entry["mcp_tools_changed"] = {
            "added": sorted(set(offered) - set(last)),
            "removed": sorted(set(last) - set(offered)),
            "changed": sorted(
                name for name in set(offered) & set(last) if last[name] != offered[name]
            ),
        }
    return entry


def announce(run_id: str, entry: Mapping[str, Any] | None) -> None:
    """One INFO line when the run's MCP tools changed since its model last saw them."""
    changed = (entry or {}).get("mcp_tools_changed") or {}
    said = "; ".join(f"{what} {', '.join(names)}" for what, names in changed.items() if names)
    if said:
        log.info("run %s: its MCP tools changed since its model last saw them: %s", run_id, said)
