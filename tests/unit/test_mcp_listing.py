"""What an agent is offered of an MCP server's listing (runner/core/mcp/tools.py,
names.py): prefixed names within what every provider takes, plain tools for
read-only ones and effects for the rest (or as the declaration says), and a
hostile listing's tools left out one by one, never the run."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from mcp.types import Tool as Listed

from runner.core.errors import MCPToolError, ToolInputError
from runner.core.mcp import MCPServer
from runner.core.mcp.names import prefixed
from runner.core.mcp.tools import DESCRIPTION_CHARS, build_tools, result_value

SCHEMA: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}}}


def listed(name: str, schema: dict[str, Any] | None = None, **fields: Any) -> Listed:
    return Listed(name=name, input_schema=schema or SCHEMA, **fields)


SERVER = MCPServer.stdio("gh", "true", effects={"search": True, "lookup_cached": False})


def test_names_are_prefixed_and_kept_to_function_names() -> None:
    assert prefixed("gh", "create_issue") == "gh_create_issue"
    assert prefixed("gh", "has space") is None
    assert prefixed("gh", "x" * 62) is None  # 65 characters
    assert prefixed("gh", "x" * 61) == "gh_" + "x" * 61
    assert prefixed("gh", "créer") is None


def test_read_only_tools_are_plain_and_every_other_is_an_effect_unless_declared() -> None:
    made = build_tools(
        SERVER,
        [
            listed("lookup", annotations=ToolAnnotations(readOnlyHint=True)),
            listed("create_issue"),
            listed("search"),  # declared an effect though read-only
            listed("lookup_cached"),  # declared plain though not annotated
        ],
    )
    effects = {t.name: t.effect for t in made}
    assert effects == {
        "gh_lookup": False,
        "gh_create_issue": True,
        "gh_search": True,
        "gh_lookup_cached": False,
    }
    assert made[0].schema()["function"]["parameters"] == SCHEMA


def test_a_hostile_listing_loses_only_its_bad_tools(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="runner.core.mcp"):
        made = build_tools(
            SERVER,
            [
                listed("fine", description="<script>alert(1)</script>" + "d" * 10_000),
                listed("bad name"),
                listed("bad_schema", {"type": "object", "properties": {"q": {"type": 5}}}),
                listed("huge_schema", {"type": "object", "description": "s" * 70_000}),
                listed("fine"),  # twice
            ],
        )
    assert [t.name for t in made] == ["gh_fine"]
    # A description is text the model reads, clipped; markup is not interpreted here.
    assert len(made[0].description) == DESCRIPTION_CHARS
    assert made[0].description.startswith("<script>")
    left_out = [r.getMessage() for r in caplog.records]
    assert len(left_out) == 4
    assert any("'bad name'" in line and "not a valid function name" in line for line in left_out)
    assert any("input schema is not valid" in line for line in left_out)
    assert any("input schema is over" in line for line in left_out)
    assert any("collides" in line for line in left_out)


def test_arguments_are_checked_against_the_servers_schema() -> None:
    [tool] = build_tools(SERVER, [listed("lookup", {**SCHEMA, "required": ["q"]})])
    assert tool.parse('{"q": "x"}').model_dump() == {"q": "x"}
    with pytest.raises(ToolInputError, match="'q' is a required property"):
        tool.parse("{}")
    with pytest.raises(ToolInputError, match="q: 5 is not of type 'string'"):
        tool.parse({"q": 5})
    with pytest.raises(ToolInputError, match="not valid JSON"):
        tool.parse("{nope")


def test_results_are_an_object_or_text_and_binary_is_only_named() -> None:
    text = TextContent(type="text", text="hello")
    image = ImageContent(type="image", data="aGk=", mime_type="image/png")
    assert result_value(CallToolResult(content=[text], structured_content={"b": 1, "a": 2})) == {
        "b": 1,
        "a": 2,
    }
    assert (
        result_value(CallToolResult(content=[text, image])) == "hello\n[image content, image/png]"
    )
    with pytest.raises(MCPToolError, match="hello"):
        result_value(CallToolResult(content=[text], is_error=True))


def test_declaring_a_server_without_the_extra_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    from runner.core.errors import ConfigurationError

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a)
    )
    with pytest.raises(ConfigurationError, match=r"pip install 'runwright\[mcp\]'"):
        MCPServer.stdio("gh", "true")


def test_what_a_reviewer_sees_of_an_mcp_tool_is_text_never_markup() -> None:
    from runner.console.approval_pages import tool_about

    [tool] = build_tools(
        SERVER,
        [
            listed(
                "drop",
                description="<img src=x onerror=alert(1)> Drops a table",
                annotations=ToolAnnotations(destructiveHint=True),
            )
        ],
    )
    about = tool.about()
    assert about["mcp_server"] == "gh" and about["annotations"] == {"destructiveHint": True}
    shown = tool_about(about)
    assert "&lt;img src=x onerror=alert(1)&gt; Drops a table" in shown and "<img" not in shown
    assert "destructiveHint=true" in shown
    assert tool_about(None) == "" and tool_about({"mcp_server": 5}) == ""


def test_a_tools_annotations_keep_the_protocols_hints_and_a_clipped_title() -> None:
    from runner.core.mcp.tools import TITLE_CHARS

    [tool] = build_tools(
        SERVER,
        [
            listed(
                "drop",
                annotations=ToolAnnotations(
                    title="  " + "T" * 5_000, destructiveHint=True, openWorldHint=False
                ),
            )
        ],
    )
    assert tool.annotations == {
        "title": "T" * TITLE_CHARS,
        "destructiveHint": True,
        "openWorldHint": False,
    }
    [bare] = build_tools(SERVER, [listed("bare", annotations=ToolAnnotations(title="  "))])
    assert bare.annotations is None and "annotations" not in bare.about()
