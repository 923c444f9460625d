"""An MCP server's input schemas and credentials, as Runwright takes them
(runner/core/schemas.py, servers.py; issue 48): a schema's patterns are
matched under one deadline for the whole check of a call, a schema that
could take the check past it is left out when listed, and a credential that
cannot be sent is one clear error naming it, never its value."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from mcp.types import Tool as Listed

from runner.core.errors import ConfigurationError, ToolInputError
from runner.core.mcp import MCPServer
from runner.core.mcp.tools import build_tools
from runner.core.schemas import CHECK_SECONDS
from tests.helpers import regex_timeouts

SERVER = MCPServer.stdio("gh", "true")
SLOW = r"^(a|a)*$"  # backtracks for ever, with re and with regex
CRAFTED = "a" * 24 + "!"


def tool(schema: dict[str, Any]) -> Any:
    [made] = build_tools(SERVER, [Listed(name="t", input_schema=schema)])
    return made


def test_one_deadline_bounds_the_check_of_a_call_across_all_its_patterns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Twenty patterns that each take seconds on their argument: the check
    gives up within one deadline, not twenty, and the model is told so."""
    timeouts = regex_timeouts(monkeypatch)
    names = [f"p{k}" for k in range(20)]
    made = tool(
        {
            "type": "object",
            "properties": {n: {"type": "string", "pattern": SLOW} for n in names},
        }
    )
    with pytest.raises(ToolInputError, match="could not be checked against its schema within"):
        made.parse(dict.fromkeys(names, CRAFTED))
    # The first search ran out of the check's time, and the check ended there.
    assert len(timeouts) == 1, timeouts
    assert timeouts[0] is not None and 0 < timeouts[0] <= CHECK_SECONDS


@pytest.mark.parametrize(
    ("schema", "good", "bad", "said"),
    [
        (
            {"type": "object", "properties": {"q": {"type": "string", "pattern": "^[a-z]+$"}}},
            {"q": "abc"},
            {"q": "ABC"},
            "q: 'ABC' does not match '^[a-z]+$'",
        ),
        (
            {
                "type": "object",
                "patternProperties": {"^n_": {"type": "integer"}},
                "additionalProperties": False,
            },
            {"n_a": 1},
            {"n_a": 1, "other": 2},
            "'other' does not match any of the regexes: '^n_'",
        ),
        (
            {"type": "object", "properties": {"a": {}}, "additionalProperties": False},
            {"a": 1},
            {"a": 1, "b": 2, "c": 3},
            "Additional properties are not allowed ('b', 'c' were unexpected)",
        ),
        (
            {"type": "object", "patternProperties": {"^n_": {"type": "integer"}}},
            {"n_a": 1, "x": "y"},
            {"n_a": "one"},
            "n_a: 'one' is not of type 'integer'",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {}},
                "patternProperties": {"^n_": {}},
                "additionalProperties": {"type": "string"},
            },
            {"a": 1, "n_b": 2, "c": "d"},
            {"c": 3},
            "c: 3 is not of type 'string'",
        ),
        (
            {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}},
            {"abc": 1},
            {"ABC": 1},
            "'ABC' does not match '^[a-z]+$'",
        ),
    ],
    ids=[
        "pattern",
        "additionalProperties beside patterns",
        "additionalProperties",
        "patternProperties",
        "extras",
        "propertyNames",
    ],
)
def test_the_pattern_keywords_check_as_the_standard_says(
    schema: dict[str, Any], good: dict[str, Any], bad: dict[str, Any], said: str
) -> None:
    made = tool(schema)
    assert made.parse(good).model_dump() == good
    with pytest.raises(ToolInputError) as refused:
        made.parse(bad)
    assert said in str(refused.value)


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (
            {
                "type": "object",
                "properties": {
                    "q": {
                        "$schema": "http://json-schema.org/draft-07/schema#",
                        "pattern": SLOW,
                    }
                },
            },
            "declares $schema below its root",
        ),
        (
            {"type": "object", "properties": {"q": {"$id": "https://x.test/q", "pattern": SLOW}}},
            "declares $id below its root",
        ),
        (
            {
                "type": "object",
                "properties": {"q": {"$ref": "https://json-schema.org/draft/2020-12/schema"}},
            },
            "refers outside the schema",
        ),
        (
            {
                "type": "object",
                "patternProperties": {SLOW: {}},
                "unevaluatedProperties": False,
            },
            "unevaluatedProperties beside patternProperties",
        ),
    ],
    ids=["nested $schema", "nested $id", "$ref out", "unevaluatedProperties"],
)
def test_a_schema_that_could_take_the_check_past_its_deadline_is_left_out(
    schema: dict[str, Any], why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="runner.core.mcp"):
        made = build_tools(SERVER, [Listed(name="t", input_schema=schema)])
    assert made == []
    [line] = [r.getMessage() for r in caplog.records]
    assert "cannot be checked in a bounded time" in line and why in line, line


