"""A thread as a conversation (docs/conversations.md): the runs of a thread
continue one history, one at a time, and a message sent to it
(``Engine.send``) starts its next run. What a message that arrives while a
run of the thread is in progress does is its agent's ``on_new_message``:

- ``"enqueue"``: its run goes after the one in progress;
- ``"reject"``: it is refused (:class:`~store.errors.ThreadBusy`, HTTP 409),
  and nothing is written;
- ``"interrupt"``: the run in progress is cancelled (it stops at its next
  safe point: a step's journal is whole, an effect that ran stays recorded
  and is never run again) and the message's run continues from the history
  so far;
- ``"rollback"``: the same, but the interrupted run's work since its last
  user message is dropped from what the next run continues, and the model is
  told which of its effects had already run.

A message's run records which runs it interrupted (its trigger's payload),
so the history its first execution builds (:func:`thread_history`) is the
same whichever worker builds it, and however often.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import Any, Literal

from runner.core.errors import InvalidInput
from runner.core.steps.history import continue_thread, trigger_message
from store.models import Effect, EffectStatus, Message, ThreadStart, TriggerEnvelope

OnNewMessage = Literal["enqueue", "reject", "interrupt", "rollback"]
# Whom a request for a person (an approval, a question) is addressed to:
# anyone who may decide, or the thread's own user (``"requester"``), who
# answers it in the chat (``Engine.send``, ``Engine.decide_in_thread``).
AddressedTo = Literal["anyone", "requester"]
REQUESTER = "requester"
MAX_MESSAGE_CHARS = 100_000


class Policy(enum.StrEnum):
    ENQUEUE = "enqueue"
    REJECT = "reject"
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"


POLICIES = tuple(p.value for p in Policy)


def check_policy(agent: str, value: object) -> None:
    if value not in POLICIES:
        raise InvalidInput(
            f"agent {agent!r}: on_new_message must be one of {', '.join(POLICIES)}, "
            f"not {value!r:.40}"
        )


def check_addressed(what: str, value: object) -> None:
    if value not in ("anyone", REQUESTER):
        raise InvalidInput(f"{what}.to must be 'anyone' or 'requester', not {value!r:.40}")


def addressed(to: str) -> str | None:
    """A request's ``addressed_to`` as the store keeps it (None: anyone)."""
    return REQUESTER if to == REQUESTER else None


def check_message(thread: object, message: object) -> None:
    """One clear error for a thread id or a message that cannot be sent."""
    if not isinstance(thread, str) or not thread.strip() or len(thread) > 200:
        raise InvalidInput("a thread is a non-empty string of at most 200 characters")
    if not isinstance(message, str) or not message.strip():
        raise InvalidInput("a message is a non-empty string")
    if len(message) > MAX_MESSAGE_CHARS:
        raise InvalidInput(f"a message is at most {MAX_MESSAGE_CHARS} characters")


def message_payload(
    text: str, *, by: str | None, policy: Policy, active: Sequence[str]
) -> dict[str, Any]:
    """A message run's trigger payload: its text, who sent it, and the runs
    it interrupts (``interrupt`` or ``rollback``: their ids)."""
    payload: dict[str, Any] = {"text": text}
    if by is not None:
        payload["by"] = by
    if active and policy in (Policy.INTERRUPT, Policy.ROLLBACK):
        payload[policy.value] = list(active)
    return payload


def thread_history(previous: ThreadStart, trigger: TriggerEnvelope) -> list[Message]:
    """The history a thread's run starts from, before its own message: its
    latest ended run's, that run's work since its last user message dropped
    if this message rolls it back, then the messages of the runs that ended
    without a step meanwhile (cancelled while they queued)."""
    history = continue_thread(previous.messages)
    payload = trigger.payload if isinstance(trigger.payload, dict) else {}
    rolled = payload.get(Policy.ROLLBACK.value) or ()
    if previous.run_id is not None and previous.run_id in rolled:
        history = rolled_back(history, previous.effects)
    return [*history, *(trigger_message(t) for t in previous.skipped)]


def rolled_back(history: list[Message], effects: Sequence[Effect]) -> list[Message]:
    """``history`` up to its last user message, and a note of the effects
    that ran after it: they stay done, so the model must know."""
    last = max((i for i, m in enumerate(history) if m.get("role") == "user"), default=-1)
    kept = history[: last + 1]
    ran = [e for e in effects if e.status in (EffectStatus.COMPLETED, EffectStatus.UNKNOWN)]
    if ran:
        lines = [
            f"- {e.tool} {json.dumps(e.input, ensure_ascii=False, default=str)}"
            + (
                f" → {json.dumps(e.output, ensure_ascii=False, default=str)}"
                if e.status is EffectStatus.COMPLETED
                else " (its outcome is unknown)"
            )
            for e in ran
        ]
        kept.append(
            {
                "role": "user",
                "content": "A new message interrupted the answer to the message above, and "
                "that answer was dropped. These actions had already run, and stay done:\n"
                + "\n".join(lines),
            }
        )
    return kept
