"""A question's answer form (a request of kind ``input``: the agent's
``ask_human`` tool), made from the JSON schema the answer must fit, and the
answer read back from the posted form.

A text question gets a text box. An answer model's schema (an object of
plain properties: text, numbers, yes or no, a choice among values, an enum of
``$defs`` included) gets one input per property; anything else (nested
objects, lists, unions) gets one box of JSON for the whole answer. The form
only helps a person fill the answer in: :meth:`Engine.answer` checks it
against the schema, so this module converts the form's text to JSON types and
leaves every judgement of the value to that check.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from runner.console.forms import MAX_FORM_FIELDS, parse_json
from runner.console.render import e, json_block, json_field
from runner.core.errors import InvalidApprovalInput

ANSWER = "answer"
# One input per property is named "answer.<property>".
FIELD_PREFIX = ANSWER + "."
# An answer form also carries the CSRF token, the decision, and the run and
# the page to go back to (or a link's token): past this many properties the
# form would pass the 20 fields a console form may have, so it is one JSON box.
MAX_FIELDS = MAX_FORM_FIELDS - 4
# What a text box takes when the schema sets no maxLength: the engine's own
# bound of a text answer.
MAX_TEXT = 20_000

Kind = Literal["text", "integer", "number", "boolean", "choice"]
Mode = Literal["text", "fields", "json"]
_NO_DEFAULT = object()


@dataclass(frozen=True)
class Field:
    """One property of an answer model, as one input."""

    name: str
    kind: Kind
    label: str
    required: bool
    # None is a value it takes (``str | None``): an empty input is None.
    nullable: bool = False
    description: str = ""
    choices: tuple[Any, ...] = ()
    default: Any = _NO_DEFAULT
    minimum: float | None = None
    maximum: float | None = None

    @property
    def input_name(self) -> str:
        return FIELD_PREFIX + self.name


@dataclass(frozen=True)
class AnswerForm:
    """How an answer is asked for: ``text`` (one text box), ``fields`` (one
    input per property) or ``json`` (one JSON box; ``object``: the schema
    wants a JSON object)."""

    mode: Mode
    fields: tuple[Field, ...] = ()
    object: bool = False


def plan(schema: Any) -> AnswerForm:
    """The form for an answer that must fit ``schema``."""
    if not isinstance(schema, dict):
        return AnswerForm("json")
    if schema.get("type") == "string" and "enum" not in schema:
        return AnswerForm("text")
    is_object = schema.get("type") == "object"
    properties = schema.get("properties")
    if not is_object or not isinstance(properties, dict) or not properties:
        return AnswerForm("json", object=is_object)
    # A mapping's own keys (additionalProperties with a schema) have no inputs.
    if len(properties) > MAX_FIELDS or isinstance(schema.get("additionalProperties"), dict):
        return AnswerForm("json", object=True)
    defs = schema.get("$defs")
    defs = defs if isinstance(defs, dict) else {}
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    fields = []
    for name, node in properties.items():
        field = _field(str(name), node, defs, required=name in required)
        if field is None:
            return AnswerForm("json", object=True)
        fields.append(field)
    return AnswerForm("fields", tuple(fields))


def _resolved(node: Any, defs: Mapping[str, Any], depth: int = 0) -> dict[str, Any] | None:
    """``node`` with a ``$ref`` into ``$defs`` (or an ``allOf`` of one, as
    older pydantic writes a field with a default) replaced by what it names;
    the node's own keys (title, description, default) win."""
    if not isinstance(node, dict) or depth > 3:
        return None
    ref = node.get("$ref")
    if ref is not None:
        prefix = "#/$defs/"
        if not isinstance(ref, str) or not ref.startswith(prefix):
            return None
        own = {k: v for k, v in node.items() if k != "$ref"}
        return _resolved({**defs.get(ref[len(prefix) :], {}), **own}, defs, depth + 1)
    all_of = node.get("allOf")
    if all_of is not None:
        if not isinstance(all_of, list) or len(all_of) != 1:
            return None
        inner = _resolved(all_of[0], defs, depth + 1)
        own = {k: v for k, v in node.items() if k != "allOf"}
        return None if inner is None else {**inner, **own}
    return node


def _field(name: str, node: Any, defs: Mapping[str, Any], *, required: bool) -> Field | None:
    """The input for one property, or None if it takes more than one input can give."""
    resolved = _resolved(node, defs)
    if resolved is None:
        return None
    nullable = False
    any_of = resolved.get("anyOf")
    if any_of is not None:
        # ``X | None``: the input of X, where an empty input is None.
        branches = any_of if isinstance(any_of, list) else []
        others = [b for b in branches if b != {"type": "null"}]
        if len(branches) != 2 or len(others) != 1:
            return None
        inner = _resolved(others[0], defs)
        if inner is None:
            return None
        resolved = {**inner, **{k: v for k, v in resolved.items() if k != "anyOf"}}
        nullable = True
    if "const" in resolved and "enum" not in resolved:
        # A Literal of one value: a choice of one, not a box to type it in.
        resolved = {**resolved, "enum": [resolved["const"]]}
    kind = _kind(resolved)
    if kind is None:
        return None
    title = resolved.get("title")
    description = resolved.get("description")
    return Field(
        name=name,
        kind=kind,
        label=title if isinstance(title, str) and title else name,
        required=required,
        nullable=nullable,
        description=description if isinstance(description, str) else "",
        choices=tuple(resolved["enum"]) if kind == "choice" else (),
        default=resolved.get("default", _NO_DEFAULT),
        minimum=_bound(resolved.get("minimum")),
        maximum=_bound(resolved.get("maximum")),
    )


