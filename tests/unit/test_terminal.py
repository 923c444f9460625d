"""``inert``: what the CLI prints of stored text."""

from __future__ import annotations

import unicodedata

import pytest

from runner.cli.terminal import inert


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text, ünïcödé, 日本語, emoji 👍🏽", "plain text, ünïcödé, 日本語, emoji 👍🏽"),
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
        ("\x1b[2J", "\\x1b[2J"),
        ("a\x9b31mb\x9d0;x\x9c", "a\\x9b31mb\\x9d0;x\\x9c"),
        ("line\roverwrite", "line\\roverwrite".replace("\\r", "\\x0d")),
        ("back\bspace\x7f", "back\\x08space\\x7f"),
        ("\x00nul", "\\x00nul"),
        ("two\nlines", "two\\x0alines"),
        ("a\tb", "a\tb"),
        ("\u202egnp.exe", "\\u202egnp.exe"),
        ("\u2066isolate\u2069", "\\u2066isolate\\u2069"),
        ("para\u2028graph\u2029", "para\\u2028graph\\u2029"),
        ("lone \udcff surrogate", "lone \\udcff surrogate"),
        ("[red]markup[/red]", "[red]markup[/red]"),
        ("zero\u200dwidth joiner\u00a0nbsp", "zero\u200dwidth joiner\u00a0nbsp"),
    ],
)
def test_inert_escapes_what_a_terminal_would_act_on(text: str, shown: str) -> None:
    assert inert(text) == shown


def test_keep_lets_newlines_through() -> None:
    assert inert("a\nb\r\n", keep="\t\n") == "a\nb\\x0d\n"
    assert inert("a\tb", keep="") == "a\\x09b"


def test_every_control_character_is_escaped() -> None:
    controls = "".join(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)])
    shown = inert(controls, keep="")
    assert all(unicodedata.category(c) not in ("Cc", "Cs") for c in shown)
    assert shown.encode("utf-8")  # printable anywhere, lone surrogates included
    assert inert(42) == "42"
