"""Declaring an MCP server an agent takes tools from (``Agent(mcp=[...])``).

A server has a name, which prefixes its tools' names as the model sees them
(``github_create_issue``: runner/core/mcp/names.py), and a transport: a command run
over stdio, or a streamable-HTTP URL. Credentials (an environment for the
command, headers for the URL) may be callables, asked when a session
connects, so that they never sit in the agent's definition, a checkpoint, a
task's arguments, an event, a log line or a span: only their names do.
Credentials are checked when the server is declared and each time a callable
gives them (:meth:`MCPServer.resolve`): a header's value that holds a control
character (a token read from a file with its newline) is refused with one
clear error that names the header, never the value, before any library puts
the value in a message of its own.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from runner.core.errors import ConfigurationError, MCPCredentialsInvalid, ToolDefinitionError

# Values, or a callable asked each time a session connects (a secret store,
# a token refresher).
Secrets = Mapping[str, str] | Callable[[], Mapping[str, str]]

# A server's name: it starts every tool name the model sees, so it keeps to
# what every provider takes in a function name, with room for the tool's.
SERVER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,23}")

# A header's name: a token of HTTP (RFC 9110, section 5.6.2).
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")

CONNECT_SECONDS = 10.0
LIST_SECONDS = 10.0
CALL_SECONDS = 60.0
# How long a worker reuses a server's listing (a tools/list_changed
# notification from the server ends it sooner).
LIST_CACHE_SECONDS = 60.0


@dataclass(frozen=True, eq=False)  # by identity: one pooled session per declaration
class MCPServer:
    """One MCP server. Make one with :meth:`stdio` or :meth:`http`."""

    name: str
    transport: Literal["stdio", "http"]
    # stdio: the command and its arguments, environment and directory.
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Secrets | None = field(default=None, repr=False)
    cwd: str | None = None
    # http: the endpoint and the headers of every request.
    url: str | None = None
    headers: Secrets | None = field(default=None, repr=False)
    # Which of its tools the agent gets: only ``allow`` (when given), never ``block``;
    # by the server's own names.
    allow: frozenset[str] | None = None
    block: frozenset[str] = frozenset()
    # Whether a tool is an effect, by the server's name for it, where the
    # server's annotation is not to be taken: a tool annotated ``readOnlyHint``
    # is a plain tool, every other one an effect (runner/core/mcp/tools.py).
    effects: Mapping[str, bool] = field(default_factory=dict)
    connect_seconds: float = CONNECT_SECONDS
    list_seconds: float = LIST_SECONDS
    call_seconds: float = CALL_SECONDS
    list_cache_seconds: float = LIST_CACHE_SECONDS

    def __post_init__(self) -> None:
        if importlib.util.find_spec("mcp") is None:
            raise ConfigurationError(
                "MCP servers need the 'mcp' extra: pip install 'runwright[mcp]'"
            )
        if not isinstance(self.name, str) or not SERVER_NAME.fullmatch(self.name):
            raise ToolDefinitionError(
                f"MCP server name {self.name!r} must start with a letter and hold only "
                "letters, digits and '-', at most 24 characters: it prefixes its tools' names"
            )
        for label in ("connect_seconds", "list_seconds", "call_seconds"):
            value = getattr(self, label)
            if not isinstance(value, int | float) or not 0 < value <= 86_400:
                raise ToolDefinitionError(
                    f"MCP server {self.name!r}: {label} must be a number of seconds "
                    "above 0, at most a day"
                )
        cache = self.list_cache_seconds
        if not isinstance(cache, int | float) or not 0 <= cache <= 86_400:
            raise ToolDefinitionError(
                f"MCP server {self.name!r}: list_cache_seconds must be from 0 to a day"
            )
        both = (self.allow or frozenset()) & self.block
        if both:
            raise ToolDefinitionError(
                f"MCP server {self.name!r}: {', '.join(sorted(both))} both allowed and blocked"
            )
        for kind in ("env", "headers"):
            given = getattr(self, kind)
            if given is not None and not callable(given):
                self.resolve(kind)  # checked now; a callable's when a session connects

    @classmethod
    def stdio(
        cls,
        name: str,
        command: str,
        *,
        args: Iterable[str] = (),
        env: Secrets | None = None,
        cwd: str | None = None,
        allow: Iterable[str] | None = None,
        block: Iterable[str] = (),
        effects: Mapping[str, bool] | None = None,
        connect_seconds: float = CONNECT_SECONDS,
        list_seconds: float = LIST_SECONDS,
        call_seconds: float = CALL_SECONDS,
        list_cache_seconds: float = LIST_CACHE_SECONDS,
    ) -> MCPServer:
        """A server this worker starts as a child process and talks to over
        its stdin and stdout (one process per worker process, kept open)."""
        if not isinstance(command, str) or not command:
            raise ToolDefinitionError(f"MCP server {name!r}: command must be a program to run")
        return cls(
            name,
            "stdio",
            command=command,
            args=tuple(args),
            env=env,
            cwd=cwd,
            allow=None if allow is None else frozenset(allow),
            block=frozenset(block),
            effects=dict(effects or {}),
            connect_seconds=connect_seconds,
            list_seconds=list_seconds,
            call_seconds=call_seconds,
            list_cache_seconds=list_cache_seconds,
        )

    @classmethod
    def http(
        cls,
        name: str,
        url: str,
        *,
        headers: Secrets | None = None,
        allow: Iterable[str] | None = None,
        block: Iterable[str] = (),
        effects: Mapping[str, bool] | None = None,
        connect_seconds: float = CONNECT_SECONDS,
        list_seconds: float = LIST_SECONDS,
        call_seconds: float = CALL_SECONDS,
        list_cache_seconds: float = LIST_CACHE_SECONDS,
    ) -> MCPServer:
        """A server reached over streamable HTTP at ``url``."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ToolDefinitionError(f"MCP server {name!r}: url must be an http(s) URL")
        return cls(
            name,
            "http",
            url=url,
            headers=headers,
            allow=None if allow is None else frozenset(allow),
            block=frozenset(block),
            effects=dict(effects or {}),
            connect_seconds=connect_seconds,
            list_seconds=list_seconds,
            call_seconds=call_seconds,
            list_cache_seconds=list_cache_seconds,
        )

    def offers(self, tool: str) -> bool:
        """Whether the agent gets the server's tool ``tool``."""
        if tool in self.block:
            return False
        return self.allow is None or tool in self.allow

    def resolve(self, kind: Literal["env", "headers"]) -> dict[str, str]:
        """``env`` or ``headers`` as they are now (a callable is asked), each
        checked: :class:`MCPCredentialsInvalid` names the first that cannot be
        sent, never its value."""
        secrets: Secrets | None = getattr(self, kind)
        if secrets is None:
            return {}
        values = secrets() if callable(secrets) else secrets
        if not isinstance(values, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in values.items()
        ):
            raise MCPCredentialsInvalid(
                f"MCP server {self.name!r}: its {kind} must be a mapping of text to text"
            )
        check = _header_refused if kind == "headers" else _variable_refused
        for key, value in values.items():
            why = check(key, value)
            if why is not None:
                raise MCPCredentialsInvalid(f"MCP server {self.name!r}: {why}")
        return dict(values)


def _header_refused(name: str, value: str) -> str | None:
    """Why header ``name`` cannot be sent with ``value`` (which it never names)."""
    if not HEADER_NAME.fullmatch(name):
        return f"{name!r} is not a valid HTTP header name"
    where = f"the value of header {name!r}"
    if value != value.strip():
        return (
            f"{where} begins or ends with whitespace (a token read from a file keeps "
            "its newline: strip it)"
        )
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return f"{where} holds a control character"
    if not value.isascii():
        return f"{where} holds a character that is not ASCII"
    return None


def _variable_refused(name: str, value: str) -> str | None:
    """Why environment variable ``name`` cannot be set to ``value`` (never named)."""
    if not name or "=" in name or "\0" in name:
        return f"{name!r} is not a valid name of an environment variable"
    if "\0" in value:
        return f"the value of environment variable {name!r} holds a NUL character"
    return None
