"""Text from runs, made inert before it reaches a terminal.

Model output, tool output, error messages and trigger payloads are written by
whoever controls the model, the tools or the trigger. Printed raw, an ESC or C1
sequence in them can retitle the terminal, clear it, move the cursor over what
was already printed, or (in some terminals) write files or answer back. The CLI
therefore prints stored text only through :func:`inert` (:func:`say`), and
Runwright's errors as one line (:func:`fail`, :class:`Group`).
"""

from __future__ import annotations

import sys
import unicodedata
from typing import Any, NoReturn

import click

from runner.cli.args import Command, check_text
from store.errors import RunwrightError

# Bidirectional overrides and isolates reorder what a reader sees without being
# control characters (they are format characters, Unicode category Cf); line and
# paragraph separators break a line as a newline would.
_INVISIBLE = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_SEPARATORS = frozenset("\u2028\u2029")


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _unsafe(char: str, keep: str) -> bool:
    if char in keep:
        return False
    if char in _INVISIBLE or char in _SEPARATORS:
        return True
    # Cc: C0 controls (ESC, BEL, CR, ...), DEL and the C1 controls (CSI 0x9b,
    # OSC 0x9d, ...). Cs: lone surrogates, which also cannot be encoded for output.
    return unicodedata.category(char) in ("Cc", "Cs")


def inert(text: object, *, keep: str = "\t") -> str:
    """``text`` with every control character shown as a visible escape (``\\x1b``).

    Characters in ``keep`` pass through: a tab by default; pass ``keep="\\t\\n"``
    where the output is meant to span lines. Everything else that a terminal
    would act on, instead of showing, is escaped, so what is printed is exactly
    one harmless rendering of the text.
    """
    value = text if isinstance(text, str) else str(text)
    if value.isprintable():  # the common case: no control, format or separator character
        return value
    return "".join(_escape(c) if _unsafe(c, keep) else c for c in value)


ERROR_CHARS = 300  # an error quoting a 20 KB argument still fits a few lines


def say(text: str) -> None:
    """Print one line of (possibly stored, hostile) text, inert."""
    click.echo(inert(text))


def fail(message: str) -> NoReturn:
    if len(message) > ERROR_CHARS:
        message = message[: ERROR_CHARS - 3] + "..."
    click.echo(f"error: {inert(message)}", err=True)
    sys.exit(1)


class Group(click.Group):
    """Turns Runwright's errors into one clear line and a non-zero exit; it
    and its commands refuse arguments that are not text (:class:`Command`)."""

    command_class = Command
    group_class = type  # subgroups (``local``, ``runs``) are Groups too

    def invoke(self, ctx: click.Context) -> Any:
        try:
            check_text(self, ctx)  # a group's own options (``runs --agent``)
            return super().invoke(ctx)
        except RunwrightError as exc:
            fail(exc.message)
