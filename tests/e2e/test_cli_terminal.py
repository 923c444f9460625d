"""``runwright show``, ``watch`` and ``runs`` print what models, tools and
triggers wrote, inert: no escape sequence reaches the terminal (issue 9, item 5).

The runs execute in this process; the commands run through the real entry point.
"""

from __future__ import annotations

import re
import unicodedata

import tests.agents_terminal as hostile
from runner import Engine, RunStatus
from tests.e2e.clirun import rw

# The visible rendering of the OSC sequence that would retitle the terminal.
SHOWN = "\\x1b]0;pwned\\x07"


def assert_inert(output: str) -> None:
    """Nothing a terminal acts on: no control character but the newline, no C1
    control, no bidirectional override, no line separator."""
    for char in output:
        if char == "\n":
            continue
        assert unicodedata.category(char) not in ("Cc", "Cs", "Zl", "Zp"), (repr(char), output)
        assert char not in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069", output


def cli(env: dict[str, str], *args: str) -> str:
    done = rw(env, *args)
    assert_inert(done.stdout)
    assert_inert(done.stderr)
    return done.stdout


def test_show_and_watch_print_hostile_text_inert(cli_env: dict[str, str], engine: Engine) -> None:
    run = engine.start(hostile.AGENT, {"note": hostile.HOSTILE}, source="cli")
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING and waiting.waiting

    shown = cli(cli_env, "show", run.id)
    assert "status   waiting" in shown
    # The model's text, the tool error, the unknown tool's name and the trigger
    # payload are all there, visibly escaped, not dropped.
    assert shown.count(SHOWN) >= 3
    assert "\\x9b31m" in shown and "\\u202egnp.exe" in shown and "\\r" in shown
    assert "tool  tool\\x1b]0;pwned" in shown

    engine.decide(waiting.waiting.approval_id, True, trusted=True)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED

    shown = cli(cli_env, "show", run.id)
    assert "status   completed" in shown and "[red]alarm[/red]" in shown
    watched = cli(cli_env, "watch", run.id)
    assert "-- completed" in watched and SHOWN in watched
    # One line per event (hostile newlines stay escaped), and the output.
    assert watched.count("\n") == len(engine.store.events(run.id)) + 1

    crashed = engine.start(hostile.CRASHING, {})
    failed = engine.execute(crashed.id)
    assert failed is not None and failed.status is RunStatus.FAILED
    for command in ("show", "watch"):
        output = cli(cli_env, command, crashed.id)
        assert re.search(r"internal_error: RuntimeError: \\x1b\]0;pwned\\x07", output), output

    listing = cli(cli_env, "runs")
    # The agent's name is printed as written: its rich markup is text, not style.
    assert "terminal[bold red]markup[/]" in listing and run.id in listing


def test_errors_quoting_hostile_input_are_inert(cli_env: dict[str, str]) -> None:
    done = rw(cli_env, "show", "\x1b]0;pwned\x07\x9b2J", ok=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert_inert(done.stderr)
    assert "no run with id" in done.stderr
