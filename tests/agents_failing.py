"""An agent whose model refuses it after one step: an authentication error,
which is not transient, so its runs settle failed (code ``model_error``).

Loaded by workers through ``RUNWRIGHT_AGENTS=tests.agents,tests.agents_failing``.
"""

from __future__ import annotations

from runner import Agent
from runner.testing import Reply, Request, ScriptedModel, call, tools
from tests.agents import JOURNAL, lookup


def refused(request: Request) -> Reply:
    if request.step == 1:
        return tools(call("lookup", {"q": "before the refusal"}))
    return Reply(error="auth")


refused_model = ScriptedModel("refused", refused, journal=JOURNAL)
Agent(name="refused", model=refused_model.model, tools=[lookup])
