"""A thread as a conversation (docs/conversations.md, runner/core/threads.py):
a message sent to a thread, and the thread as its reader sees it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from runner.core.engine.deps import Deps
from runner.core.errors import InvalidInput
from runner.core.steps.history import MESSAGE_SOURCE, MESSAGE_TRIGGER, trigger_message
from runner.core.threads import Policy, check_message, message_payload
from store.models import Message, NewRun, Run, TriggerEnvelope


@dataclass(frozen=True)
class Thread:
    """A thread as a conversation: its runs (oldest first), the one in
    progress if any, and its messages: the newest history a run of it holds,
    then the messages of its runs that have not started (or never will)."""

    id: str
    runs: tuple[Run, ...]
    messages: tuple[Message, ...]

    @property
    def active(self) -> Run | None:
        """The thread's oldest run not ended (the one going, or next)."""
        return next((r for r in self.runs if not r.status.ended), None)

    @property
    def status(self) -> str:
        """``idle`` (every run ended, or none yet) or the active run's status."""
        active = self.active
        return "idle" if active is None else active.status.value


def send(
    deps: Deps,
    cancel: Callable[[str], object],
    thread: str,
    message: str,
    *,
    agent: str,
    by: str | None = None,
    id: str | None = None,
    priority: int = 0,
) -> Run:
    """A user's ``message`` on ``thread``: the run it starts (module
    docstring of runner/core/threads.py for what the agent's
    ``on_new_message`` does with a run in progress). ``id`` makes the send
    idempotent: the same id again returns the same run and changes nothing."""
    check_message(thread, message)
    spec = deps.registry.get(agent)
    policy = Policy(spec.on_new_message)
    trigger_id = id or f"message:{uuid.uuid4()}"

    def make(active: Sequence[Run]) -> NewRun:
        payload = message_payload(message, by=by, policy=policy, active=[r.id for r in active])
        try:
            envelope = TriggerEnvelope(
                id=trigger_id,
                source=MESSAGE_SOURCE,
                trigger=MESSAGE_TRIGGER,
                payload=payload,
                thread=thread,
            )
        except pydantic.ValidationError as exc:
            raise InvalidInput(f"invalid message: {exc}") from None
        return NewRun(
            agent=spec.name,
            trigger=envelope,
            concurrency_key=spec.key_for(envelope),
            tenant=spec.tenant_for(envelope),
            priority=priority,
        )

    run, created, active = deps.store.start_on_thread(
        thread, make, refuse_if_busy=policy is Policy.REJECT
    )
    if not created:
        return run
    if policy in (Policy.INTERRUPT, Policy.ROLLBACK):
        for earlier in active:
            cancel(earlier.id)  # each stops at its next safe point; the key then frees
    deps.send([run.id], priority=run.priority)
    return run


def read(deps: Deps, thread: str) -> Thread:
    """The thread as a conversation (:class:`Thread`)."""
    check_message(thread, "-")
    runs = deps.store.thread_runs(thread)
    messages: list[Message] = []
    started = -1
    for n in range(len(runs) - 1, -1, -1):  # the newest run with a history holds it whole
        checkpoint = deps.store.checkpoint(runs[n].id)
        if checkpoint is not None:
            messages = list(checkpoint.messages)
            started = n
            break
    for later in runs[started + 1 :]:  # not started, or ended before a step
        messages.append(trigger_message(later.trigger))
    return Thread(thread, tuple(runs), tuple(_public(m) for m in messages))


def _public(message: Message) -> Message:
    """A message as a reader of the conversation gets it (a copy)."""
    found: dict[str, Any] = dict(message)
    return found
