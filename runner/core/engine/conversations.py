"""A thread as a conversation (docs/conversations.md, runner/core/threads.py):
a message sent to a thread, and the thread as its reader sees it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pydantic

from runner.core.engine.deps import Deps
from runner.core.errors import InvalidInput, InvalidTransition
from runner.core.steps.history import MESSAGE_SOURCE, MESSAGE_TRIGGER, trigger_message
from runner.core.threads import REQUESTER, Policy, check_message, message_payload
from store.models import Approval, Message, NewRun, RequestKind, Run, RunStatus, TriggerEnvelope


class Engine(Protocol):
    """What a thread's messages need of the engine."""

    @property
    def deps(self) -> Deps: ...

    def approvals(self, run_id: str) -> list[Approval]: ...

    def cancel(self, run_id: str, *, by: str | None = None, source: str | None = None) -> Any: ...

    def answer(
        self,
        request_id: str,
        value: Any,
        *,
        trusted: bool = False,
        by: str | None = None,
        source: str | None = None,
    ) -> Run: ...

    def decide(
        self,
        approval_id: str,
        approve: bool,
        reason: str | None = None,
        *,
        trusted: bool = False,
        by: str | None = None,
        source: str | None = None,
    ) -> Run: ...


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
    engine: Engine,
    thread: str,
    message: str,
    *,
    agent: str,
    by: str | None = None,
    id: str | None = None,
    priority: int = 0,
    source: str | None = None,
) -> Run:
    """A user's ``message`` on ``thread``: the answer to the question the
    thread's run in progress asks its user, if it asks one (``AskHuman(to=
    "requester")``), else the run it starts (module docstring of
    runner/core/threads.py for what the agent's ``on_new_message`` does
    with a run in progress). ``id`` makes a send that starts a run
    idempotent: the same id again returns the same run and changes nothing."""
    check_message(thread, message)
    deps = engine.deps
    question = next((a for a in for_requester(engine, thread) if a.kind is RequestKind.INPUT), None)
    if question is not None:
        return engine.answer(question.approval_id, message, trusted=True, by=by, source=source)
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
        for earlier in active:  # each stops at its next safe point; the key then frees
            engine.cancel(earlier.id, by=by, source=source)
    deps.send([run.id], priority=run.priority)
    return run


def for_requester(engine: Engine, thread: str) -> list[Approval]:
    """The open requests of the thread's run in progress that are addressed
    to the thread's own user, oldest first."""
    active = next((r for r in engine.deps.store.thread_runs(thread) if not r.status.ended), None)
    if active is None or active.status is not RunStatus.WAITING:
        return []
    return [a for a in engine.approvals(active.id) if a.pending and a.addressed_to == REQUESTER]


def decide_in_thread(
    engine: Engine,
    thread: str,
    request_id: str,
    *,
    approve: bool | None = None,
    answer: Any = None,
    reason: str | None = None,
    by: str | None = None,
    source: str | None = None,
) -> Run:
    """The thread's own user's decision on a request addressed to them: an
    approval (``approve``, ``reason``) or a question (``answer``). A request
    of another thread, or one not addressed to its user, is refused."""
    check_message(thread, "-")
    found = next((a for a in for_requester(engine, thread) if a.approval_id == request_id), None)
    if found is None:
        raise InvalidTransition(
            f"thread {thread!r} asks its user no open request {request_id!r}: it is another "
            "thread's, decided already, or addressed to the people who decide in the console"
        )
    if found.kind is RequestKind.INPUT:
        if answer is None:
            raise InvalidInput("a question is answered: give answer=")
        return engine.answer(request_id, answer, trusted=True, by=by, source=source)
    if approve is None:
        raise InvalidInput("an approval is decided: give approve=True or False")
    return engine.decide(request_id, approve, reason, trusted=True, by=by, source=source)


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
