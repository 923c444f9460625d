"""``runwright show`` says when a run's token figures are estimates (issue 7):
the provider reported no usage, and litellm's counter gave the figures."""

from __future__ import annotations

import re

from runner import Agent, Budget, Engine
from runner.testing import ScriptedModel, call, text, tools
from store.models import RunStatus
from tests.agents import lookup
from tests.e2e.clirun import rw

unreported = ScriptedModel(
    "cli-usage-unreported",
    [tools(call("lookup", {"q": "disk"}), usage=None), text("a full disk", usage=None)],
)
Agent(name="cli-usage-unreported", model=unreported.model, tools=[lookup], budget=Budget())
reported = ScriptedModel("cli-usage-reported", [text("a full disk", usage=(300, 40))])
Agent(name="cli-usage-reported", model=reported.model)


def test_show_marks_estimated_usage(cli_env: dict[str, str], engine: Engine) -> None:
    guessed = engine.execute(engine.start("cli-usage-unreported").id)
    counted = engine.execute(engine.start("cli-usage-reported").id)
    assert guessed is not None and guessed.status is RunStatus.COMPLETED
    assert counted is not None and counted.status is RunStatus.COMPLETED
    assert guessed.usage.estimated and guessed.usage.total > 0

    shown = rw(cli_env, "show", guessed.id).stdout
    usage = guessed.usage
    assert (
        f"usage    {usage.input_tokens} in, {usage.output_tokens} out, 2 steps "
        "(estimated: the provider reported no usage)"
    ) in shown, shown
    assert re.search(r"step +1  llm   calls lookup \[\d+\+\d+ tokens, estimated\]", shown), shown
    assert re.search(r"step +2  llm   'a full disk' \[\d+\+\d+ tokens, estimated\]", shown), shown

    shown = rw(cli_env, "show", counted.id).stdout
    assert "usage    300 in, 40 out, 1 steps\n" in shown, shown
    assert "[300+40 tokens]" in shown and "estimated" not in shown
