"""What an MCP tool is called where the model sees it: its server's name, an
underscore, and the tool's own name (``github_create_issue``), within what
every provider takes for a function name (letters, digits, ``_`` and ``-``,
at most 64 characters). A server's names are untrusted: one that cannot be
made valid, or collides with another once made valid, is left out, never
renamed into something the server did not say."""

from __future__ import annotations

from runner.core.steps.tools import FUNCTION_NAME


def prefixed(server: str, tool: str) -> str | None:
    """The model's name for ``tool`` of ``server``; None if it cannot be one."""
    name = f"{server}_{tool}"
    return name if isinstance(tool, str) and FUNCTION_NAME.fullmatch(name) else None
