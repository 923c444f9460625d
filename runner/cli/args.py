"""The CLI's own parsing of its arguments, strict: each bad value is one
:class:`InvalidInput`, never a traceback or a surprise."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import click

from store.errors import InvalidInput

# Prune refuses ages outside this range: zero would delete runs that ended a
# moment ago, and a century is longer than any retention anyone means.
PRUNE_MIN = timedelta(minutes=1)
PRUNE_MAX = timedelta(days=36_500)


def is_text(value: str) -> bool:
    # Python decodes argv with surrogateescape: bytes that are not UTF-8 arrive
    # as lone surrogates, which no store, log or terminal can take.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s`` (or several: ``1d12h``).

    ASCII digits only (``\\d`` would take any script's digits), and at most nine
    per unit, so no value can overflow ``timedelta`` or Python's int parsing.
    """
    unit = "([0-9]{1,9})"
    parts = re.fullmatch(f"(?:{unit}d)?(?:{unit}h)?(?:{unit}m)?(?:{unit}s)?", text.strip())
    if not text.strip() or parts is None:
        raise InvalidInput(f"{text[:40]!r} is not a duration like 30d, 12h, 90m or 45s")
    days, hours, minutes, seconds = (int(p or 0) for p in parts.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def parse_count(text: str, label: str, low: int, high: int) -> int:
    """A whole number from ``low`` to ``high``, in ASCII digits (no sign, no
    spaces inside, nothing Python's int() would also take, such as ``1_0``)."""
    value = text.strip()
    if not re.fullmatch("[0-9]{1,10}", value) or not low <= int(value) <= high:
        raise InvalidInput(
            f"{label} must be a whole number from {low} to {high}, not {text[:40]!r}"
        )
    return int(value)


def parse_payload(text: str) -> Any:
    """``--payload``: strict JSON (no NaN or Infinity), refused if nested too deep
    to parse; the engine then checks it like any trigger."""
    from store.jsonsafe import loads_strict  # not on the path of `runwright runs`

    return loads_strict(text, "--payload")


def seconds(low: float, high: float) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback for a float option: finite and from ``low`` to ``high``.
    click's FloatRange lets NaN through (every comparison with it is false), and
    ``time.sleep`` raises on NaN and on negative values."""

    def check(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and low <= value <= high):
            label = param.opts[0] if param.opts else param.name
            raise InvalidInput(f"{label} must be a number of seconds from {low:g} to {high:g}")
        return value

    return check


def check_text(command: click.Command, ctx: click.Context) -> None:
    """Refuses the arguments of ``command`` that are not text."""
    for param in command.params:
        value = ctx.params.get(param.name or "")
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, str) and not is_text(item):
                label = param.opts[0] if isinstance(param, click.Option) else param.name
                raise InvalidInput(f"{label} is not valid UTF-8 text")


class Command(click.Command):
    """Refuses arguments that are not text before the command runs."""

    def invoke(self, ctx: click.Context) -> Any:
        check_text(self, ctx)
        return super().invoke(ctx)
