"""Agents whose model, tools and errors write terminal escapes, for the CLI's
terminal tests (item 5 of issue 9). Imported by the tests that use them only."""

from __future__ import annotations

from typing import Any

from runner import Agent, RunContext, tool
from runner.testing import Reply, Request, ScriptedModel, call, text, tools

# What a hostile model or tool would write: an OSC retitling the terminal, a
# screen clear, the 8-bit CSI and OSC (C1) forms, a carriage return that
# overwrites the line, a cursor move, backspace, DEL, a right-to-left override,
# a line separator, and rich markup.
HOSTILE = (
    "\x1b]0;pwned\x07 \x1b[2J\x1b[1A \x9b31m \x9d8;;http://evil\x9c \rover\bwrite\x7f "
    "\u202egnp.exe \u2028[red]alarm[/red]"
)
# An agent name with rich markup in it: `runwright runs` prints agent names.
AGENT = "terminal[bold red]markup[/]"
CRASHING = "terminal_crash"


@tool
def echo(text: str) -> dict[str, Any]:
    """Return the text."""
    return {"echo": text, "raw": text}


@tool
def explode(text: str) -> str:
    """Fail with the text as the message."""
    raise RuntimeError(text)


@tool
def ask(text: str) -> str:
    """Needs a person's approval first."""
    return text


def script(request: Request) -> Reply:
    if request.step == 1:
        # The third call names no tool: its name comes back in the tool error.
        return tools(
            call("echo", {"text": HOSTILE}),
            call("explode", {"text": HOSTILE}),
            call("tool" + HOSTILE, {}),
            content=HOSTILE,
        )
    if request.step == 2:
        return tools(call("ask", {"text": HOSTILE}))
    return text(HOSTILE + "\nand a second line")


hostile_model = ScriptedModel("terminal", script, strict=False)  # it calls no tool of its own
Agent(name=AGENT, model=hostile_model.model, tools=[echo, explode, ask], approvals={"ask": True})


def no_tools(ctx: RunContext) -> list[Any]:
    raise RuntimeError(HOSTILE)


crash_model = ScriptedModel("terminal_crash", [text("unreachable")])
Agent(name=CRASHING, model=crash_model.model, tools=no_tools)
