"""A value checked against a JSON schema in a bounded time: a model's
arguments against a tool's input schema (runner/core/mcp/tools.py), a person's
edited arguments or answer against the request's (runner/core/approvals/decisions.py).

An MCP server writes its tools' schemas, so their patterns are hostile: one that backtracks
for ever on an argument crafted for it (``^(a+)+$`` against ``"a" * 30 +
"!"``) holds the thread that checks it for seconds or years, and Python's
``re`` holds the GIL meanwhile, so the runtime's loop and every run on it
(heartbeats, cancels, other calls) stand still. So the check is the
standard's validator (jsonschema's Draft 2020-12) with the keywords that
match patterns (``pattern``, ``patternProperties``, and
``additionalProperties`` beside them; ``propertyNames`` applies ``pattern``)
matching with the ``regex`` module, which takes a timeout, under one deadline
for the whole check of a call (``CHECK_SECONDS``), which every keyword also
looks at before it runs. A check that runs out of time raises
:class:`OutOfTime`: the call is not made, the edit is refused. Formats
(``format: regex`` among them) are not asserted, so no format matches.

jsonschema checks a subschema that names another dialect (``$schema``), or a
schema reached by a ``$ref`` outside the server's (the metaschemas it
bundles), with a validator of its own, which matches with ``re``. A tool
whose schema could lead there (:func:`unsafe`) is not offered, and neither
is one with ``unevaluatedProperties`` beside ``patternProperties``, which
jsonschema evaluates with ``re``.
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

from runner.core.errors import RunwrightError

# The longest one check of a call's arguments may take: well under the
# 100 ms that no input may hold the runtime's loop for, since a regex's
# timeout fires late on a busy machine (twice as late on two loaded cores).
# A check of 500 objects of five fields takes about 18 ms.
CHECK_SECONDS = 0.03

_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("schema_check_deadline")


class OutOfTime(RunwrightError):
    """The check of a call's arguments ran past its deadline."""


class InputSchema:
    """A tool's input schema, as its arguments are checked against it."""

    def __init__(self, schema: dict[str, Any]) -> None:
        # Checked as Draft 2020-12 whatever it declares; without its own $id,
        # which would make its references resolve elsewhere (unsafe()).
        checked = {k: v for k, v in schema.items() if k not in ("$schema", "$id")}
        self._validator = _bounded()(checked)

    def errors(self, arguments: Any) -> list[Any]:
        """The ways ``arguments`` do not fit, the first by path first
        (jsonschema's ``ValidationError``). Raises :class:`OutOfTime`; a
        pattern the ``regex`` module cannot compile raises ``regex.error``;
        a reference out of the schema, ``referencing``'s ``Unresolvable``."""
        token = _deadline.set(time.monotonic() + CHECK_SECONDS)
        try:
            return sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
        finally:
            _deadline.reset(token)


def unsafe(schema: Any) -> str | None:
    """Why ``schema`` cannot be checked within a bounded time; None if it can."""
    keys: set[str] = set()
    stack: list[tuple[Any, bool]] = [(schema, True)]
    while stack:
        node, root = stack.pop()
        if isinstance(node, list):
            stack.extend((item, False) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            keys.add(key)
            if isinstance(value, str):
                if key in ("$schema", "$id") and not root:
                    return f"it declares {key} below its root"
                if key in ("$ref", "$dynamicRef") and not value.startswith("#"):
                    return f"a {key} refers outside the schema ({value[:80]!r})"
            stack.append((value, False))
    if {"unevaluatedProperties", "patternProperties"} <= keys:
        return "it has unevaluatedProperties beside patternProperties"
    return None


def _left() -> float:
    """The seconds left to the check; :class:`OutOfTime` if none are."""
    left = _deadline.get() - time.monotonic()
    if left <= 0:
        raise OutOfTime
    return left


def _search(pattern: str, text: str) -> bool:
    import regex

    try:
        return regex.search(pattern, text, timeout=_left()) is not None
    except TimeoutError:
        raise OutOfTime from None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema import ValidationError

    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    from jsonschema import ValidationError

    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = [
        key
        for key in instance
        if key not in named and not any(_search(pattern, key) for pattern in patterns)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif additional is False and extras:
        # jsonschema's own words, as the model was told before.
        listed = ", ".join(repr(extra) for extra in sorted(extras))
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(pattern) for pattern in sorted(patterns))
            yield ValidationError(f"{listed} {verb} not match any of the regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({listed} {verb} unexpected)"
            )


def _timed(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def timed(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _left()
        return keyword(validator, value, instance, schema)

    return timed


@functools.cache
def _bounded() -> Any:
    """The validator class: Draft 2020-12, its keywords under the deadline."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import extend

    keywords = {
        **Draft202012Validator.VALIDATORS,
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    }
    return extend(Draft202012Validator, {name: _timed(k) for name, k in keywords.items()})
