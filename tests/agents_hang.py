"""Agents whose tools hang, for the workers of the abort tests (issue 9, item 7).

Tools append to ``RUNWRIGHT_TEST_EFFECT_LOG`` when they start, so the test
knows when a call is under way in the worker, and when they end.
"""

from __future__ import annotations

import time

from runner import Agent, RunContext, tool
from runner.testing import ScriptedModel, call, text, tools
from tests.agents import JOURNAL, log_effect


@tool
def stuck(seconds: float, ctx: RunContext) -> str:
    """A sync call that does not return for a long time."""
    log_effect("stuck", run_id=ctx.run_id)
    time.sleep(seconds)
    log_effect("stuck", run_id=ctx.run_id, phase="end")
    return "unstuck"


stuck_model = ScriptedModel(
    "stuck", [tools(call("stuck", {"seconds": 60})), text("unreachable")], journal=JOURNAL
)
Agent(name="stuck", model=stuck_model.model, tools=[stuck])
