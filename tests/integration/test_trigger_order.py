"""The trigger round-trips exactly: the first message and ``ctx.trigger`` show
the payload's keys in the caller's order (issue 10, item 11)."""

from __future__ import annotations

import uuid

from runner import Agent, Engine, RunContext, tool
from runner.testing import ScriptedModel, call, text, tools

ORDERED_FIRST_MESSAGE = """```json
{
  "source": "manual",
  "trigger": "manual",
  "payload": {
    "title": "App crashes on start",
    "id": 7,
    "nested": {
      "zeta": 1,
      "alpha": 2
    }
  }
}
```"""


def test_the_payload_keeps_the_callers_key_order(engine: Engine) -> None:
    seen: list[list[str]] = []

    @tool
    def look(ctx: RunContext) -> str:
        """Look at the trigger."""
        seen.append(list(ctx.trigger.payload))
        return "ok"

    name = f"order-{uuid.uuid4().hex[:8]}"
    model = ScriptedModel(name, [tools(call("look")), text("done")])
    Agent(name=name, model=model.model, tools=[look])
    payload = {"title": "App crashes on start", "id": 7, "nested": {"zeta": 1, "alpha": 2}}
    run = engine.start(name, payload)
    assert list(engine.get_run(run.id).trigger.payload) == ["title", "id", "nested"]
    done = engine.execute(run.id)
    assert done is not None and done.output == "done"
    assert model.calls[0].messages[-1]["content"] == ORDERED_FIRST_MESSAGE
    assert seen == [["title", "id", "nested"]]
