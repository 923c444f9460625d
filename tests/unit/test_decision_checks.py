"""What a person's edited arguments and answers are checked against
(runner/core/approvals/decisions.py): the request's own JSON Schema, with the
standard's library, and JSON the store can hold; every refusal is one
``InvalidApprovalInput`` naming where."""

from __future__ import annotations

from typing import Any

import pytest

from runner.core.approvals.decisions import check_value, fits
from runner.core.errors import InvalidApprovalInput

SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "integer", "minimum": 1, "maximum": 1000},
        "to": {"$ref": "#/$defs/account"},
    },
    "required": ["amount"],
    "additionalProperties": False,
    "$defs": {"account": {"type": "string", "pattern": "^acct_[0-9]+$"}},
}


def test_an_edit_that_fits_passes_and_one_that_does_not_says_where() -> None:
    fits(SCHEMA, {"amount": 5, "to": "acct_7"}, "the edit")
    with pytest.raises(InvalidApprovalInput, match="refused the edit: at to, 'me' does not match"):
        fits(SCHEMA, {"amount": 5, "to": "me"}, "the edit")
    with pytest.raises(InvalidApprovalInput, match="at amount, 0 is less than the minimum of 1"):
        fits(SCHEMA, {"amount": 0}, "the edit")


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"$ref": "http://169.254.169.254/latest"}, "refers outside the schema"),
        ({"$ref": "file:///etc/passwd"}, "refers outside the schema"),
        ({"type": "no-such-type"}, "its schema is not valid"),
    ],
)
def test_a_schema_that_points_away_or_is_broken_refuses_rather_than_fetches(
    schema: dict[str, Any], match: str
) -> None:
    with pytest.raises(InvalidApprovalInput, match=match):
        fits(schema, {"amount": 1}, "the edit")


def test_a_request_without_a_schema_is_checked_by_its_tool_when_it_runs() -> None:
    fits(None, {"anything": True}, "the edit")  # stored before 0014: nothing to check here


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"x": float("nan")}, "not JSON"),
        ({"x": b"bytes"}, "not JSON"),
        ({"x": "a\x00b"}, "a NUL character"),
        ({"x\x00": 1}, "a NUL character"),
        ({"x": "\ud800"}, "a lone surrogate"),
        ({"x": "y" * 70_000}, "over 64000 characters"),
        (deep(100_000), "not JSON"),
    ],
)
def test_a_value_the_store_cannot_hold_is_refused(value: Any, match: str) -> None:
    with pytest.raises(InvalidApprovalInput, match=match):
        check_value(value, "the answer")


def test_a_value_is_kept_as_json_reads_it_back() -> None:
    assert check_value({"n": 1, "t": (1, 2)}, "the answer") == {"n": 1, "t": [1, 2]}
