"""Small builders shared by the tests."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

import sqlalchemy as sa

from store.models import (
    Claim,
    Effect,
    Fence,
    NewApproval,
    NewRun,
    OnDeny,
    Outcome,
    RequestKind,
    Run,
    RunStatus,
    StandingApproval,
    StepCommit,
    StepKind,
    StepRecord,
    TriggerEnvelope,
    Usage,
    utcnow,
)
from store.postgres import PostgresStore
from store.rows import effect_from_row

T = TypeVar("T")


def new_run(
    agent: str = "triage",
    *,
    key: str | None = None,
    trigger_id: str | None = None,
    payload: Any = None,
    thread: str | None = None,
) -> NewRun:
    envelope = TriggerEnvelope(
        payload={"title": "App crashes on start"} if payload is None else payload,
        thread=thread,
        **({"id": trigger_id} if trigger_id else {}),
    )
    return NewRun(agent=agent, trigger=envelope, concurrency_key=key)


def try_claim(
    store: PostgresStore,
    run_id: str,
    owner: str,
    ttl: float,
    *,
    max_takeovers: int | None = None,
) -> Claim | None:
    """The claim ``claim_run`` took; None if it took none (the run was not
    claimable, or a takeover past the limit settled it)."""
    run = store.claim_run(run_id, owner, ttl, max_takeovers=max_takeovers)
    return run.claim if isinstance(run, Run) else None


def claimed(
    store: PostgresStore, *, owner: str = "worker-a", ttl: float = 30, **kwargs: Any
) -> Fence:
    run, _ = store.create_run(new_run(**kwargs))
    claim = try_claim(store, run.id, owner, ttl)
    assert claim is not None
    return Fence(run.id, owner, claim.epoch)


def llm_record(index: int, *, tokens: tuple[int, int] = (10, 5), text: str = "ok") -> StepRecord:
    now = utcnow()
    return StepRecord(
        index=index,
        kind=StepKind.LLM,
        started_at=now,
        finished_at=now,
        name="scripted/m",
        output={"role": "assistant", "content": text},
        usage=Usage(*tokens),
    )


def tool_record(index: int, call_id: str, output: Any = "done") -> StepRecord:
    now = utcnow()
    return StepRecord(
        index=index,
        kind=StepKind.TOOL,
        started_at=now,
        finished_at=now,
        name="lookup",
        tool_call_id=call_id,
        input={"q": call_id},
        output=output,
    )


def commit(
    index: int,
    base: int,
    messages: list[dict[str, Any]],
    *,
    tools: list[StepRecord] | None = None,
    outcome: Outcome | None = None,
    approvals: list[NewApproval] | None = None,
    state: Any = None,
    waits: bool = False,
    child_calls: list[str] | None = None,
) -> StepCommit:
    return StepCommit(
        step_index=index,
        base_count=base,
        new_messages=messages,
        finish_reason="tool_calls",
        tool_steps=tools or [],
        approvals=approvals or [],
        outcome=outcome,
        state=state,
        state_changed=state is not None,
        waits=waits,
        child_calls=child_calls or [],
    )


REFUND_SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "maximum": 1000}},
    "required": ["amount"],
    "additionalProperties": False,
}


def approval(
    call_id: str,
    *,
    expires_in: float = 3600,
    notify_in: float = 0,
    tool: str = "refund",
    kind: RequestKind = RequestKind.APPROVAL,
    on_deny: OnDeny = OnDeny.CONTINUE,
    granted: StandingApproval | None = None,
) -> NewApproval:
    now = utcnow()
    question = kind is RequestKind.INPUT
    return NewApproval(
        tool_call_id=call_id,
        tool_name=tool,
        input={"question": "Which order?"} if question else {"amount": 10},
        expires_at=now + timedelta(seconds=expires_in),
        on_expire="deny",
        token_id="k1",
        next_notify_at=now + timedelta(seconds=notify_in),
        kind=kind,
        schema={"type": "string", "minLength": 1} if question else REFUND_SCHEMA,
        on_deny=on_deny,
        granted=granted,
    )


def msg(i: int, size: int = 0) -> dict[str, Any]:
    return {"role": "user", "content": f"message {i}" + "x" * size}


def snapshot(store: PostgresStore) -> Any:
    """Everything the store holds, to compare before and after a refused write."""
    tables = {
        "runs": "id",
        "steps": "run_id, id",
        "messages": "run_id, seq",
        "checkpoints": "run_id",
        "effects": "run_id, key",
        "approvals": "approval_id",
        "standing_approvals": "run_id, tool_name",
        "datasets": "name, version",
        "dataset_cases": "name, version, position",
        "evaluations": "id",
        "evaluation_cases": "evaluation_id, position",
    }
    with store.engine.connect() as conn:
        return {
            name: [
                tuple(row)
                for row in conn.execute(sa.text(f"SELECT * FROM {name} ORDER BY {order}"))
            ]
            for name, order in tables.items()
        }


def journaled_effect(store: PostgresStore, run_id: str, key: str) -> Effect | None:
    """The effect journal's row for ``key``, as the run's next execution finds it
    (through ``begin_effect``); the store has no read of one effect, as no
    caller needs one."""
    with store.engine.connect() as conn:
        row = (
            conn.execute(
                sa.text("SELECT * FROM effects WHERE run_id = :run_id AND key = :key"),
                {"run_id": run_id, "key": key},
            )
            .mappings()
            .first()
        )
    return None if row is None else effect_from_row(row, sealing=store.sealing)


# Moving a row past a point in time or into a status that no public call reaches.


def expire_approval(store: PostgresStore, approval_id: str) -> None:
    """Put the approval's expiry a minute in the past."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE approvals SET expires_at = now() - interval '1 minute'"
                " WHERE approval_id = :a"
            ),
            {"a": approval_id},
        )


