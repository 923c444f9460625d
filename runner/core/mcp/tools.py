"""An MCP server's tools as Runwright tools.

Each listed tool becomes a :class:`MCPTool`: named ``<server>_<tool>``
(runner/core/mcp/names.py), described by the server, its arguments checked against
the server's JSON schema before the call, in a bounded time
(runner/core/schemas.py), and, unless the server annotates it
``readOnlyHint`` (or the declaration's ``effects`` says otherwise), an
effect: journaled, run at most once, its idempotency key sent to the server
in the request's ``_meta``. A server is untrusted: a tool whose name cannot be
made valid, whose schema is not one or cannot be checked in a bounded time,
or that is too large to offer is left out with one WARNING, as are those past
the first ``MAX_OFFERED`` of a server; a description and a title are clipped;
a result is a JSON object or text, binary content named, never passed on
(and, like every tool's, cut to ``MAX_RESULT_CHARS`` by
runner/core/steps/toolcalls/results.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pydantic

from runner.core.errors import MCPToolError, ToolInputError
from runner.core.mcp.names import prefixed
from runner.core.mcp.sessions import session
from runner.core.schemas import CHECK_SECONDS, InputSchema, OutOfTime, unsafe
from runner.core.steps.tools import Tool

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from mcp.types import CallToolResult
    from mcp.types import Tool as ListedTool
    from runner.core.mcp.servers import MCPServer
    from runner.core.steps.run_context import RunContext

log = logging.getLogger(__name__)

# The request ``_meta`` key that carries an effect's idempotency key.
IDEMPOTENCY_META = "io.runwright/idempotency-key"
DESCRIPTION_CHARS = 4_000
SCHEMA_CHARS = 64_000
# The most tools one server offers a model (OpenAI's limit for a whole
# request): past it, the rest of the server's listing is left out, with one
# WARNING; ``allow=`` chooses which.
MAX_OFFERED = 128
# The annotations kept of a tool (the protocol's hints and title), the title
# clipped: a server may send any others, and the reviewer sees these.
HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
TITLE_CHARS = 200


class _Arguments(pydantic.BaseModel):
    """The arguments of a call, checked against the server's schema by :meth:`MCPTool.parse`."""

    model_config = pydantic.ConfigDict(extra="allow")


class MCPTool(Tool):
    """One tool of an MCP server, called through this process's pooled session."""

    def __init__(self, server: MCPServer, listed: ListedTool, name: str, *, effect: bool) -> None:
        self.server = server
        self.remote_name = listed.name
        self.input_schema: dict[str, Any] = dict(listed.input_schema)
        self.annotations = _annotations(listed)
        self._checked = InputSchema(self.input_schema)
        description = (listed.description or "").strip() or listed.name
        super().__init__(
            self._call,
            name=name,
            description=description[:DESCRIPTION_CHARS],
            params=_Arguments,
            effect=effect,
        )
        self.mcp_server = server.name
        # What the model is offered of it, in short: a listing that changes it
        # is told apart from one that does not (runner/core/mcp/listing.py).
        offered = {"schema": self.schema(), "effect": effect}
        encoded = json.dumps(offered, sort_keys=True, default=str).encode()
        self.digest = hashlib.sha256(encoded).hexdigest()[:16]

    def about(self) -> dict[str, Any]:
        found: dict[str, Any] = {"mcp_server": self.server.name, "description": self.description}
        if self.annotations:
            found["annotations"] = self.annotations
        return found

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }

    def parse(self, arguments: str | dict[str, Any] | None) -> pydantic.BaseModel:
        import regex
        from referencing.exceptions import Unresolvable

        parsed = super().parse(arguments)
        data = parsed.model_dump()
        try:
            errors = self._checked.errors(data)
        except Unresolvable:  # a $ref outside the schema: nothing is fetched to check it
            raise ToolInputError(
                f"the arguments of {self.name} cannot be checked: its schema refers outside itself"
            ) from None
        except OutOfTime:
            raise ToolInputError(
                f"the arguments of {self.name} could not be checked against its schema within "
                f"{CHECK_SECONDS * 1000:.0f} ms, so the call was not made"
            ) from None
        except regex.error:
            raise ToolInputError(
                f"the arguments of {self.name} cannot be checked: a pattern of its schema "
                "does not compile"
            ) from None
        if errors:
            first = errors[0]
            where = "/".join(str(p) for p in first.path) or "the arguments"
            raise ToolInputError(f"invalid arguments for {self.name}: {where}: {first.message}")
        return parsed

    async def invoke(
        self,
        args: pydantic.BaseModel,
        ctx: RunContext,
        *,
        idempotency_key: str | None = None,
        executor: Executor | None = None,
    ) -> Any:
        return await self._call(args.model_dump(), idempotency_key)

    async def _call(self, arguments: dict[str, Any], idempotency_key: str | None) -> Any:
        meta = {IDEMPOTENCY_META: idempotency_key} if idempotency_key else None
        pooled = session(self.server)
        # A call with no effects is made again on a new session if its session
        # broke; an effect's is not: the server may have run it.
        result = await pooled.call_tool(self.remote_name, arguments, meta, again=not self.effect)
        try:
            return result_value(result)
        except MCPToolError as refused:  # the server's words: its credentials out of them
            raise MCPToolError(pooled.scrub(refused.message)) from None


