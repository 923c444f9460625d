"""How a stored step reads on one line, for ``runwright show``, ``watch`` and the
demo, with the cost and the clipping those lines use. The lines hold stored
(possibly hostile) text: print them through :func:`runner.cli.terminal.inert`."""

from __future__ import annotations

import json
import math

from runner.costs import UNKNOWN, unpriced
from store.models import Step

# After token figures the provider did not report (litellm counted them).
ESTIMATED = " (estimated: the provider reported no usage)"


def step_line(step: Step) -> str:
    if step.kind.value == "llm":
        message = (step.output or {}).get("message", {})
        calls = [c["function"]["name"] for c in message.get("tool_calls") or []]
        what = f"calls {', '.join(calls)}" if calls else repr(clip(message.get("content") or ""))
        usage = step.usage
        spent = []
        if usage is not None:
            spent.append(f"{usage.input_tokens}+{usage.output_tokens} tokens")
            if usage.estimated:
                spent.append("estimated")
        if step.cost_usd:
            spent.append(cost_text(step.cost_usd))  # a free step's $0 would only add noise
        elif unpriced(step):
            spent.append("cost unknown")
        shown = f" [{', '.join(spent)}]" if spent else ""
        return f"step {step.index:>3}  llm   {what}{shown}"
    if step.kind.value == "tool":
        outcome = f"error: {clip(str(step.error))}" if step.error else clip(json.dumps(step.output))
        return (
            f"step {step.index:>3}  tool  {step.name}({clip(json.dumps(step.input))}) -> {outcome}"
        )
    if step.kind.value == "state":
        return f"step {step.index:>3}  state {clip(json.dumps(step.output))}"
    return f"step {step.index:>3}  wait  {step.name} {json.dumps(step.input)}"


def cost_text(usd: float | None) -> str:
    """A cost in USD for a person: ``$0.0123``; ``$0.0000`` for a free model;
    ``<$0.0001`` for a fraction of a hundredth of a cent; ``—`` when it is
    unknown (an unpriced model: runner/costs.py)."""
    if usd is None or not math.isfinite(usd) or usd < 0:
        return UNKNOWN
    if 0 < usd < 0.0001:
        return "<$0.0001"
    return f"${usd:.4f}"


def clip(text: str, width: int = 80) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."