def force_status(store: PostgresStore, run_id: str, status: RunStatus) -> None:
    """Set the run's status directly, as a bug or an operator might."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE runs SET status = :s WHERE id = :id"),
            {"s": status.value, "id": run_id},
        )


def force_retry_due(store: PostgresStore, run_id: str) -> None:
    """Move a run's retry_at into the past, as time passing would."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE runs SET retry_at = now() - interval '1 second' WHERE id = :id"),
            {"id": run_id},
        )


def parked_run(
    store: PostgresStore,
    key: str,
    *,
    agent: str = "triage",
    tenant: str | None = None,
    until: timedelta = timedelta(minutes=1),
) -> Run:
    """A run parked on limit ``key`` for ``until``, as an execution parks it
    (claimed, then ``park``), of ``tenant``."""
    run, _ = store.create_run(replace(new_run(agent), tenant=tenant))
    claim = try_claim(store, run.id, "worker-a", 30)
    assert claim is not None
    ended = store.park(Fence(run.id, "worker-a", claim.epoch), key, utcnow() + until)
    assert ended.run.parked_key == key
    return ended.run


def unique(prefix: str) -> str:
    """A name no other test uses (agents and scripted models are process-wide)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def run_in_thread(engine: Any, run_id: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Execute the run on a thread; its result lands in the box under "run"."""
    box: dict[str, Any] = {}

    def target() -> None:
        box["run"] = engine.execute(run_id)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, box


# How long a test waits for what should happen at once before it fails: a
# safety net against a hang, not a measure. Tests check order and state; how
# long things take is for the benchmarks (bench/).
SAFETY_NET = 60.0


def wait_for(
    predicate: Callable[[], Any], timeout: float = SAFETY_NET, what: str = "the condition"
) -> None:
    """Return once ``predicate()`` holds; fail naming ``what`` if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"{what} never came ({timeout:.0f} s safety net)")


def joined(thread: threading.Thread, what: str, timeout: float = SAFETY_NET) -> None:
    """Join ``thread``; fail with ``what`` if it is still running when the
    safety net runs out (a hang, not a slow machine)."""
    thread.join(timeout)
    assert not thread.is_alive(), f"{what} ({timeout:.0f} s safety net)"


def finishes(work: Callable[[], T], what: str, timeout: float = SAFETY_NET) -> T:
    """``work()``'s result, called on a thread of its own; fail with ``what``
    if it has not returned when the safety net runs out (it hangs)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = work()
        except BaseException as exc:  # handed back to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    joined(thread, what, timeout)
    if "error" in box:
        raise box["error"]
    return box["result"]  # type: ignore[no-any-return]


def regex_timeouts(monkeypatch: Any) -> list[float | None]:
    """The timeouts of the ``regex`` module's searches from now on, in order:
    the bounded schema check (runner/core/schemas.py) gives each what is left of
    its one deadline."""
    import regex

    given: list[float | None] = []
    search = regex.search

    def spied(pattern: Any, text: Any, *args: Any, timeout: float | None = None, **kw: Any) -> Any:
        given.append(timeout)
        return search(pattern, text, *args, timeout=timeout, **kw)

    monkeypatch.setattr(regex, "search", spied)
    return given


class StreamClock:
    """The time the event streams read (runner/core/events/eventstream.py): it
    moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0

    def monotonic(self) -> float:
        self.reads += 1
        return self.now

    def read_again(self) -> None:
        """Return once a reader has looked at the clock since this call."""
        seen = self.reads
        wait_for(lambda: self.reads > seen, what="the stream's next look at its clock")
