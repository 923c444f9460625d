"""Values from outside (model output, tool output, exception messages) made fit
to store: Postgres text refuses NUL characters and lone surrogates, so does
the store's JSON (``store.db.dumps``), and JSON has no NaN. Sanitizing happens
once, where untrusted values enter.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pydantic_core

from store.errors import InvalidInput

REPLACEMENT = "\ufffd"
# NUL and lone surrogates: what Postgres text and the store's JSON cannot hold.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
MAX_DEPTH = 64


class NotStorable(ValueError):
    """A value that cannot be turned into JSON (a circular structure)."""


def clean_text(text: str) -> str:
    """``text`` with NUL characters and lone surrogates replaced by U+FFFD."""
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE.sub(REPLACEMENT, text)


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [truncated {len(text) - limit} characters]"


def clean_message(text: str, limit: int = 2000) -> str:
    """An error message fit to store and show: cleaned and clipped."""
    return clip(clean_text(text), limit)


def clean_json(value: Any) -> Any:
    """``value`` as JSON-compatible data that Postgres accepts.

    Strings lose NUL characters and lone surrogates, bytes are decoded (invalid
    UTF-8 replaced), non-finite floats become the strings ``"NaN"``,
    ``"Infinity"`` and ``"-Infinity"``, other objects go through pydantic's
    JSON conversion (``str`` as the fallback), and structures nested deeper
    than :data:`MAX_DEPTH` are cut there. A circular structure raises
    :class:`NotStorable`.
    """
    return _clean(value, 0, set())


def _clean(value: Any, depth: int, active: set[int]) -> Any:
    if value is None or value is True or value is False:
        return value
    kind = type(value)
    if kind is str:
        return clean_text(value)
    if kind is int:
        return value
    if kind is float:
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes | bytearray | memoryview):
        return clean_text(bytes(value).decode("utf-8", errors="replace"))
    if isinstance(value, dict | list | tuple | set | frozenset):
        if depth >= MAX_DEPTH:
            return f"[nested deeper than {MAX_DEPTH} levels]"
        marker = id(value)
        if marker in active:
            raise NotStorable("the value contains a circular reference")
        active.add(marker)
        try:
            if isinstance(value, dict):
                return {_key(k): _clean(v, depth + 1, active) for k, v in value.items()}
            return [_clean(v, depth + 1, active) for v in value]
        finally:
            active.discard(marker)
    if isinstance(value, bool | int | float | str):  # subclasses: enums and the like
        return _clean(_plain(value), depth, active)
    try:
        converted = pydantic_core.to_jsonable_python(value, fallback=str)
    except (ValueError, TypeError, RecursionError):
        converted = str(value)
    if converted is value:
        return clean_text(str(value))
    return _clean(converted, depth, active)


def _plain(value: bool | int | float | str) -> Any:
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base(value)
    return str(value)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return clean_text(key)
    if isinstance(key, bytes):
        return clean_text(key.decode("utf-8", errors="replace"))
    return clean_text(str(key))


def loads_strict(text: str, what: str) -> Any:
    """``text`` as JSON a store can hold, or one :class:`InvalidInput` naming
    ``what``: no NaN or Infinity, no number that overflows to infinity, no
    integer past Python's digit limit, nothing nested too deep to parse."""

    def refuse_constant(name: str) -> Any:
        raise InvalidInput(f"{what} is not JSON: {name} is not a JSON number")

    def finite_float(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):  # 1e400 parses as inf, which JSON cannot hold
            raise InvalidInput(f"{what} holds a number out of range: {number[:40]}")
        return value

    try:
        return json.loads(text, parse_constant=refuse_constant, parse_float=finite_float)
    except ValueError as exc:  # JSONDecodeError, or an integer of over 4300 digits
        raise InvalidInput(f"{what} is not JSON: {exc}") from None
    except RecursionError:
        raise InvalidInput(f"{what} is nested too deeply") from None
