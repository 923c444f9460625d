"""A poison run: its tool kills the worker process that executes it.

Loaded by workers through ``RUNWRIGHT_AGENTS=tests.agents,tests.agents_poison``.
Each detonation is logged (``RUNWRIGHT_TEST_EFFECT_LOG``) before the kill, so a
test can count how many executions the run got.
"""

from __future__ import annotations

import asyncio
import os
import signal

from runner import Agent, RunContext, tool
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from tests.agents import JOURNAL, log_effect

# The tool works a while before it crashes, as a native library might: the
# healthy runs sharing the worker make progress in the meantime.
FUSE_SECONDS = float(os.environ.get("RUNWRIGHT_TEST_POISON_FUSE", "3"))


@tool
async def detonate(ctx: RunContext) -> str:
    """Process the order (kills the worker)."""
    log_effect("detonate", run_id=ctx.run_id, pid=os.getpid())
    await asyncio.sleep(FUSE_SECONDS)
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


def poison(request: Request) -> Reply:
    if request.step == 1:
        return tools(call("detonate"))
    return text("survived")


poison_model = ScriptedModel("poison", poison, journal=JOURNAL)
Agent(
    name="poison",
    model=poison_model.model,
    tools=[detonate],
    concurrency_key=lambda trigger: (
        trigger.payload.get("customer") if isinstance(trigger.payload, dict) else None
    ),
)
