"""How a stored step reads on one line, for ``runwright show``, ``watch`` and the
demo, with the cost and the clipping those lines use. The lines hold stored
(possibly hostile) text: print them through :func:`runner.cli.terminal.inert`."""

from __future__ import annotations

import json

from runner.core.costs import money, unpriced
from runner.core.steps.history import APPROVAL_REQUEST, APPROVAL_RESPONSE, CHILD_REQUEST
from store.models import Message, Step

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
            spent.append(money(step.cost_usd))  # a free step's $0 would only add noise
        elif unpriced(step):
            spent.append("cost unknown")
        shown = f" [{', '.join(spent)}]" if spent else ""
        return f"step {step.index:>3}  llm   {what}{shown}"
    if step.kind.value == "tool":
        outcome = f"error: {clip(str(step.error))}" if step.error else clip(json.dumps(step.output))
        return (
            f"step {step.index:>3}  tool  {step.name}({clip(arguments(step.input))}) -> {outcome}"
        )
    if step.kind.value == "state":
        return f"step {step.index:>3}  state {clip(json.dumps(step.output))}"
    return f"step {step.index:>3}  wait  {step.name} {arguments(step.input)}"


def arguments(value: object) -> str:
    """A call's arguments as text: JSON, or the text itself when they are
    text (the model's arguments when they were not JSON), never encoded twice."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def message_line(message: Message) -> str:
    """A message of a checkpoint, after its role: the text, the calls an
    assistant message makes, or what an engine record of the history says
    (a call that waits for a person, the person's decision, a child run)."""
    role = message.get("role")
    if role == APPROVAL_REQUEST:
        return (
            f"{message.get('tool_name')}({arguments(message.get('input'))}) waits for a "
            f"person (request {message.get('approval_id')})"
        )
    if role == APPROVAL_RESPONSE:
        said = "approved" if message.get("approved") else "not approved"
        if "answer" in message:
            said = f"answered: {arguments(message.get('answer'))}"
        elif message.get("arguments") is not None:
            said += f" with edited arguments {arguments(message['arguments'])}"
        if not message.get("approved") and message.get("reason"):
            said += f": {message['reason']}"
        return f"{said} (request {message.get('approval_id')})"
    if role == CHILD_REQUEST:
        return f"{message.get('tool_name')} started a child run of {message.get('agent')}"
    body = message.get("content")
    calls = [c["function"]["name"] for c in message.get("tool_calls") or ()]
    text = body if isinstance(body, str) else "" if body is None else json.dumps(body)
    if calls:
        return (f"{text} " if text else "") + "calls " + ", ".join(calls)
    return text


def clip(text: str, width: int = 80) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."