_KINDS: dict[str, Kind] = {
    "string": "text",
    "integer": "integer",
    "number": "number",
    "boolean": "boolean",
}


def _kind(node: Mapping[str, Any]) -> Kind | None:
    enum = node.get("enum")
    if enum is not None:
        plain = isinstance(enum, list) and enum
        if plain and all(v is None or isinstance(v, str | int | float) for v in enum):
            return "choice"
        return None
    return _KINDS.get(str(node.get("type")))


def _bound(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _option(value: Any) -> str:
    """A choice as its <option>'s value: text as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


# ---------------------------------------------------------------- the form


def fields_html(form: AnswerForm, schema: Any, *, ident: str) -> str:
    """The inputs of ``form`` (inside a <form> the caller writes). ``ident``:
    a prefix for element ids, unique in the page."""
    if form.mode == "text":
        limit = schema.get("maxLength") if isinstance(schema, dict) else None
        limit = limit if isinstance(limit, int) and 0 < limit <= MAX_TEXT else MAX_TEXT
        return (
            f'<label>Your answer<br><textarea name="{ANSWER}" maxlength="{limit}" required>'
            "</textarea></label><br>"
        )
    if form.mode == "json":
        return (
            json_field(
                ANSWER,
                "",
                ident=f"{ident}-json",
                label="Your answer, as JSON",
                want_object=form.object,
            )
            + '<p class="meta">It must fit this schema:</p>'
            + json_block(schema, "schema")
        )
    return '<div class="fields">' + "".join(_input(f, ident) for f in form.fields) + "</div>"


def _input(field: Field, ident: str) -> str:
    name = e(field.input_name)
    required = " required" if field.required and not field.nullable else ""
    star = "" if field.required else ' <span class="meta">(optional)</span>'
    about = f' <span class="meta">{e(field.description)}</span>' if field.description else ""
    has_default = field.default is not _NO_DEFAULT and field.default is not None
    if field.kind == "boolean":
        checked = " checked" if field.default is True else ""
        return (
            f'<label class="check"><input type="checkbox" name="{name}" value="1"{checked}> '
            f"{e(field.label)}</label>{about}"
        )
    if field.kind == "choice":
        options = [] if required else ['<option value="">—</option>']
        for choice in field.choices:
            value = _option(choice)
            chosen = " selected" if has_default and choice == field.default else ""
            options.append(f'<option value="{e(value)}"{chosen}>{e(value)}</option>')
        control = f'<select name="{name}"{required}>{"".join(options)}</select>'
    elif field.kind == "text":
        value = f' value="{e(field.default)}"' if isinstance(field.default, str) else ""
        control = f'<input type="text" name="{name}"{value}{required}>'
    else:
        step = "1" if field.kind == "integer" else "any"
        limits = "".join(
            f' {attr}="{e(bound)}"'
            for attr, bound in (("min", field.minimum), ("max", field.maximum))
            if bound is not None
        )
        value = f' value="{e(field.default)}"' if has_default else ""
        control = f'<input type="number" step="{step}" name="{name}"{limits}{value}{required}>'
    return f'<label class="field">{e(field.label)}{star}{about}<br>{control}</label>'


# ------------------------------------------------------------- the answer


def read(form: AnswerForm, posted: Mapping[str, str]) -> Any:
    """The answer ``posted`` gives, in the JSON types the schema names.
    Raises :class:`InvalidApprovalInput` for what cannot be converted (a box
    with no answer, JSON that does not parse, a number that is none)."""
    if form.mode != "fields":
        raw = posted.get(ANSWER)
        if raw is None:
            raise InvalidApprovalInput("refused the answer: the form carries none")
        if form.mode == "text":
            return raw.strip()
        return parse_json(raw, "the answer")
    answer: dict[str, Any] = {}
    for field in form.fields:
        raw = posted.get(field.input_name)
        if field.kind == "boolean":
            # An unticked box sends nothing: no is an answer too.
            answer[field.name] = raw is not None and raw != ""
            continue
        if raw is None or raw.strip() == "":
            # Left empty: None where it takes None, else left out (the schema
            # says whether it may be, and a default fills it in).
            if field.nullable and field.required:
                answer[field.name] = None
            elif field.kind == "text" and field.required and raw is not None:
                answer[field.name] = ""
            continue
        answer[field.name] = _value(field, raw.strip() if field.kind != "text" else raw)
    return answer


def _value(field: Field, raw: str) -> Any:
    if field.kind == "choice":
        # The choice whose option this is; anything else goes on as it is
        # sent, for the schema to refuse it by name.
        return next((c for c in field.choices if _option(c) == raw), raw)
    if field.kind in ("integer", "number"):
        return _number(field, raw)
    return raw


# A number as a number input sends it (HTML's "valid floating-point number").
_NUMBER = re.compile(r"-?(\d+|\d*\.\d+)([eE][+-]?\d+)?", re.ASCII)
_WHOLE = re.compile(r"-?\d+", re.ASCII)


def _number(field: Field, raw: str) -> int | float:
    whole = field.kind == "integer"
    wanted = "a whole number" if whole else "a number"
    if _WHOLE.fullmatch(raw):
        return int(raw)  # exact, however long
    number = float(raw) if _NUMBER.fullmatch(raw) else math.nan
    if not math.isfinite(number) or (whole and not number.is_integer()):
        raise InvalidApprovalInput(f"refused the answer: at {field.name}, {raw!r} is not {wanted}")
    return int(number) if whole else number
