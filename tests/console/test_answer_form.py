"""The answer form made from a question's schema (runner/console/answer_form.py):
which input each property gets, when the whole answer is one JSON box, and
how the posted text becomes JSON types. No store: the engine's check of the
answer against the schema is tested with the pages (test_people.py)."""

from __future__ import annotations

from typing import Any, Literal

import pydantic
import pytest

from runner.console.answer_form import AnswerForm, Field, plan, read
from runner.console.forms import MAX_FORM_FIELDS
from runner.core.errors import InvalidApprovalInput
from tests.console.conftest import Parcel, Resolution

TEXT = {"type": "string", "minLength": 1, "maxLength": 20000}


def kinds(form: AnswerForm) -> dict[str, tuple[str, bool, bool]]:
    return {f.name: (f.kind, f.required, f.nullable) for f in form.fields}


def test_a_text_question_gets_a_text_box() -> None:
    assert plan(TEXT) == AnswerForm("text")


def test_an_answer_model_gets_one_input_per_property() -> None:
    made = plan(Resolution.model_json_schema())
    assert made.mode == "fields"
    assert kinds(made) == {
        "action": ("choice", True, False),
        "amount": ("integer", True, False),
        "ratio": ("number", False, False),
        "urgent": ("boolean", False, False),
        "colour": ("choice", False, False),  # its $ref into $defs, followed
        "note": ("text", False, False),
        "courier": ("text", False, True),  # str | None
    }
    by_name = {f.name: f for f in made.fields}
    assert by_name["action"].choices == ("refund", "replace")
    assert (by_name["colour"].choices, by_name["colour"].default) == (("red", "blue"), "red")
    assert (by_name["amount"].minimum, by_name["amount"].maximum) == (0, 1000)
    assert by_name["amount"].description == "in euros"
    assert by_name["amount"].label == "Amount"


def test_an_enum_behind_an_allof_of_one_ref_is_a_choice() -> None:
    # As pydantic before 2.9 wrote a field of an enum with a default.
    schema = {
        "type": "object",
        "properties": {
            "size": {"allOf": [{"$ref": "#/$defs/Size"}], "default": 2, "title": "Parcel size"}
        },
        "$defs": {"Size": {"enum": [1, 2, 3], "title": "Size", "type": "integer"}},
    }
    [size] = plan(schema).fields
    assert (size.kind, size.choices, size.default, size.label) == (
        "choice",
        (1, 2, 3),
        2,
        "Parcel size",
    )
    assert read(plan(schema), {"answer.size": "3"}) == {"size": 3}  # the number, not "3"


class Confirmation(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")

    done: Literal["yes"]


def test_a_literal_of_one_value_is_a_choice_of_one() -> None:
    made = plan(Confirmation.model_json_schema())  # extra keys allowed: the form has none
    assert made.mode == "fields"
    [done] = made.fields
    assert (done.kind, done.choices, done.required) == ("choice", ("yes",), True)


class Loose(pydantic.BaseModel):
    labels: dict[str, str]


@pytest.mark.parametrize(
    ("schema", "wants_object"),
    [
        (Parcel.model_json_schema(), True),  # a list
        (Loose.model_json_schema(), True),  # a mapping
        (
            {
                "type": "object",
                "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
            },
            True,
        ),
        ({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}, True),
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {}},
            True,
        ),
        ({"type": "object"}, True),  # no properties to make inputs of
        ({"type": "array", "items": {"type": "string"}}, False),
        ({"type": "string", "enum": ["a", "b"]}, False),
        (None, False),  # a request stored before schemas were kept
    ],
)
def test_what_no_plain_input_fits_is_one_json_box(schema: Any, wants_object: bool) -> None:
    assert plan(schema) == AnswerForm("json", object=wants_object)


def test_more_properties_than_a_form_may_carry_are_one_json_box() -> None:
    def of(count: int) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {f"p{i}": {"type": "string"} for i in range(count)},
        }

    # The answer's inputs and the form's own four fields within the form's cap.
    most = MAX_FORM_FIELDS - 4
    assert plan(of(most)).mode == "fields"
    assert plan(of(most + 1)) == AnswerForm("json", object=True)


def field(kind: Any, *, required: bool = False, nullable: bool = False) -> AnswerForm:
    return AnswerForm("fields", (Field("x", kind, "X", required=required, nullable=nullable),))


@pytest.mark.parametrize(
    ("kind", "sent", "value"),
    [
        ("integer", "007", 7),
        ("integer", "-12", -12),
        ("integer", "123456789012345678901234567890", 123456789012345678901234567890),
        ("integer", "1e3", 1000),
        ("integer", "4.0", 4),
        ("number", "0.5", 0.5),
        ("number", ".5", 0.5),
        ("number", "-2.5e1", -25.0),
        ("number", "3", 3),
        ("text", "  as typed  ", "  as typed  "),
    ],
)
def test_numbers_and_text_become_their_json_types(kind: Any, sent: str, value: Any) -> None:
    got = read(field(kind), {"answer.x": sent})
    assert got == {"x": value} and type(got["x"]) is type(value)


@pytest.mark.parametrize(
    ("kind", "sent", "says"),
    [
        ("integer", "lots", "at x, 'lots' is not a whole number"),
        ("integer", "2.5", "at x, '2.5' is not a whole number"),
        ("integer", "1_000", "at x, '1_000' is not a whole number"),
        ("integer", "١٢", "is not a whole number"),  # digits Python's int() would take
        ("number", "NaN", "at x, 'NaN' is not a number"),
        ("number", "1e999", "at x, '1e999' is not a number"),
        ("number", "0x10", "is not a number"),
    ],
)
def test_what_is_no_number_is_refused_by_name(kind: Any, sent: str, says: str) -> None:
    with pytest.raises(InvalidApprovalInput, match=says):
        read(field(kind), {"answer.x": sent})


def test_empty_inputs_are_left_out_none_or_empty_as_the_schema_takes_them() -> None:
    assert read(field("integer"), {"answer.x": ""}) == {}  # the default fills it in
    assert read(field("integer", required=True), {"answer.x": ""}) == {}  # "required property"
    assert read(field("text", required=True, nullable=True), {"answer.x": ""}) == {"x": None}
    assert read(field("text", required=True), {"answer.x": ""}) == {"x": ""}
    assert read(field("text"), {"answer.x": ""}) == {}
    assert read(field("choice"), {"answer.x": ""}) == {}
    # A box left unticked sends nothing: that is a no.
    assert read(field("boolean"), {}) == {"x": False}
    assert read(field("boolean"), {"answer.x": "1"}) == {"x": True}


def test_a_text_answer_is_trimmed_and_a_json_answer_parsed() -> None:
    assert read(AnswerForm("text"), {"answer": " order 7\r\n"}) == "order 7"
    assert read(AnswerForm("json", object=True), {"answer": '{"items": ["a"]}'}) == {"items": ["a"]}
    for made in (AnswerForm("text"), AnswerForm("json")):
        with pytest.raises(InvalidApprovalInput, match="the form carries none"):
            read(made, {"answer.x": "1"})
    with pytest.raises(InvalidApprovalInput, match="not JSON"):
        read(AnswerForm("json"), {"answer": "Infinity"})
    with pytest.raises(InvalidApprovalInput, match="nested too deep"):
        read(AnswerForm("json"), {"answer": "[" * 100_000 + "]" * 100_000})
