"""Small builders shared by the tests."""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from store.memory import MemoryStore
from store.models import (
    Fence,
    NewApproval,
    NewRun,
    Outcome,
    RunStatus,
    StepCommit,
    StepKind,
    StepRecord,
    TriggerEnvelope,
    Usage,
    utcnow,
)
from store.postgres import PostgresStore

AnyStore = PostgresStore | MemoryStore


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


def claimed(store: AnyStore, *, owner: str = "worker-a", ttl: float = 30, **kwargs: Any) -> Fence:
    run, _ = store.create_run(new_run(**kwargs))
    claim = store.claim(run.id, owner, ttl)
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
    )


def approval(call_id: str, *, expires_in: float = 3600, notify_in: float = 0) -> NewApproval:
    now = utcnow()
    return NewApproval(
        tool_call_id=call_id,
        tool_name="refund",
        input={"amount": 10},
        expires_at=now + timedelta(seconds=expires_in),
        on_expire="deny",
        token_id="k1",
        next_notify_at=now + timedelta(seconds=notify_in),
    )


def msg(i: int, size: int = 0) -> dict[str, Any]:
    return {"role": "user", "content": f"message {i}" + "x" * size}


def snapshot(store: AnyStore) -> Any:
    """Everything the store holds, to compare before and after a refused write."""
    if isinstance(store, MemoryStore):
        return copy.deepcopy(
            (
                store._runs,
                store._steps,
                store._messages,
                store._checkpoints,
                store._effects,
                store._approvals,
            )
        )
    tables = {
        "runs": "id",
        "steps": "run_id, id",
        "messages": "run_id, seq",
        "checkpoints": "run_id",
        "effects": "run_id, key",
        "approvals": "approval_id",
    }
    with store.engine.connect() as conn:
        return {
            name: [
                tuple(row)
                for row in conn.execute(sa.text(f"SELECT * FROM {name} ORDER BY {order}"))
            ]
            for name, order in tables.items()
        }


# Moving a row past a point in time or into a status that no public call
# reaches, for tests that run on both stores.


def expire_approval(store: AnyStore, approval_id: str) -> None:
    """Put the approval's expiry a minute in the past."""
    if isinstance(store, MemoryStore):
        approval = store._approvals[approval_id]
        store._approvals[approval_id] = replace(
            approval, expires_at=utcnow() - timedelta(minutes=1)
        )
        return
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE approvals SET expires_at = now() - interval '1 minute'"
                " WHERE approval_id = :a"
            ),
            {"a": approval_id},
        )


def force_status(store: AnyStore, run_id: str, status: RunStatus) -> None:
    """Set the run's status directly, as a bug or an operator might."""
    if isinstance(store, MemoryStore):
        store._runs[run_id] = replace(store._runs[run_id], status=status)
        return
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE runs SET status = :s WHERE id = :id"),
            {"s": status.value, "id": run_id},
        )


def force_retry_due(store: AnyStore, run_id: str) -> None:
    """Move a run's retry_at into the past, as time passing would."""
    if isinstance(store, MemoryStore):
        run = store._runs[run_id]
        assert run.retry is not None
        past = utcnow() - timedelta(seconds=1)
        store._runs[run_id] = replace(run, retry=replace(run.retry, at=past))
        return
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE runs SET retry_at = now() - interval '1 second' WHERE id = :id"),
            {"id": run_id},
        )


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


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("condition not met in time")