def test_a_root_schema_of_another_draft_is_checked_all_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A root ``$schema`` (the TypeScript SDK writes draft-07's) and local
    references are fine: checked as Draft 2020-12, under the deadline."""
    made = tool(
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"q": {"$ref": "#/$defs/word"}},
            "$defs": {"word": {"type": "string", "pattern": SLOW}},
        }
    )
    assert made.parse({"q": "aaa"}).model_dump() == {"q": "aaa"}
    timeouts = regex_timeouts(monkeypatch)
    with pytest.raises(ToolInputError, match="could not be checked"):
        made.parse({"q": CRAFTED})
    # Matched by the bounded check, under its deadline, not by another draft's validator.
    assert len(timeouts) == 1, timeouts
    assert timeouts[0] is not None and 0 < timeouts[0] <= CHECK_SECONDS


@pytest.mark.parametrize(
    ("declare", "named"),
    [
        (lambda v: MCPServer.http("t", "http://x.test", headers={"X-Token": v + "\n"}), "X-Token"),
        (lambda v: MCPServer.http("t", "http://x.test", headers={"X-Token": " " + v}), "X-Token"),
        (
            lambda v: MCPServer.http("t", "http://x.test", headers={"X-Token": v + "\x00a"}),
            "X-Token",
        ),
        (lambda v: MCPServer.http("t", "http://x.test", headers={"X-Token": v + "é"}), "X-Token"),
        (lambda v: MCPServer.http("t", "http://x.test", headers={"X Token": v}), "X Token"),
        (lambda v: MCPServer.stdio("t", "x", env={"TOKEN": v + "\x00"}), "TOKEN"),
        (lambda v: MCPServer.stdio("t", "x", env={"A=B": v}), "A=B"),
    ],
    ids=["newline", "leading space", "NUL", "not ASCII", "header name", "env NUL", "env name"],
)
def test_a_credential_that_cannot_be_sent_is_one_clear_error_naming_it_not_its_value(
    declare: Any, named: str
) -> None:
    secret = "s3cr3t-6f1d2e9a"
    with pytest.raises(ConfigurationError) as refused:
        declare(secret)
    assert repr(named) in str(refused.value)
    assert secret not in str(refused.value)


def test_a_persons_edit_against_a_backtracking_pattern_is_refused_in_bounded_time() -> None:
    # A person's edited arguments are checked against the tool's schema, which
    # an MCP server may have written: the same bounded check as the model's.
    from runner.core.approvals.decisions import fits
    from runner.core.errors import InvalidApprovalInput

    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": SLOW}}}
    with pytest.raises(InvalidApprovalInput, match="took too long to check"):
        fits(schema, {"code": CRAFTED}, "the edited arguments")
    fits(schema, {"code": "aaa"}, "the edited arguments")  # a value that fits, fits
    with pytest.raises(InvalidApprovalInput, match="does not match"):
        fits(schema, {"code": "b"}, "the edited arguments")
    nested = {
        "type": "object",
        "properties": {"x": {"$schema": "https://json-schema.org/draft/2019-09/schema"}},
    }
    with pytest.raises(InvalidApprovalInput, match="cannot be checked"):
        fits(nested, {"x": 1}, "the edited arguments")