def _annotations(listed: ListedTool) -> dict[str, Any] | None:
    """The tool's protocol annotations: its hints that are booleans, and its
    title as text of at most ``TITLE_CHARS``; None if it has none of them."""
    if listed.annotations is None:
        return None
    given = listed.annotations.model_dump(by_alias=True, exclude_none=True)
    kept: dict[str, Any] = {}
    title = given.get("title")
    if isinstance(title, str) and title.strip():
        kept["title"] = title.strip()[:TITLE_CHARS]
    kept.update((hint, given[hint]) for hint in HINTS if isinstance(given.get(hint), bool))
    return kept or None


def result_value(result: CallToolResult) -> Any:
    """What the model is given of a call's result: the structured content if
    the server sent an object, else its content as text; a server's error
    raises :class:`MCPToolError` with its text."""
    if result.is_error:
        raise MCPToolError(_text(result.content) or "the tool reported an error")
    structured = result.structured_content
    if isinstance(structured, dict):
        return structured
    return _text(result.content)


def _text(content: Iterable[Any]) -> str:
    parts = []
    for item in content:
        kind = getattr(item, "type", None)
        if kind == "text" and isinstance(getattr(item, "text", None), str):
            parts.append(item.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} content, {getattr(item, 'mime_type', 'unknown type')}]")
        elif kind == "resource_link":
            parts.append(f"[resource {getattr(item, 'uri', '')}]")
        elif kind == "resource":
            resource = getattr(item, "resource", None)
            text = getattr(resource, "text", None)
            parts.append(text if isinstance(text, str) else "[binary resource]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    return "\n".join(parts)


def build_tools(server: MCPServer, listed: Iterable[ListedTool]) -> list[MCPTool]:
    """The agent's tools of ``server`` from its listing: those the declaration
    offers, under valid and distinct names; each left out is named once in a
    WARNING."""
    from jsonschema import Draft202012Validator, SchemaError

    made: dict[str, MCPTool] = {}
    over = 0
    for item in listed:
        if not server.offers(item.name):
            continue
        if len(made) >= MAX_OFFERED:
            over += 1
            continue
        name = prefixed(server.name, item.name)
        why = None
        if name is None:
            why = "its name is not a valid function name"
        elif name in made:
            why = f"it collides with another tool named {name!r}"
        elif len(json.dumps(item.input_schema, default=str)) > SCHEMA_CHARS:
            why = f"its input schema is over {SCHEMA_CHARS} characters"
        else:
            try:
                Draft202012Validator.check_schema(item.input_schema)
            except SchemaError as exc:
                why = f"its input schema is not valid ({exc.message[:200]})"
            except RecursionError:
                why = "its input schema is nested too deeply"
            else:
                hazard = unsafe(item.input_schema)
                if hazard is not None:
                    why = f"its input schema cannot be checked in a bounded time: {hazard}"
        if why is not None or name is None:
            log.warning("MCP server %r: tool %.80r left out: %s", server.name, item.name, why)
            continue
        read_only = bool(item.annotations is not None and item.annotations.read_only_hint)
        effect = server.effects.get(item.name, not read_only)
        made[name] = MCPTool(server, item, name, effect=effect)
    if over:
        log.warning(
            "MCP server %r offers more than %d tools: %d left out; choose with allow=[...]",
            server.name,
            MAX_OFFERED,
            over,
        )
    return list(made.values())


async def server_tools(server: MCPServer) -> list[MCPTool]:
    """The agent's tools of ``server``, listed over this process's session."""
    return build_tools(server, await session(server).list_tools())
