"""The store's contract, run three times: with prepared statements (the
default), without (``RUNWRIGHT_DB_PREPARED=false``, for PgBouncer in
transaction mode), and with its payload columns sealed by a key ring
(``RUNWRIGHT_ENCRYPTION_KEYS``, store/sealing.py). Every call goes through a
recorder, and the last test checks that each public method of
``PostgresStore`` returned normally at least once in each mode (running
itself, in this process, the tests that ran elsewhere); a key rotation's
batch, in the sealed mode only.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from runner.core import faults
from runner.core.keyring import CannotDecrypt, KeyRing, new_key
from store.db import make_engine
from store.errors import (
    ApprovalError,
    CheckpointConflict,
    DatasetNotFound,
    EvaluationNotFound,
    InvalidInput,
    InvalidTransition,
    LeaseLostError,
    PayloadTooLarge,
    RunNotFound,
    ScheduleNotFound,
    ThreadBusy,
    WrongRequestKind,
)
from store.events import EventType
from store.models import (
    AdmissionVerdict,
    BudgetBound,
    Decision,
    EffectOutcome,
    EffectStatus,
    Ended,
    EvaluationCaseStatus,
    EvaluationStatus,
    Fence,
    FiringOutcome,
    Interruption,
    NewChild,
    NewRun,
    OnDeny,
    Outcome,
    Overlap,
    ParkedKey,
    RequestKind,
    RetryWait,
    Run,
    RunError,
    RunStatus,
    Schedule,
    StepKind,
    TriggerEnvelope,
    Usage,
    utcnow,
)
from store.pg.schedules import DueFiring, FiringPlan
from store.postgres import PostgresStore
from tests.helpers import (
    REFUND_SCHEMA,
    approval,
    claimed,
    commit,
    force_retry_due,
    journaled_effect,
    llm_record,
    msg,
    new_run,
    snapshot,
    tool_record,
    try_claim,
)
from tests.marked_runs import found
from tests.services import Services

KINDS = ("postgres", "postgres-unprepared", "postgres-sealed")
# The sealed mode's key ring: the first key seals, the second only opens.
NOW_KEY, BEFORE_KEY = new_key(), new_key()
RING = KeyRing.parse(f"now:{NOW_KEY},before:{BEFORE_KEY}")
# A key rotation's public method returns normally only where there is a ring.
SEALED_ONLY = {"reseal"}
# Every public method of the store (from_url builds one: the fixtures use it).
PUBLIC_METHODS = sorted(
    name
    for name, value in inspect.getmembers(PostgresStore)
    if callable(value) and not name.startswith("_") and name != "from_url"
)
# Mode -> the public methods that returned normally in it.
SUCCEEDED: dict[str, set[str]] = {kind: set() for kind in KINDS}


class Recording:
    """A store that records which public methods returned normally."""

    def __init__(self, store: PostgresStore, kind: str) -> None:
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "_kind", kind)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name not in PUBLIC_METHODS:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            result = value(*args, **kwargs)
            SUCCEEDED[self._kind].add(name)
            return result

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._store, name, value)


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest) -> Any:
    """This module's own store: the conftest's ``pg_store``, and one without
    prepared statements, each behind a recorder."""
    store: PostgresStore
    if request.param == "postgres":
        store = request.getfixturevalue("pg_store")
    else:
        url = request.getfixturevalue("database_url")
        store = _store(url, request.param)
        request.addfinalizer(store.close)
    return Recording(store, request.param)


def _store(url: str, kind: str) -> PostgresStore:
    engine = make_engine(url, pool_size=5, prepared=kind != "postgres-unprepared")
    return PostgresStore(engine, cipher=RING if kind == "postgres-sealed" else None)


def test_create_is_idempotent_on_trigger_id_per_agent(store: PostgresStore) -> None:
    first, created = store.create_run(new_run(trigger_id="evt-1"))
    again, created_again = store.create_run(new_run(trigger_id="evt-1"))
    other_agent, created_other = store.create_run(new_run("other", trigger_id="evt-1"))
    assert created and not created_again and created_other
    assert again.id == first.id
    assert other_agent.id != first.id
    assert first.status is RunStatus.QUEUED
    assert first.trigger.payload == {"title": "App crashes on start"}
    assert store.get_run(first.id).trigger == first.trigger
    assert store.run_by_trigger("triage", "evt-1") == store.get_run(first.id)
    assert store.run_by_trigger("triage", "evt-2") is None
    with pytest.raises(InvalidInput):
        store.run_by_trigger("triage", "evt\x00")


def test_unknown_run_ids_raise_run_not_found(store: PostgresStore) -> None:
    for bad in (str(uuid.uuid4()), "not-a-uuid", ""):
        with pytest.raises(RunNotFound, match="no run with id"):
            store.get_run(bad)
        with pytest.raises(RunNotFound):
            store.steps(bad)
        with pytest.raises(RunNotFound):
            store.request_cancel(bad)
        with pytest.raises(RunNotFound):
            try_claim(store, bad, "w", 10)


def test_bad_input_changes_nothing(store: PostgresStore) -> None:
    store.max_payload_bytes = 1000
    fence = claimed(store)
    before = snapshot(store)
    with pytest.raises(PayloadTooLarge, match="limit is 1000"):
        store.create_run(new_run(payload={"blob": "x" * 2000}))
    with pytest.raises(InvalidInput, match="not JSON"):
        store.create_run(new_run(payload={"when": object()}))
    with pytest.raises(InvalidTransition):
        store.end(fence, Outcome(RunStatus.QUEUED))
    with pytest.raises(InvalidTransition, match="not waiting"):
        store.fail_waiting(fence.run_id, RunError("x", "y"))
    with pytest.raises(RunNotFound):
        store.get_run(str(uuid.uuid4()))
    assert snapshot(store) == before


def test_claim_moves_to_running_and_raises_the_epoch(store: PostgresStore) -> None:
    run, _ = store.create_run(new_run())
    claim = try_claim(store, run.id, "a", 30)
    assert claim is not None and claim.epoch == 1 and claim.owner == "a"
    assert try_claim(store, run.id, "b", 30) is None  # claim still valid
    running = store.get_run(run.id)
    assert running.status is RunStatus.RUNNING and running.claim == claim
    assert running.started_at is not None
    store.end(Fence(run.id, "a", 1), Outcome(RunStatus.INTERRUPTED))
    interrupted = store.get_run(run.id)
    assert interrupted.status is RunStatus.INTERRUPTED and interrupted.claim is None
    again = try_claim(store, run.id, "b", 30)
    assert again is not None and again.epoch == 2


def test_an_interruption_records_why_and_whose_until_the_next_outcome(
    store: PostgresStore,
) -> None:
    run, _ = store.create_run(new_run())
    assert try_claim(store, run.id, "host:1:aa", 30) is not None
    store.end(
        Fence(run.id, "host:1:aa", 1),
        Outcome(RunStatus.INTERRUPTED, interruption=Interruption.DRAIN),
    )
    drained = store.get_run(run.id)
    assert (drained.interrupted_reason, drained.interrupted_by) == (Interruption.DRAIN, "host:1:aa")
    assert try_claim(store, run.id, "host:2:bb", 30) is not None
    store.end(Fence(run.id, "host:2:bb", 2), Outcome(RunStatus.COMPLETED, output="ok"))
    done = store.get_run(run.id)
    assert (done.interrupted_reason, done.interrupted_by) == (None, None)
    # Only an interrupted outcome carries a reason.
    other, _ = store.create_run(new_run())
    assert try_claim(store, other.id, "host:3:cc", 30) is not None
    store.end(
        Fence(other.id, "host:3:cc", 1),
        Outcome(RunStatus.COMPLETED, output="ok", interruption=Interruption.DRAIN),
    )
    assert store.get_run(other.id).interrupted_reason is None


def test_expired_claim_is_taken_over_with_epoch_plus_one(store: PostgresStore) -> None:
    fence = claimed(store, ttl=0.05)
    time.sleep(0.15)
    takeover = try_claim(store, fence.run_id, "worker-b", 30)
    assert takeover is not None and takeover.epoch == fence.epoch + 1


def test_stale_owner_is_fenced_out_and_writes_nothing(store: PostgresStore) -> None:
    old = claimed(store, ttl=0.05)
    store.record_llm_step(old, llm_record(1))
    store.commit_step(old, commit(1, 0, [msg(0), msg(1)], tools=[tool_record(1, "c1")]))
    store.begin_effect(old, "k1", "refund", {}, rerun_started=False)
    time.sleep(0.15)
    new = try_claim(store, old.run_id, "worker-b", 30)
    assert new is not None
    before = snapshot(store)
    attempts = [
        lambda: store.renew(old, 30),
        lambda: store.record_llm_step(old, llm_record(2)),
        lambda: store.commit_step(old, commit(2, 2, [msg(2)])),
        lambda: store.commit_step(old, commit(2, 2, [msg(2)], approvals=[approval("c9")])),
        lambda: store.end(old, Outcome(RunStatus.COMPLETED, output="x")),
        lambda: store.begin_effect(old, "k2", "refund", {}, rerun_started=False),
        lambda: store.finish_effect(old, "k1", output="late"),
        lambda: store.withdraw_effect(old, "k1"),
        lambda: store.start_children(old, [_child(old, "c1")]),
        lambda: store.record_llm_step(old, llm_record(2), rolls_up=True),
        lambda: store.defer_missing_agent(old, 600),
    ]
    for attempt in attempts:
        with pytest.raises(LeaseLostError, match="no longer claimed"):
            attempt()
    assert snapshot(store) == before
    # The new owner's writes go through.
    store.record_llm_step(Fence(old.run_id, "worker-b", new.epoch), llm_record(2))


def test_settled_run_refuses_writes(store: PostgresStore) -> None:
    fence = claimed(store)
    settled = store.end(fence, Outcome(RunStatus.COMPLETED, output={"answer": 42}))
    assert settled.run.status is RunStatus.COMPLETED
    assert settled.run.output == {"answer": 42}
    assert settled.run.finished_at is not None and settled.run.claim is None
    before = snapshot(store)
    with pytest.raises(LeaseLostError):
        store.record_llm_step(fence, llm_record(1))
    with pytest.raises(LeaseLostError):
        store.commit_step(fence, commit(1, 0, [msg(0)]))
    with pytest.raises(LeaseLostError):
        store.end(fence, Outcome(RunStatus.FAILED, error=RunError("x", "y")))
    assert try_claim(store, fence.run_id, "other", 30) is None
    assert snapshot(store) == before


def test_llm_step_is_recorded_once_and_usage_counted_once(store: PostgresStore) -> None:
    fence = claimed(store)
    assert store.record_llm_step(fence, llm_record(1, tokens=(100, 20)))
    assert not store.record_llm_step(fence, llm_record(1, tokens=(100, 20)))
    run = store.get_run(fence.run_id)
    assert run.usage == Usage(100, 20)
    assert run.steps_used == 1
    step = store.llm_step(fence.run_id, 1)
    assert step is not None and step.kind is StepKind.LLM and step.usage == Usage(100, 20)
    assert step.output == {"role": "assistant", "content": "ok"}
    assert store.llm_step(fence.run_id, 2) is None


def test_checkpoint_append_replace_and_refuse(store: PostgresStore) -> None:
    fence = claimed(store)
    history = [msg(i) for i in range(3)]
    store.commit_step(fence, commit(1, 0, history, tools=[tool_record(1, "c1")]))
    store.commit_step(fence, commit(2, 3, [msg(3), msg(4)]))
    cp = store.checkpoint(fence.run_id)
    assert cp is not None and cp.step_index == 2
    assert cp.messages == [msg(i) for i in range(5)]

    # Equal index replaces: truncate to the old count (3), then append.
    store.commit_step(fence, commit(2, 3, [msg(30), msg(40), msg(50)]))
    cp = store.checkpoint(fence.run_id)
    assert cp is not None and cp.step_index == 2
    assert cp.messages == [msg(0), msg(1), msg(2), msg(30), msg(40), msg(50)]
    if not hasattr(store, "_messages"):
        with store.engine.connect() as conn:
            import sqlalchemy as sa

            stored = conn.execute(
                sa.text("SELECT count(*) FROM messages WHERE run_id = :r"), {"r": fence.run_id}
            ).scalar_one()
        assert stored == 6  # the log holds exactly the checkpoint, nothing stale

    # A replace that shortens drops what lies past the new count; the next
    # step appends after it as usual.
    store.commit_step(fence, commit(2, 1, [msg(10)]))
    store.commit_step(fence, commit(3, 2, [msg(20)]))
    cp = store.checkpoint(fence.run_id)
    assert cp is not None and cp.step_index == 3
    assert cp.messages == [msg(0), msg(10), msg(20)]

    before = snapshot(store)
    with pytest.raises(CheckpointConflict, match="refusing step 2"):
        store.commit_step(fence, commit(2, 0, [msg(99)]))
    with pytest.raises(CheckpointConflict, match="cannot extend"):
        store.commit_step(fence, commit(3, 10, [msg(99)]))
    assert snapshot(store) == before

    steps = store.steps(fence.run_id)
    assert [(s.kind, s.index, s.tool_call_id) for s in steps] == [(StepKind.TOOL, 1, "c1")]


def test_a_refused_commit_changes_nothing_though_it_settles_and_asks(
    store: PostgresStore,
) -> None:
    """Each commit statement is a transaction of its own (issue 31): one the
    checkpoint rule refuses must not move the run's state or outcome, ask for
    approvals or write tool steps on its way to refusing."""
    fence = claimed(store)
    store.commit_step(fence, commit(1, 0, [msg(0), msg(1)], state={"count": 1}))
    before = snapshot(store)
    for refused in (
        commit(0, 0, [msg(9)], state={"count": 9}, outcome=Outcome(RunStatus.COMPLETED)),
        commit(2, 5, [msg(9)], tools=[tool_record(2, "c9")], approvals=[approval("c9")]),
        commit(2, 7, [msg(9)], outcome=Outcome(RunStatus.FAILED, error=RunError("x", "y"))),
    ):
        with pytest.raises(CheckpointConflict):
            store.commit_step(fence, refused)
        assert snapshot(store) == before
    run = store.get_run(fence.run_id)
    assert run.status is RunStatus.RUNNING and run.state == {"count": 1}


def test_commit_with_outcome_settles_and_records_state(store: PostgresStore) -> None:
    fence = claimed(store)
    settled = store.commit_step(
        fence,
        commit(
            1,
            0,
            [msg(0), {"role": "assistant", "content": "done"}],
            state={"count": 1},
            outcome=Outcome(RunStatus.COMPLETED, output="done"),
        ),
    )
    assert settled is not None
    assert settled.run.status is RunStatus.COMPLETED
    assert settled.run.output == "done"
    assert settled.run.state == {"count": 1}


def test_concurrency_key_one_holder_oldest_first(store: PostgresStore) -> None:
    older, _ = store.create_run(new_run(key="customer:7"))
    newer, _ = store.create_run(new_run(key="customer:7"))
    assert try_claim(store, newer.id, "w", 30) is None  # older is ahead of it
    claim = try_claim(store, older.id, "w", 30)
    assert claim is not None
    assert try_claim(store, newer.id, "w", 30) is None  # key held
    fence = Fence(older.id, "w", claim.epoch)
    waiting = store.commit_step(fence, commit(1, 0, [msg(0)], approvals=[approval("c1")]))
    assert store.get_run(older.id).status is RunStatus.WAITING
    # Waiting keeps the key: nobody is next in it.
    assert waiting is not None and waiting.next_in_key is None
    assert try_claim(store, newer.id, "w", 30) is None
    result = store.request_cancel(older.id)
    assert result.action == "cancelled" and result.next_in_key == newer.id
    assert try_claim(store, newer.id, "w", 30) is not None


def _minted_at(ms: int) -> str:
    """A UUIDv7 as a server whose clock read ``ms`` would mint it."""
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms << 80) | (0x7 << 76) | ((rand >> 62) & 0xFFF) << 64 | (0b10 << 62)
    return str(uuid.UUID(int=value | (rand & ((1 << 62) - 1))))


def test_a_keys_runs_go_in_the_order_the_database_took_them_not_their_ids(
    store: PostgresStore,
) -> None:
    # The second run comes from a web server whose clock is a minute behind:
    # its id sorts first, but it arrived second.
    now_ms = int(time.time() * 1000)
    first, _ = store.create_run(
        dataclasses.replace(new_run(key="customer:9"), id=_minted_at(now_ms))
    )
    second, _ = store.create_run(
        dataclasses.replace(new_run(key="customer:9"), id=_minted_at(now_ms - 60_000))
    )
    assert second.id < first.id
    assert try_claim(store, second.id, "w", 30) is None  # the first is ahead of it
    claim = try_claim(store, first.id, "w", 30)
    assert claim is not None
    settled = store.end(Fence(first.id, "w", claim.epoch), Outcome(RunStatus.COMPLETED))
    assert settled.next_in_key == second.id
    assert try_claim(store, second.id, "w", 30) is not None


def test_effect_journal(store: PostgresStore) -> None:
    fence = claimed(store)
    key = f"{fence.run_id}:call_1"
    first = store.begin_effect(fence, key, "refund", {"amount": 5}, rerun_started=False)
    assert first.execute and first.effect.status is EffectStatus.STARTED
    # The same execution retrying its write (e.g. an ambiguous commit) may go on.
    retried = store.begin_effect(fence, key, "refund", {"amount": 5}, rerun_started=False)
    assert retried.execute and retried.effect.attempts == 1

    # A later execution finds it started by one that died: at-most-once by default.
    store.end(fence, Outcome(RunStatus.INTERRUPTED))
    claim = try_claim(store, fence.run_id, "worker-b", 30)
    assert claim is not None
    later = Fence(fence.run_id, "worker-b", claim.epoch)
    again = store.begin_effect(later, key, "refund", {"amount": 5}, rerun_started=False)
    assert not again.execute and again.effect.status is EffectStatus.STARTED
    rerun = store.begin_effect(later, key, "refund", {"amount": 5}, rerun_started=True)
    assert rerun.execute and rerun.effect.attempts == 2 and rerun.effect.epoch == later.epoch
    done = store.finish_effect(later, key, output={"refund_id": "r1"})
    assert done.status is EffectStatus.COMPLETED and done.output == {"refund_id": "r1"}
    after = store.begin_effect(later, key, "refund", {"amount": 5}, rerun_started=True)
    assert not after.execute and after.effect.output == {"refund_id": "r1"}
    failed_key = f"{fence.run_id}:call_2"
    store.begin_effect(later, failed_key, "refund", {}, rerun_started=False)
    failed = store.finish_effect(later, failed_key, error="card declined")
    assert failed.status is EffectStatus.FAILED and failed.error == "card declined"
    with pytest.raises(InvalidTransition):
        store.finish_effect(later, f"{fence.run_id}:never", output=1)
    journal = store.effects(fence.run_id)
    assert [(e.key, e.status, e.attempts) for e in journal] == [
        (key, EffectStatus.COMPLETED, 2),
        (failed_key, EffectStatus.FAILED, 1),
    ]
    with pytest.raises(RunNotFound):
        store.effects(str(uuid.uuid4()))
    # By the calls an open step asks about: those journaled, by call id.
    found = store.journaled_effects(fence.run_id, ["call_1", "call_2", "call_3"])
    assert {c: e.status for c, e in found.items()} == {
        "call_1": EffectStatus.COMPLETED,
        "call_2": EffectStatus.FAILED,
    }


def test_a_started_effect_whose_call_never_went_out_is_withdrawn(store: PostgresStore) -> None:
    fence = claimed(store)
    key, rerun_key = f"{fence.run_id}:call_1", f"{fence.run_id}:call_2"
    store.begin_effect(fence, key, "refund", {"amount": 5}, rerun_started=False)
    assert store.withdraw_effect(fence, key)
    assert store.effects(fence.run_id) == []
    # Begun again, it is a fresh first attempt that goes out.
    fresh = store.begin_effect(fence, key, "refund", {"amount": 5}, rerun_started=False)
    assert fresh.execute and fresh.effect.attempts == 1
    store.finish_effect(fence, key, output={"refund_id": "r1"})
    assert not store.withdraw_effect(fence, key)  # a finished effect stays
    # Another epoch's start, and a rerun's, may have run: they stay.
    store.begin_effect(fence, rerun_key, "refund", {}, rerun_started=False)
    store.end(fence, Outcome(RunStatus.INTERRUPTED))
    claim = try_claim(store, fence.run_id, "worker-b", 30)
    assert claim is not None
    later = Fence(fence.run_id, "worker-b", claim.epoch)
    assert not store.withdraw_effect(later, rerun_key)
    store.begin_effect(later, rerun_key, "refund", {}, rerun_started=True)
    assert not store.withdraw_effect(later, rerun_key)
    assert [(e.key, e.status, e.attempts) for e in store.effects(fence.run_id)] == [
        (key, EffectStatus.COMPLETED, 1),
        (rerun_key, EffectStatus.STARTED, 2),
    ]


def test_an_effect_of_unknown_outcome_flags_its_run_until_resolved(store: PostgresStore) -> None:
    fence = claimed(store)
    key = f"{fence.run_id}:call_9"
    store.begin_effect(fence, key, "refund", {"amount": 5}, rerun_started=False)
    store.end(fence, Outcome(RunStatus.INTERRUPTED))  # as a takeover finds it
    claim = try_claim(store, fence.run_id, "worker-b", 30)
    assert claim is not None
    later = Fence(fence.run_id, "worker-b", claim.epoch)
    with pytest.raises(LeaseLostError):
        store.mark_effect_unknown(fence, key)  # the dead epoch writes nothing
    marked = store.mark_effect_unknown(later, key)
    assert marked.status is EffectStatus.UNKNOWN and marked.unresolved and marked.epoch == 1
    assert store.get_run(fence.run_id).needs_attention
    assert store.unresolved_effects() == 1
    assert [e.key for e in store.unknown_effects(fence.run_id)] == [key]
    done_key = f"{fence.run_id}:call_10"
    store.begin_effect(later, done_key, "refund", {}, rerun_started=False)
    store.finish_effect(later, done_key, output=1)
    with pytest.raises(InvalidTransition, match="outcome is known"):
        store.mark_effect_unknown(later, done_key)

    resolved = store.resolve_effect(fence.run_id, "call_9", "not_done", note="no", by="ana")
    assert resolved.resolved_outcome is EffectOutcome.NOT_DONE and not resolved.unresolved
    assert not store.get_run(fence.run_id).needs_attention
    assert store.unresolved_effects() == 0
    # Found again by a later execution, a resolved effect flags nothing.
    assert not store.mark_effect_unknown(later, key).unresolved
    assert not store.get_run(fence.run_id).needs_attention


def test_cancel_by_status(store: PostgresStore) -> None:
    queued, _ = store.create_run(new_run())
    result = store.request_cancel(queued.id)
    assert result.action == "cancelled" and result.run.status is RunStatus.CANCELLED
    assert store.request_cancel(queued.id).action == "settled"

    fence = claimed(store)
    result = store.request_cancel(fence.run_id)
    assert result.action == "requested" and result.run.status is RunStatus.RUNNING
    assert store.renew(fence, 30) is True


def test_waiting_run_and_decisions(store: PostgresStore) -> None:
    fence = claimed(store)
    store.commit_step(fence, commit(1, 0, [msg(0), msg(1)]))
    assert store.record_llm_step(fence, llm_record(2))
    first, second = approval("c1"), approval("c2")
    settled = store.commit_step(fence, commit(2, 2, [msg(2)], approvals=[first, second]))
    assert settled is not None and settled.run.status is RunStatus.WAITING
    run = store.get_run(fence.run_id)
    assert run.waiting is not None and run.waiting.approval_id == first.approval_id
    assert run.waiting.tool_name == "refund" and run.claim is None
    assert [s.kind for s in store.steps(fence.run_id)][-1] is StepKind.WAIT

    response = {"role": "approval_response", "approval_id": first.approval_id, "approved": True}
    result = store.decide(first.approval_id, Decision.APPROVED, "ok", lambda _: response)
    assert not result.resumed and result.run.status is RunStatus.WAITING
    assert result.run.waiting is not None
    assert result.run.waiting.approval_id == second.approval_id
    with pytest.raises(ApprovalError, match="already approved"):
        store.decide(first.approval_id, Decision.DENIED, None, lambda _: response)

    response2 = {"role": "approval_response", "approval_id": second.approval_id}
    result = store.decide(second.approval_id, Decision.DENIED, "too much", lambda _: response2)
    assert result.resumed and result.run.status is RunStatus.QUEUED
    cp = store.checkpoint(fence.run_id)
    assert cp is not None and cp.step_index == 2  # same index: the seed's replace rule
    assert cp.messages[-2:] == [response, response2]
    with pytest.raises(ApprovalError, match="no approval"):
        store.get_approval(str(uuid.uuid4()))


def _record(decided: Any) -> dict[str, Any]:
    """A decision's history entry, as the engine writes it (runner/core/steps/history.py)."""
    return {
        "role": "approval_response",
        "approval_id": decided.approval_id,
        "arguments": decided.arguments,
        "answer": decided.answer,
    }


def test_edits_answers_and_a_tool_approved_for_the_run(store: PostgresStore) -> None:
    """Three calls of one tool and a question in one step: the first approved
    with edited arguments and for the rest of the run, which approves the
    second and third with it (by that person's grant); the question takes an
    answer only, and its answer resumes the run."""
    fence = claimed(store)
    assert store.record_llm_step(fence, llm_record(1))
    first, second, third = approval("c1"), approval("c2"), approval("c3")
    other_tool = approval("c4", tool="lookup")
    question = approval("q1", tool="ask_human", kind=RequestKind.INPUT)
    asked = [first, second, third, other_tool, question]
    store.commit_step(fence, commit(1, 0, [msg(0), msg(1)], approvals=asked))
    assert store.get_approval(question.approval_id).kind is RequestKind.INPUT
    assert store.get_approval(first.approval_id).schema == REFUND_SCHEMA
    assert store.standing_approvals(fence.run_id) == []

    before = snapshot(store)
    with pytest.raises(WrongRequestKind, match="is a question"):
        store.decide(question.approval_id, Decision.APPROVED, None, _record)
    with pytest.raises(WrongRequestKind, match="takes no answer"):
        store.decide(first.approval_id, Decision.ANSWERED, None, _record, answer="yes")
    with pytest.raises(WrongRequestKind, match="not a denial"):
        store.decide(first.approval_id, Decision.DENIED, None, _record, for_run=True)
    assert snapshot(store) == before

    result = store.decide(
        first.approval_id,
        Decision.APPROVED,
        None,
        _record,
        by="ada",
        arguments={"amount": 5},
        for_run=True,
    )
    assert result.approval.arguments == {"amount": 5} and result.approval.edited
    assert result.approval.input == {"amount": 10}  # the model's, kept
    assert result.approval.for_run
    assert {a.approval_id for a in result.also} == {second.approval_id, third.approval_id}
    for also in result.also:
        assert also.decision is Decision.APPROVED and also.decided_by == "ada"
        assert also.standing_from == first.approval_id and not also.for_run
    [grant] = store.standing_approvals(fence.run_id)
    assert (grant.tool_name, grant.approval_id, grant.granted_by) == (
        "refund",
        first.approval_id,
        "ada",
    )
    # The other tool and the question still wait.
    assert not result.resumed and result.run.status is RunStatus.WAITING
    assert store.get_approval(other_tool.approval_id).pending
    store.decide(other_tool.approval_id, Decision.DENIED, "no", _record, by="bo")

    answered = store.decide(
        question.approval_id, Decision.ANSWERED, None, _record, by="cy", answer="order 7"
    )
    assert answered.resumed and answered.run.status is RunStatus.QUEUED
    assert answered.approval.answer == "order 7" and answered.approval.decided_by == "cy"
    cp = store.checkpoint(fence.run_id)
    assert cp is not None
    assert [m["approval_id"] for m in cp.messages[2:]] == [
        first.approval_id,
        second.approval_id,
        third.approval_id,
        other_tool.approval_id,
        question.approval_id,
    ]
    assert cp.messages[2]["arguments"] == {"amount": 5}
    # The event feed says what each person did.
    decided = {
        e.data["approval_id"]: e.data
        for e in store.events(fence.run_id)
        if e.type.value == "approval" and e.data["action"] == "decided"
    }
    edit = decided[first.approval_id]
    assert (edit["edited"], edit["input"], edit["arguments"], edit["decided_by"]) == (
        True,
        {"amount": 10},
        {"amount": 5},
        "ada",
    )
    assert edit["for_run"] is True and edit["kind"] == "approval"
    assert decided[second.approval_id]["standing_from"] == first.approval_id
    assert decided[question.approval_id]["answer"] == "order 7"
    assert decided[question.approval_id]["kind"] == "input"


def test_a_grant_leaves_an_expired_call_to_its_expiry(store: PostgresStore) -> None:
    fence = claimed(store)
    first, late = approval("c1"), approval("c2", expires_in=-1)
    store.commit_step(fence, commit(1, 0, [msg(0)], approvals=[first, late]))
    result = store.decide(first.approval_id, Decision.APPROVED, None, _record, for_run=True)
    assert result.also == () and not result.resumed
    assert store.get_approval(late.approval_id).pending
    assert [a.approval_id for a in store.expired_approvals(10)] == [late.approval_id]


def test_a_step_a_standing_approval_decides_does_not_wait(store: PostgresStore) -> None:
    """A later call of a tool approved for the run: its approval row is
    written decided by the grant, and the step goes on without waiting."""
    fence = claimed(store)
    first = approval("c1")
    store.commit_step(fence, commit(1, 0, [msg(0)], approvals=[first]))
    store.decide(first.approval_id, Decision.APPROVED, None, _record, by="ada", for_run=True)
    claim = try_claim(store, fence.run_id, "w2", 30)
    assert claim is not None
    again = Fence(fence.run_id, "w2", claim.epoch)
    [grant] = store.standing_approvals(fence.run_id)
    later = approval("c2", granted=grant)
    settled = store.commit_step(again, commit(2, 2, [msg(2)], approvals=[later]))
    assert settled is None and store.get_run(fence.run_id).status is RunStatus.RUNNING
    recorded = store.get_approval(later.approval_id)
    assert recorded.decision is Decision.APPROVED and recorded.decided_by == "ada"
    assert recorded.standing_from == first.approval_id and recorded.decided_at is not None
    assert recorded.next_notify_at is None  # nobody is asked
    assert [s.kind for s in store.steps(fence.run_id)].count(StepKind.WAIT) == 1


def test_a_denial_that_ends_the_run(store: PostgresStore) -> None:
    """``on_deny="fail"``: a person's denial fails the run (the step's other
    approvals withdrawn); the engine's own denial of an expiry does not."""
    fence = claimed(store)
    strict, other = approval("c1", on_deny=OnDeny.FAIL), approval("c2")
    store.commit_step(fence, commit(1, 0, [msg(0)], approvals=[strict, other]))
    result = store.decide(strict.approval_id, Decision.DENIED, "not today", _record, by="bo")
    assert result.ended is not None and not result.resumed
    run = store.get_run(fence.run_id)
    assert run.status is RunStatus.FAILED and run.error is not None
    assert run.error.code == "approval_denied"
    assert "bo denied refund" in run.error.message and "not today" in run.error.message
    assert store.get_approval(other.approval_id).decision is Decision.WITHDRAWN

    expiring = claimed(store)
    late = approval("c1", on_deny=OnDeny.FAIL, expires_in=-1)
    store.commit_step(expiring, commit(1, 0, [msg(0)], approvals=[late]))
    expired = store.decide(
        late.approval_id, Decision.DENIED, "expired", _record, allow_expired=True
    )
    assert expired.ended is None and expired.resumed


def test_a_retry_asks_again_unless_it_keeps_the_standing_approvals(store: PostgresStore) -> None:
    fence = claimed(store)
    first = approval("c1")
    store.commit_step(fence, commit(1, 0, [msg(0)], approvals=[first]))
    store.decide(first.approval_id, Decision.APPROVED, None, _record, by="ada", for_run=True)
    store.request_cancel(fence.run_id)  # queued: settled cancelled at once
    assert store.retry_run(fence.run_id, keep_standing=True).retried
    assert [g.tool_name for g in store.standing_approvals(fence.run_id)] == ["refund"]
    new = new_run(trigger_id="fork-keeps-" + fence.run_id)
    fork = store.fork_run(fence.run_id, 1, new, model=None, keep_standing=True)
    assert [g.granted_by for g in store.standing_approvals(fork.id)] == ["ada"]
    plain = store.fork_run(
        fence.run_id, 1, new_run(trigger_id="fork-of-" + fence.run_id), model=None
    )
    assert store.standing_approvals(plain.id) == []
    store.request_cancel(fence.run_id)
    assert store.retry_run(fence.run_id).retried
    assert store.standing_approvals(fence.run_id) == []


def test_expired_approval_cannot_be_decided_but_expiry_can(store: PostgresStore) -> None:
    fence = claimed(store)
    expiring = approval("c1", expires_in=-1)
    store.commit_step(fence, commit(1, 0, [msg(0)], approvals=[expiring]))
    before = snapshot(store)
    with pytest.raises(ApprovalError, match="expired"):
        store.decide(expiring.approval_id, Decision.APPROVED, None, lambda _: {"role": "x"})
    assert snapshot(store) == before
    assert [a.approval_id for a in store.expired_approvals(10)] == [expiring.approval_id]
    result = store.decide(
        expiring.approval_id,
        Decision.DENIED,
        "expired",
        lambda _: {"role": "x"},
        allow_expired=True,
    )
    assert result.resumed
    assert store.expired_approvals(10) == []


def test_due_notifications_claimed_once_with_backoff(store: PostgresStore) -> None:
    fence = claimed(store)
    due = approval("c1", notify_in=-1)
    store.commit_step(fence, commit(1, 0, [msg(0)], approvals=[due]))
    now = utcnow()
    claimed_now = store.claim_due_notifications(10, 5, 60, now=now)
    assert [n.approval.approval_id for n in claimed_now] == [due.approval_id]
    assert claimed_now[0].agent == "triage"
    assert claimed_now[0].approval.attempts == 1
    assert store.claim_due_notifications(10, 5, 60, now=now) == []
    later = store.claim_due_notifications(10, 5, 60, now=now + timedelta(seconds=6))
    assert later and later[0].approval.attempts == 2
    store.mark_notified([due.approval_id])
    assert store.claim_due_notifications(10, 5, 60, now=now + timedelta(days=1)) == []


def test_tick_queries(store: PostgresStore) -> None:
    now = utcnow()
    plain, _ = store.create_run(new_run())
    assert store.stale_claimable(10, 30, now=now) == []
    assert store.stale_claimable(10, 30, now=now + timedelta(seconds=60)) == [plain.id]
    # Marked enqueued: not stale again right away.
    assert store.stale_claimable(10, 30, now=now + timedelta(seconds=60)) == []

    lapsed = claimed(store, ttl=0.05)
    time.sleep(0.1)
    assert lapsed.run_id in store.lapsed_claims(10, 30)
    store.mark_enqueued([lapsed.run_id])
    assert lapsed.run_id not in store.lapsed_claims(10, 30)

    keyed, _ = store.create_run(new_run(key="k"))
    heads = store.free_key_heads(10, 30, now=utcnow() + timedelta(seconds=60))
    assert heads == [keyed.id]


def test_thread_start_returns_previous_settled_run(store: PostgresStore) -> None:
    first = claimed(store, thread="t-1", key="thread:t-1")
    store.commit_step(
        first,
        commit(1, 0, [msg(0), msg(1)], state={"n": 1}, outcome=Outcome(RunStatus.COMPLETED)),
    )
    second, _ = store.create_run(new_run(thread="t-1", key="thread:t-1"))
    start = store.thread_start("t-1", second.id)
    assert start is not None and start.run_id == first.run_id
    assert start.messages == [msg(0), msg(1)] and start.state == {"n": 1}
    assert store.thread_start("t-1", first.run_id) is None


def test_a_thread_takes_one_sender_at_a_time_and_carries_a_message_cancelled_unstarted(
    store: PostgresStore,
) -> None:
    first = claimed(store, thread="t-2", key="thread:t-2")
    store.commit_step(first, commit(1, 0, [msg(0), msg(1)], outcome=Outcome(RunStatus.COMPLETED)))

    def make(text: str) -> Callable[[Any], NewRun]:
        return lambda active: new_run(thread="t-2", key="thread:t-2", payload={"text": text})

    queued, created, active = store.start_on_thread("t-2", make("a"))
    assert created and active == []
    later, created, active = store.start_on_thread("t-2", make("b"), refuse_if_busy=False)
    assert created and [r.id for r in active] == [queued.id]
    with pytest.raises(ThreadBusy):
        store.start_on_thread("t-2", make("c"), refuse_if_busy=True)
    store.request_cancel(queued.id)  # cancelled before it ran: its message is carried
    start = store.thread_start("t-2", later.id)
    assert start is not None and start.run_id == first.run_id
    assert start.messages == [msg(0), msg(1)]
    assert [t.payload for t in start.skipped] == [{"text": "a"}]
    assert [r.id for r in store.thread_runs("t-2")] == [first.run_id, queued.id, later.id]
    [summary] = [t for t in store.threads(datetime(2000, 1, 1, tzinfo=UTC)) if t.thread == "t-2"]
    assert (summary.runs, summary.status) == (3, RunStatus.QUEUED)


def test_prune_deletes_settled_runs_and_their_rows(store: PostgresStore) -> None:
    old = claimed(store)
    store.record_llm_step(old, llm_record(1))
    store.commit_step(old, commit(1, 0, [msg(0)], outcome=Outcome(RunStatus.COMPLETED)))
    live, _ = store.create_run(new_run())
    assert store.prune(utcnow() + timedelta(seconds=1)) == 1
    with pytest.raises(RunNotFound):
        store.get_run(old.run_id)
    assert store.get_run(live.id).status is RunStatus.QUEUED


def _lapse() -> None:
    time.sleep(0.12)  # past the 0.05 s claims below


def _take_over(store: PostgresStore, run_id: str, limit: int) -> Fence:
    _lapse()
    claim = try_claim(store, run_id, "taker", 0.05, max_takeovers=limit)
    assert claim is not None
    return Fence(run_id, "taker", claim.epoch)


def test_takeovers_without_progress_settle_the_run_crashed(store: PostgresStore) -> None:
    fence = claimed(store, ttl=0.05, key="customer:9")
    waiting_for_key, _ = store.create_run(new_run(key="customer:9"))
    store.record_llm_step(fence, llm_record(1))  # progress, then the worker dies
    for _ in range(2):
        fence = _take_over(store, fence.run_id, 3)
        # A journaled step reused by the new execution is not progress.
        assert store.record_llm_step(fence, llm_record(1)) is False
    _lapse()
    assert fence.epoch == 3
    settled = store.claim_run(fence.run_id, "taker", 0.05, max_takeovers=3)
    assert isinstance(settled, Ended)
    assert settled.run.status is RunStatus.FAILED and settled.run.claim is None
    assert settled.run.error is not None and settled.run.error.code == "crashed"
    assert "last epoch 3" in settled.run.error.message
    assert settled.next_in_key == waiting_for_key.id  # the key is free
    assert store.get_run(fence.run_id) == settled.run
    # Ended once: no later claim, no recovery by tick(), and the old fence is out.
    assert store.claim_run(fence.run_id, "again", 30, max_takeovers=3) is None
    assert fence.run_id not in store.lapsed_claims(100, 0)
    with pytest.raises(LeaseLostError):
        store.record_llm_step(fence, llm_record(2))
    assert try_claim(store, waiting_for_key.id, "w", 30) is not None


@pytest.mark.parametrize("progress", ["w1", "w2"])
def test_progress_resets_the_takeover_count(store: PostgresStore, progress: str) -> None:
    fence = claimed(store, ttl=0.05)
    base = 0
    # Far more takeovers than the limit, each followed by progress: never crashed.
    for index in range(1, 6):
        fence = _take_over(store, fence.run_id, 2)
        if progress == "w1":
            assert store.record_llm_step(fence, llm_record(index)) is True
        else:
            store.commit_step(fence, commit(index, base, [msg(index)]))
            base += 1
    assert store.get_run(fence.run_id).status is RunStatus.RUNNING
    # Without progress the second takeover in a row settles it.
    fence = _take_over(store, fence.run_id, 2)
    _lapse()
    settled = store.claim_run(fence.run_id, "taker", 0.05, max_takeovers=2)
    assert isinstance(settled, Ended) and settled.run.status is RunStatus.FAILED


def test_interrupted_and_queued_claims_are_not_takeovers(store: PostgresStore) -> None:
    run, _ = store.create_run(new_run())
    for _ in range(5):  # drained cleanly again and again, e.g. across deploys
        claim = try_claim(store, run.id, "w", 30, max_takeovers=1)
        assert claim is not None
        store.end(Fence(run.id, "w", claim.epoch), Outcome(RunStatus.INTERRUPTED))
    claim = try_claim(store, run.id, "w", 0.05, max_takeovers=1)
    assert claim is not None
    _lapse()
    # The first takeover reaches a limit of 1 at once.
    settled = store.claim_run(run.id, "taker", 30, max_takeovers=1)
    assert isinstance(settled, Ended)
    assert settled.run.error is not None and settled.run.error.code == "crashed"
    assert f"last epoch {claim.epoch}" in settled.run.error.message


def test_without_a_limit_takeovers_go_on(store: PostgresStore) -> None:
    fence = claimed(store, ttl=0.05)
    for _ in range(4):
        _lapse()
        claim = try_claim(store, fence.run_id, "taker", 0.05)
        assert claim is not None


def test_a_missing_agent_defers_the_run_until_the_grace_ends(store: PostgresStore) -> None:
    fence = claimed(store)
    deferred = store.defer_missing_agent(fence, 600)
    assert deferred is not None
    assert deferred.status is RunStatus.INTERRUPTED and deferred.claim is None
    assert deferred.enqueued_at is not None  # tick() enqueues it again later
    again = try_claim(store, fence.run_id, "worker-b", 30)
    assert again is not None  # an interrupted claim: claimable, not a takeover
    second = Fence(fence.run_id, "worker-b", again.epoch)
    assert store.defer_missing_agent(second, 600) is not None
    third = try_claim(store, fence.run_id, "worker-c", 30)
    assert third is not None
    late = Fence(fence.run_id, "worker-c", third.epoch)
    time.sleep(0.2)
    before = snapshot(store)
    # Past the grace (counted from the first miss): nothing written; the caller fails it.
    assert store.defer_missing_agent(late, 0.1) is None
    assert snapshot(store) == before
    settled = store.end(late, Outcome(RunStatus.FAILED))
    assert settled.run.status is RunStatus.FAILED


def test_list_runs_filters_newest_first(store: PostgresStore) -> None:
    first, _ = store.create_run(new_run("triage", thread="t-1"))
    second, _ = store.create_run(new_run("billing"))
    third, _ = store.create_run(new_run("triage"))
    assert try_claim(store, third.id, "w", 30) is not None
    assert [r.id for r in store.list_runs()] == [third.id, second.id, first.id]
    assert [r.id for r in store.list_runs(agent="triage")] == [third.id, first.id]
    assert [r.id for r in store.list_runs(status=RunStatus.QUEUED)] == [second.id, first.id]
    assert [r.id for r in store.list_runs(thread="t-1")] == [first.id]
    assert [r.id for r in store.list_runs(limit=1)] == [third.id]
    assert store.list_runs(agent="triage", status=RunStatus.WAITING) == []
    listed = store.list_runs(status=RunStatus.RUNNING)
    assert listed == [store.get_run(third.id)]


def test_start_point_finds_the_checkpoint_and_a_journaled_step(store: PostgresStore) -> None:
    fence = claimed(store)
    start = store.start_point(fence.run_id)
    assert start.checkpoint is None and start.journaled is None
    store.record_llm_step(fence, llm_record(1, text="first"))
    start = store.start_point(fence.run_id)
    assert start.checkpoint is None
    assert start.journaled is not None and start.journaled.index == 1
    assert start.journaled.output == {"role": "assistant", "content": "first"}
    assert start.journaled.usage == Usage(10, 5)
    store.commit_step(fence, commit(1, 0, [msg(0), msg(1)]))
    start = store.start_point(fence.run_id)
    assert start.journaled is None
    assert start.checkpoint is not None and start.checkpoint.step_index == 1
    assert start.checkpoint.messages == [msg(0), msg(1)]
    assert start.checkpoint == store.checkpoint(fence.run_id)
    store.record_llm_step(fence, llm_record(2))
    journaled = store.start_point(fence.run_id).journaled
    assert journaled is not None and journaled == store.llm_step(fence.run_id, 2)


def test_approvals_and_their_notifications(store: PostgresStore) -> None:
    fence = claimed(store)
    first, second = approval("c1"), approval("c2")
    store.commit_step(fence, commit(1, 0, [msg(0)], approvals=[first, second]))
    listed = store.approvals(fence.run_id)
    assert [a.approval_id for a in listed] == [first.approval_id, second.approval_id]
    assert all(a.pending and a.attempts == 0 and a.notified_at is None for a in listed)
    assert listed[0] == store.get_approval(first.approval_id)

    retry_at = utcnow() + timedelta(minutes=5)
    store.record_notification(first.approval_id, accepted=False, retry_at=retry_at)
    refused = store.get_approval(first.approval_id)
    assert refused.attempts == 1 and refused.notified_at is None
    assert refused.next_notify_at == retry_at
    store.record_notification(second.approval_id, accepted=True, retry_at=None)
    accepted = store.get_approval(second.approval_id)
    assert accepted.attempts == 1 and accepted.notified_at is not None
    with pytest.raises(ApprovalError, match="no approval"):
        store.record_notification(str(uuid.uuid4()), accepted=True, retry_at=None)
    store.mark_notified([str(uuid.uuid4())])  # pruned meanwhile: nothing to mark
    assert store.approvals(str(uuid.uuid4())) == []


def test_fail_waiting_settles_and_withdraws_the_approvals(store: PostgresStore) -> None:
    fence = claimed(store, key="customer:3")
    queued, _ = store.create_run(new_run(key="customer:3"))
    pending = approval("c1")
    store.commit_step(fence, commit(1, 0, [msg(0)], approvals=[pending]))
    settled = store.fail_waiting(fence.run_id, RunError("approval_expired", "too late"))
    assert settled.run.status is RunStatus.FAILED and settled.run.finished_at is not None
    assert settled.run.error == RunError("approval_expired", "too late")
    assert settled.run.waiting is None and settled.next_in_key == queued.id
    assert store.get_approval(pending.approval_id).decision is Decision.WITHDRAWN
    assert store.get_run(fence.run_id) == settled.run
    with pytest.raises(InvalidTransition, match="not waiting"):
        store.fail_waiting(fence.run_id, RunError("approval_expired", "again"))


def test_a_second_wait_at_the_same_step_is_recorded_once(store: PostgresStore) -> None:
    """One wait step per step index (the unique index of steps)."""
    fence = claimed(store)
    first = approval("c1")
    store.commit_step(fence, commit(1, 0, [msg(0)], approvals=[first]))
    response = {"role": "approval_response", "approval_id": first.approval_id}
    assert store.decide(first.approval_id, Decision.APPROVED, None, lambda _: response).resumed
    claim = try_claim(store, fence.run_id, "worker-b", 30)
    assert claim is not None
    again = Fence(fence.run_id, "worker-b", claim.epoch)
    # The resumed step asks again at the same index (the seed's replace rule).
    store.commit_step(again, commit(1, 2, [msg(2)], approvals=[approval("c2")]))
    waits = [s for s in store.steps(fence.run_id) if s.kind is StepKind.WAIT]
    assert len(waits) == 1 and waits[0].index == 1


def test_a_replace_that_asks_for_approval_writes_over_and_waits(store: PostgresStore) -> None:
    """A replace at an equal index may pause the run, like an append."""
    fence = claimed(store)
    store.commit_step(fence, commit(1, 0, [msg(0), msg(1), msg(2)]))
    asked = approval("c9")
    settled = store.commit_step(fence, commit(1, 1, [msg(11)], approvals=[asked]))
    assert settled is not None and settled.run.status is RunStatus.WAITING
    cp = store.checkpoint(fence.run_id)
    assert cp is not None and cp.messages == [msg(0), msg(11)]
    assert store.get_approval(asked.approval_id).tool_call_id == "c9"
    waits = [s for s in store.steps(fence.run_id) if s.kind is StepKind.WAIT]
    assert [w.index for w in waits] == [1]


def test_defer_retry_queues_the_run_not_before_its_time(store: PostgresStore) -> None:
    """A transient model failure gives the run back: queued, claim released,
    not claimable before retry_at, attempts and error on the run; a journal write that
    records a step clears them."""
    fence = claimed(store)
    store.commit_step(fence, commit(1, 0, [msg(0)]))
    since = utcnow()
    at = since + timedelta(seconds=30)
    settled = store.defer_retry(fence, RetryWait(attempts=2, since=since, error="503", at=at))
    run = settled.run
    assert run.status is RunStatus.QUEUED and run.claim is None
    assert run.retry == RetryWait(attempts=2, since=since, error="503", at=at)
    assert run.retry_at == at and run.enqueued_at == at
    assert store.get_run(fence.run_id).retry == run.retry
    assert try_claim(store, fence.run_id, "worker-b", 30) is None  # not before retry_at
    with pytest.raises(LeaseLostError):  # the old fence is gone
        store.defer_retry(fence, RetryWait(attempts=3, since=since, error="x", at=at))
    # Nothing is due before retry_at + the re-enqueue delay, then tick() finds it.
    assert fence.run_id not in store.stale_claimable(100, 10)
    assert fence.run_id in store.stale_claimable(100, 10, now=at + timedelta(seconds=11))
    assert store.get_run(fence.run_id).retry_at == at  # still not claimable early

    # Due: a claim from now on works; the next recorded step clears the wait.
    due = fence.run_id
    force_retry_due(store, due)
    claim = try_claim(store, due, "worker-b", 30)
    assert claim is not None
    again = Fence(due, "worker-b", claim.epoch)
    assert store.get_run(due).retry is not None  # kept until progress
    assert store.record_llm_step(again, llm_record(2))
    assert store.get_run(due).retry is None


def _reserve(store: PostgresStore, run_id: str, tokens: int) -> None:
    """What an admitted model call in flight holds of a shared budget."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE runs SET reserved_tokens = :tokens WHERE id = :id"),
            {"tokens": tokens, "id": run_id},
        )


def test_a_parked_run_waits_in_the_queue_until_its_time(store: PostgresStore) -> None:
    """A park gives the run back as a retry's wait does (queued, claim and
    reservation released, not claimable before its time, found by tick()
    after it), with the limit it waits on, which its status event carries and
    its next claim clears; a fence that is not the run's writes nothing."""
    fence = claimed(store)
    store.commit_step(fence, commit(1, 0, [msg(0)]))
    _reserve(store, fence.run_id, 500)
    at = utcnow() + timedelta(seconds=30)
    before = snapshot(store)
    for stale in (Fence(fence.run_id, fence.owner, fence.epoch + 1), Fence(fence.run_id, "x", 1)):
        with pytest.raises(LeaseLostError):
            store.park(stale, "openai/gpt-4o-mini", at)
    assert snapshot(store) == before

    ended = store.park(fence, "openai/gpt-4o-mini", at)
    run = ended.run
    assert run.status is RunStatus.QUEUED and run.claim is None
    assert (run.parked_key, run.parked_until, run.enqueued_at) == ("openai/gpt-4o-mini", at, at)
    assert run.retry is None and run.retry_at is None  # no failed attempt
    assert ended.hands_on  # its message is sent at its time
    assert store.get_run(fence.run_id) == run
    with store.engine.connect() as conn:
        reserved = conn.execute(
            sa.text("SELECT reserved_tokens FROM runs WHERE id = :id"), {"id": fence.run_id}
        ).scalar_one()
    assert reserved == 0
    with pytest.raises(LeaseLostError):  # the fence is gone with the claim
        store.park(fence, "openai/gpt-4o-mini", at)
    status = [e for e in store.events(fence.run_id) if e.type is EventType.STATUS][-1]
    assert status.data == {**status.data, "status": "queued", "parked_on": "openai/gpt-4o-mini"}
    assert datetime.fromisoformat(status.data["retry_at"]) == at

    # Not claimable before its time; tick() finds it once the re-enqueue delay passed.
    assert store.claim_run(fence.run_id, "worker-b", 30, now=at - timedelta(seconds=1)) is None
    assert fence.run_id not in store.stale_claimable(100, 10)
    assert fence.run_id in store.stale_claimable(100, 10, now=at + timedelta(seconds=11))
    claimed_again = store.claim_run(fence.run_id, "worker-b", 30, now=at + timedelta(seconds=1))
    assert isinstance(claimed_again, Run) and claimed_again.claim is not None
    assert (claimed_again.parked_key, claimed_again.parked_until) == (None, None)
    assert store.parked() == []
    running = [e for e in store.events(fence.run_id) if e.type is EventType.STATUS][-1]
    assert running.data["status"] == "running" and "parked_on" not in running.data


def test_a_park_keeps_a_durable_retrys_attempts(store: PostgresStore) -> None:
    """A run waiting to retry a failing call, parked on its limit: the
    attempts stay (parking is admission, not a failure); its time is the park's."""
    fence = claimed(store)
    since = utcnow()
    first = since + timedelta(seconds=5)
    store.defer_retry(fence, RetryWait(attempts=2, since=since, error="429", at=first))
    force_retry_due(store, fence.run_id)
    again = claimed_run(store, fence.run_id)
    at = since + timedelta(seconds=60)
    run = store.park(again, "anthropic/*", at).run
    assert run.retry == RetryWait(attempts=2, since=since, error="429", at=at)
    assert (run.parked_key, run.parked_until, run.retry_at) == ("anthropic/*", at, at)


def test_a_parked_run_whose_turn_came_is_claimable_now(store: PostgresStore) -> None:
    """wake_parked: the parked runs among the ids become claimable now (their
    turn came under their limit before their time); a run not parked, an
    unknown id or a malformed one is left alone and not returned."""
    fence = claimed(store)
    at = utcnow() + timedelta(minutes=5)
    store.park(fence, "openai/gpt-4o-mini", at)
    other = claimed(store)  # running, not parked
    assert store.claim_run(fence.run_id, "worker-b", 30) is None  # not before its time
    woken = store.wake_parked([fence.run_id, other.run_id, str(uuid.uuid4()), "not-an-id"])
    assert woken == [fence.run_id]
    run = store.get_run(fence.run_id)
    assert run.status is RunStatus.QUEUED and run.parked_until is not None
    assert run.parked_until <= utcnow() + timedelta(seconds=1)
    assert store.get_run(other.run_id).status is RunStatus.RUNNING
    assert store.wake_parked([]) == []
    assert isinstance(store.claim_run(fence.run_id, "worker-b", 30), Run)
    assert store.wake_parked([fence.run_id]) == []  # claimed: parked no more


def test_a_cancelled_parked_run_is_parked_no_more(store: PostgresStore) -> None:
    fence = claimed(store)
    store.park(fence, "concurrency:acme", utcnow() + timedelta(minutes=5))
    assert [p.key for p in store.parked()] == ["concurrency:acme"]
    result = store.request_cancel(fence.run_id)
    assert result.run.status is RunStatus.CANCELLED and result.run.parked_key is None
    assert store.parked() == []


def test_parked_counts_each_limits_runs_by_tenant(store: PostgresStore) -> None:
    now = utcnow()
    plan = [
        ("openai/gpt-4o", "acme", 30),
        ("openai/gpt-4o", "acme", 10),
        ("openai/gpt-4o", "beta", 20),
        ("openai/gpt-4o", None, 40),
        ("anthropic/*", "acme", 50),
    ]
    for key, tenant, seconds in plan:
        run, _ = store.create_run(dataclasses.replace(new_run(), tenant=tenant))
        store.park(claimed_run(store, run.id), key, now + timedelta(seconds=seconds))
    claimed(store)  # running: parked on nothing
    gone = claimed(store)
    store.park(gone, "openai/gpt-4o", now)
    claimed_run(store, gone.run_id)  # claimed again: parked no more

    anthropic = ParkedKey("anthropic/*", 1, {"acme": 1}, now + timedelta(seconds=50))
    openai = ParkedKey(
        "openai/gpt-4o", 4, {None: 1, "acme": 2, "beta": 1}, now + timedelta(seconds=10)
    )
    assert store.parked() == [anthropic, openai]
    assert store.parked("openai/gpt-4o") == [openai]
    assert store.parked("nothing/parked") == []
    with pytest.raises(InvalidInput):
        store.parked("")


def test_tenant_and_priority_go_with_a_run_its_children_retries_and_forks(
    store: PostgresStore,
) -> None:
    """A run keeps the tenant and priority it started with; a child takes its
    parent's priority, and its tenant unless it has its own; a retry and a
    fork keep their original's."""
    plain, _ = store.create_run(new_run())
    assert (plain.tenant, plain.priority) == (None, 0)
    run, _ = store.create_run(
        dataclasses.replace(new_run(trigger_id="acme-1"), tenant="acme", priority=7)
    )
    assert (run.tenant, run.priority) == ("acme", 7)
    assert (store.get_run(run.id).tenant, store.get_run(run.id).priority) == ("acme", 7)
    fence = claimed_run(store, run.id)
    own = dataclasses.replace(_child(fence, "c2"), tenant="beta")
    started = store.start_children(fence, [_child(fence, "c1"), own])
    assert {c.parent_call_id: (c.tenant, c.priority) for c in started} == {
        "c1": ("acme", 7),
        "c2": ("beta", 7),
    }

    store.commit_step(fence, commit(1, 0, [msg(0), msg(1)]))
    store.end(fence, Outcome(RunStatus.FAILED, error=RunError("model_error", "no")))
    retried = store.retry_run(run.id).run
    assert (retried.tenant, retried.priority) == ("acme", 7)
    new = dataclasses.replace(new_run(trigger_id="fork-acme"), tenant="other", priority=1)
    fork = store.fork_run(run.id, 1, new, model=None)
    assert (fork.tenant, fork.priority) == ("acme", 7)
    assert (store.get_run(fork.id).tenant, store.get_run(fork.id).priority) == ("acme", 7)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"priority": 10}, "from 0 to 9"),
        ({"priority": -1}, "from 0 to 9"),
        ({"priority": True}, "must be an int, not bool"),
        ({"priority": "3"}, "must be an int, not str"),
        ({"priority": 2.0}, "must be an int, not float"),
        ({"tenant": ""}, "non-empty"),
        ({"tenant": "   "}, "non-empty"),
        ({"tenant": "t" * 201}, "the limit is 200"),
        ({"tenant": "acme\nbeta"}, "control character"),
        ({"tenant": "acme\x00"}, "NUL"),
        ({"tenant": 5}, "must be a string, not int"),
    ],
)
def test_a_bad_tenant_or_priority_is_one_clear_error_and_writes_nothing(
    store: PostgresStore, fields: dict[str, Any], error: str
) -> None:
    fence = claimed(store)
    before = snapshot(store)
    with pytest.raises(InvalidInput, match=error):
        store.create_run(dataclasses.replace(new_run(trigger_id="bad"), **fields))
    if "tenant" in fields:
        with pytest.raises(InvalidInput, match=error):
            store.start_children(fence, [dataclasses.replace(_child(fence, "c"), **fields)])
    assert snapshot(store) == before


def test_a_bad_park_is_one_clear_error_and_writes_nothing(store: PostgresStore) -> None:
    fence = claimed(store)
    at = utcnow() + timedelta(seconds=30)
    before = snapshot(store)
    for key, error in (("", "empty"), ("k" * 201, "the limit is 200"), (3, "not int")):
        with pytest.raises(InvalidInput, match=error):
            store.park(fence, key, at)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="aware time"):
        store.park(fence, "openai/gpt-4o", at.replace(tzinfo=None))
    assert snapshot(store) == before
    assert store.get_run(fence.run_id).status is RunStatus.RUNNING


def test_effect_reads_back_as_journaled(store: PostgresStore) -> None:
    fence = claimed(store)
    assert journaled_effect(store, fence.run_id, "refund:1") is None
    begun = store.begin_effect(fence, "refund:1", "refund", {"amount": 3}, rerun_started=False)
    assert journaled_effect(store, fence.run_id, "refund:1") == begun.effect
    done = store.finish_effect(fence, "refund:1", output={"ok": True})
    found = journaled_effect(store, fence.run_id, "refund:1")
    assert found == done and found.status is EffectStatus.COMPLETED
    assert found.output == {"ok": True} and found.input == {"amount": 3}


def test_close(store: PostgresStore) -> None:
    store.create_run(new_run())
    store.close()


def test_retry_and_fork(store: PostgresStore) -> None:
    """A failed run retried (its outcome kept as an attempt) and forked after
    its first step (tests/integration/test_store_recovery.py has the rest)."""
    fence = claimed(store)
    store.commit_step(fence, commit(1, 0, [msg(0), msg(1)], state={"n": 1}))
    store.commit_step(fence, commit(2, 2, [msg(2)]))
    store.end(fence, Outcome(RunStatus.FAILED, error=RunError("model_error", "no")))
    result = store.retry_run(fence.run_id, extra_steps=2)
    assert result.retried and result.run.status is RunStatus.QUEUED
    assert result.run.error is None and result.run.extra_steps == 2
    [attempt] = store.attempts(fence.run_id)
    assert store.attempt_count(fence.run_id) == 1
    assert attempt.attempt == 1 and attempt.status is RunStatus.FAILED
    assert attempt.error == RunError("model_error", "no") and attempt.extra_steps == 2

    # The fork carries the trace context of the request that made it.
    traceparent = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    new = dataclasses.replace(
        new_run(trigger_id="fork-of-" + fence.run_id), trace_context=traceparent
    )
    fork = store.fork_run(fence.run_id, 1, new, model="scripted/m")
    assert fork.id == new.id and fork.status is RunStatus.QUEUED
    assert fork.trace_context == traceparent
    assert store.get_run(fork.id).trace_context == traceparent
    assert (fork.forked_from, fork.forked_at_step, fork.model) == (fence.run_id, 1, "scripted/m")
    assert fork.state == {"n": 1} and fork.extra_steps == 1
    checkpoint = store.checkpoint(fork.id)
    assert checkpoint is not None and checkpoint.step_index == 1
    assert checkpoint.messages == [msg(0), msg(1)]
    assert store.attempts(fork.id) == [] and store.attempt_count(fork.id) == 0


def _schedule(name: str, at: Any, **fields: Any) -> Schedule:
    base: dict[str, Any] = {
        "name": name,
        "agent": "triage",
        "cron": None,
        "timezone": "UTC",
        "every_seconds": 60.0,
        "payload": {"n": 1},
        "thread": None,
        "keys": {},
        "overlap": Overlap.BUFFER_ONE,
        "catchup_window_seconds": 300.0,
        "jitter_seconds": 0.0,
        "paused": False,
        "next_at": at,
        "next_due_at": at,
        "created_at": at,
        "updated_at": at,
    }
    return Schedule(**{**base, **fields})


def _firing_run(schedule: Schedule, at: Any) -> NewRun:
    return new_run(trigger_id=f"schedule:{schedule.name}:{at.isoformat()}")


def test_schedules_are_stored_fired_once_buffered_and_triggered(store: PostgresStore) -> None:
    """The store's part of schedules (runner/core/schedules/ decides the times):
    a firing recorded once with its run, a second due one buffered behind
    it (buffer_one) and started once that run settles, a trigger outside the
    times; a name taken once, a missing one refused."""
    at = utcnow().replace(microsecond=0) - timedelta(seconds=5)
    made = store.create_schedule(_schedule("nightly", at))
    assert store.get_schedule("nightly") == made and store.list_schedules() == [made]
    with pytest.raises(InvalidInput, match="exists already"):
        store.create_schedule(_schedule("nightly", at))
    later = at + timedelta(seconds=60)

    def plan(schedule: Schedule, now: Any) -> FiringPlan:
        due = [DueFiring(t, _firing_run(schedule, t)) for t in (at, later) if t <= now]
        return FiringPlan(due, now + timedelta(hours=1), now + timedelta(hours=1))

    fired = store.fire_due_schedules(plan, limit=10, now=later)
    assert [f.outcome for f in fired.firings] == [FiringOutcome.STARTED, FiringOutcome.BUFFERED]
    assert len(fired.started) == 1 and fired.cancel == []
    assert store.fire_due_schedules(plan, limit=10, now=later).firings == []  # moved on
    assert store.start_buffered(_firing_run, limit=10).firings == []  # its run is open
    claim = try_claim(store, fired.started[0], "w", 30)
    assert claim is not None
    fence = Fence(fired.started[0], "w", claim.epoch)
    store.end(fence, Outcome(RunStatus.COMPLETED, output="ok"))
    buffered = store.start_buffered(_firing_run, limit=10)
    assert [(f.scheduled_at, f.outcome) for f in buffered.firings] == [
        (later, FiringOutcome.STARTED)
    ]
    triggered = store.trigger_schedule("nightly", _firing_run)
    assert triggered.outcome is FiringOutcome.TRIGGERED and triggered.run_id is not None
    assert len(store.firings("nightly")) == 3
    paused = store.change_schedule("nightly", lambda s: dataclasses.replace(s, paused=True))
    assert paused.paused and paused.created_at == made.created_at
    store.delete_schedule("nightly")
    with pytest.raises(ScheduleNotFound):
        store.get_schedule("nightly")
    with pytest.raises(ScheduleNotFound):
        store.change_schedule("nightly", lambda s: s)


def test_due_schedules_are_taken_for_the_agents_given(store: PostgresStore) -> None:
    """A tick fires the due schedules of the agents it loads; it counts the
    others' by agent, and every schedule not paused is counted by agent."""
    at = utcnow().replace(microsecond=0) - timedelta(seconds=5)
    store.create_schedule(_schedule("here", at))
    store.create_schedule(_schedule("elsewhere", at, agent="retired"))
    store.create_schedule(_schedule("asleep", at, agent="retired", paused=True))

    def plan(schedule: Schedule, now: Any) -> FiringPlan:
        later = now + timedelta(hours=1)
        return FiringPlan([DueFiring(at, _firing_run(schedule, at))], later, later)

    assert store.due_elsewhere(["triage"]) == {"retired": 1}
    assert store.schedules_by_agent() == {"triage": 1, "retired": 1}
    fired = store.fire_due_schedules(plan, agents=["triage"], limit=10)
    assert [f.schedule for f in fired.firings] == ["here"]
    assert store.start_buffered(_firing_run, agents=["triage"], limit=10).firings == []
    assert store.due_elsewhere(["triage"]) == {"retired": 1}  # still due, for another tick
    assert store.due_elsewhere(["triage", "retired"]) == {}


def test_approval_backlog_counts_the_pending_and_finds_the_oldest(store: PostgresStore) -> None:
    """What the metrics endpoint reads: approvals not yet decided, over all
    runs; a decided or withdrawn one leaves the backlog."""
    assert store.approval_backlog() == (0, None)
    fence = claimed(store)
    first, second = approval("c1"), approval("c2")
    store.commit_step(fence, commit(1, 0, [msg(0)], approvals=[first, second]))
    other = claimed(store)
    store.commit_step(other, commit(1, 0, [msg(0)], approvals=[approval("c3")]))
    created = [a.created_at for r in (fence, other) for a in store.approvals(r.run_id)]
    assert store.approval_backlog() == (3, min(created))

    response = {"role": "approval_response", "approval_id": first.approval_id, "approved": True}
    store.decide(first.approval_id, Decision.APPROVED, None, lambda _: response)
    store.fail_waiting(other.run_id, RunError("approval_expired", "too late"))
    left = store.get_approval(second.approval_id)
    assert store.approval_backlog() == (1, left.created_at)


def test_failing_tools_are_those_failing_most_of_enough_recent_calls(
    store: PostgresStore,
) -> None:
    """What ``runwright doctor`` reads: by agent and tool, the tools whose
    steps since a time carry an error in more than half of them, of those
    called often enough, in runs open or settled since."""
    since = utcnow()
    assert store.failing_tools(since, 3) == []

    def called(agent: str, tool: str, errors: list[str | None]) -> Fence:
        fence = claimed(store, agent=agent)
        rows = [
            dataclasses.replace(tool_record(1, f"c{n}"), name=tool, error=error)
            for n, error in enumerate(errors)
        ]
        store.commit_step(fence, commit(1, 0, [msg(0)], tools=rows))
        return fence

    called("triage", "lookup", ["timed out", None, "refused"])  # 2 of 3
    called("triage", "lookup", [None, None, None])  # 2 of 6: half or less
    called("triage", "charge", ["declined", "declined", None])  # 2 of 3
    called("billing", "charge", ["declined", None])  # too few calls
    called("billing", "charge", [None, None])  # 1 of 4: not failing
    [found] = store.failing_tools(since, 3)
    assert found == ("triage", "charge", 3, 2, "declined")
    assert store.failing_tools(since, 4) == []
    later = called("triage", "lookup", ["refused again"] * 4)  # 6 of 10
    assert [(f.tool, f.calls, f.failures, f.last_error) for f in store.failing_tools(since, 3)] == [
        ("lookup", 10, 6, "refused again"),
        ("charge", 3, 2, "declined"),
    ]
    store.end(later, Outcome(RunStatus.COMPLETED, output="done"))  # settled since: counted
    assert [f.tool for f in store.failing_tools(since, 3)] == ["lookup", "charge"]
    assert store.failing_tools(utcnow(), 1) == []  # nothing was called since now


def test_each_committed_write_that_makes_events_calls_on_commit(store: PostgresStore) -> None:
    """The run-event feed's wake-up is the store's: each write that commits
    events of a run calls what ``on_commit`` registered, once, after its
    commit; a write that changes nothing of a run, or is refused, does not."""
    woken: list[str] = []
    stop = store.on_commit(woken.append)
    run, _ = store.create_run(new_run(trigger_id="once"))
    store.create_run(new_run(trigger_id="once"))  # the same run: nothing written
    assert woken == [run.id]
    claim = try_claim(store, run.id, "w", 30)
    assert claim is not None
    fence = Fence(run.id, "w", claim.epoch)
    assert store.record_llm_step(fence, llm_record(1))
    assert not store.record_llm_step(fence, llm_record(1))  # recorded already
    store.renew(fence, 30)
    store.commit_step(fence, commit(1, 0, [msg(0)]))
    assert woken == [run.id] * 4  # create, claim, journal write, commit
    with pytest.raises(LeaseLostError):
        store.end(Fence(run.id, "w", claim.epoch + 1), Outcome(RunStatus.COMPLETED))
    store.end(fence, Outcome(RunStatus.COMPLETED, output="done"))
    assert woken == [run.id] * 5
    stop()
    store.create_run(new_run())
    assert woken == [run.id] * 5


def test_the_tick_mark_keeps_the_last_tick(store: PostgresStore) -> None:
    """tick()'s own mark (the copy of Redis's that a Redis restart cannot
    lose): none before a tick, then the time the latest one recorded."""
    assert store.last_tick() is None
    first = utcnow() - timedelta(seconds=30)
    store.mark_tick(first)
    assert store.last_tick() == first
    later = first + timedelta(seconds=5, microseconds=250)
    store.mark_tick(later)
    assert store.last_tick() == later


def _feed(store: PostgresStore, run_id: str, after: int | None = None) -> list[tuple[str, Any]]:
    """The run's events as (type, what matters of the body)."""
    shown: list[tuple[str, Any]] = []
    for event in store.events(run_id, after):
        data = event.data
        keys = {
            "status": ("status",),
            "execution": ("epoch", "takeover"),
            "approval": ("action", "tool_call_id", "decision"),
            "step": ("kind", "index", "tool_call_id"),
        }[event.type.value]
        values = tuple(data[key] for key in keys)
        detail = values[0] if len(values) == 1 else values
        shown.append((event.type.value, detail))
    return shown


def test_events_are_derived_from_every_write_in_commit_order(store: PostgresStore) -> None:
    fence = claimed(store, ttl=0.05)
    run_id = fence.run_id
    assert store.record_llm_step(fence, llm_record(1))
    store.commit_step(fence, commit(1, 0, [msg(0), msg(1)], tools=[tool_record(1, "c1")]))
    _lapse()
    taker = _take_over(store, run_id, 10)
    assert store.record_llm_step(taker, llm_record(2))
    store.commit_step(taker, commit(2, 2, [msg(2)], approvals=[approval("c2")]))
    waiting = store.get_run(run_id)
    assert waiting.waiting is not None
    response = {"role": "approval_response", "approval_id": waiting.waiting.approval_id}
    store.decide(waiting.waiting.approval_id, Decision.APPROVED, "ok", lambda _: response)
    again = try_claim(store, run_id, "worker-c", 30)
    assert again is not None
    final = Fence(run_id, "worker-c", again.epoch)
    store.commit_step(
        final, commit(3, 3, [msg(3)], outcome=Outcome(RunStatus.COMPLETED, output="done"))
    )
    events = store.events(run_id)
    ids = [e.id for e in events]
    assert all(i is not None for i in ids) and ids == sorted(set(ids))  # type: ignore[type-var]
    feed = _feed(store, run_id)
    # Within one commit the order is not promised; across commits it is.
    commits = [
        [("status", "queued")],
        [("execution", (1, False)), ("status", "running")],
        [("step", ("llm", 1, None))],
        [("step", ("tool", 1, "c1"))],
        [("execution", (2, True))],
        [("step", ("llm", 2, None))],
        [
            ("step", ("wait", 2, None)),
            ("approval", ("requested", "c2", None)),
            ("status", "waiting"),
        ],
        [("approval", ("decided", "c2", "approved")), ("status", "queued")],
        [("execution", (3, False)), ("status", "running")],
        [("status", "completed")],
    ]
    at = 0
    for group in commits:
        assert sorted(feed[at : at + len(group)]) == sorted(group), (at, feed)
        at += len(group)
    assert at == len(feed)
    assert events[-1].ends and events[-1].status is RunStatus.COMPLETED
    # A reader that resumes after an id gets exactly the rest.
    middle = ids[5]
    assert [e.id for e in store.events(run_id, middle)] == ids[6:]
    assert [e.id for e in store.events(run_id, None, limit=3)] == ids[:3]
    assert store.events(run_id, ids[-1]) == []
    with pytest.raises(RunNotFound):
        store.events(str(uuid.uuid4()))
    with pytest.raises(RunNotFound):
        store.events("../../etc/passwd")


def test_listing_pages_counts_and_the_inbox(store: PostgresStore) -> None:
    runs = [store.create_run(new_run(f"lister-{i % 2}"))[0] for i in range(5)]
    newest_first = [r.id for r in reversed(runs)]
    assert [r.id for r in store.list_runs(limit=10)][:5] == newest_first
    page = store.list_runs(limit=2, before=newest_first[1])
    assert [r.id for r in page] == newest_first[2:4]
    since = runs[2].created_at
    assert {r.id for r in store.list_runs(since=since)} >= {r.id for r in runs[2:]}
    assert not {r.id for r in store.list_runs(until=since)} & {r.id for r in runs[2:]}
    with pytest.raises(InvalidInput, match="before must be a run id"):
        store.list_runs(before="'; DROP TABLE runs; --")
    counts = store.run_counts()
    assert counts[RunStatus.QUEUED] >= 5
    assert store.run_counts("lister-1") == {RunStatus.QUEUED: 2}
    assert store.run_counts("nobody") == {}

    fence = claimed(store, agent="asker")
    assert store.record_llm_step(fence, llm_record(1))
    first, second = approval("c1"), approval("c2")
    store.commit_step(fence, commit(1, 0, [msg(0), msg(1)], approvals=[first, second]))
    pending = store.pending_approvals(agent="asker")
    assert [a.approval_id for a in pending] == [first.approval_id, second.approval_id]
    assert store.pending_approvals(limit=1, agent="asker") == pending[:1]
    # What the inbox reads of their run, for every run at once.
    other = store.create_run(new_run("lister-0"))[0]
    contexts = store.runs_for_review(
        [fence.run_id, other.id, fence.run_id, str(uuid.uuid4()), "not-a-run"]
    )
    assert set(contexts) == {fence.run_id, other.id}
    waiting = contexts[fence.run_id]
    assert waiting.run == store.get_run(fence.run_id)
    assert waiting.run.waiting is not None and waiting.run.waiting.approval_id == first.approval_id
    assert waiting.messages == [msg(0), msg(1)]
    assert waiting.approvals == store.approvals(fence.run_id)
    assert (contexts[other.id].messages, contexts[other.id].approvals) == ([], [])
    assert store.runs_for_review([]) == {}
    response = {"role": "approval_response", "approval_id": first.approval_id}
    result = store.decide(
        first.approval_id, Decision.APPROVED, "fine", lambda _: response, by="ada"
    )
    assert result.approval.decided_by == "ada"
    assert store.get_approval(first.approval_id).decided_by == "ada"
    assert [a.approval_id for a in store.pending_approvals(agent="asker")] == [second.approval_id]
    decided = [e for e in store.events(fence.run_id) if e.type.value == "approval"]
    assert decided[-1].data["decided_by"] == "ada"
    store.request_cancel(fence.run_id)  # withdraws the other: nobody is asked any more
    assert store.pending_approvals(agent="asker") == []
    assert store.get_approval(second.approval_id).decided_by is None


def test_a_run_marked_unsent_is_sent_by_the_next_tick(store: PostgresStore) -> None:
    """A run whose message the broker refused is stale at once, not
    RUNWRIGHT_REENQUEUE_SECONDS later; a run a worker has claimed since keeps
    its claim's enqueue time."""
    plain, _ = store.create_run(new_run())
    keyed, _ = store.create_run(new_run(key="unsent-k"))
    running = claimed(store)
    assert store.stale_claimable(10, 30) == []
    store.mark_unsent([plain.id, keyed.id, running.run_id])
    assert store.stale_claimable(10, 30) == [plain.id]
    assert store.free_key_heads(10, 30) == [keyed.id]
    # Sent by that tick: not stale again until the re-enqueue window passes.
    assert store.stale_claimable(10, 30) == []
    assert store.free_key_heads(10, 30) == []
    assert store.get_run(running.run_id).status is RunStatus.RUNNING
    assert running.run_id not in store.lapsed_claims(10, 30)


def test_mcp_listing_is_the_last_llm_step_that_recorded_its_tools(store: PostgresStore) -> None:
    fence = claimed(store)
    assert store.mcp_listing(fence.run_id) is None  # nothing recorded yet
    offered = {"gh_lookup": {"server": "gh", "digest": "abc"}}
    first = dataclasses.replace(llm_record(1), input={"mcp_tools": offered})
    assert store.record_llm_step(fence, first)
    assert store.record_llm_step(fence, llm_record(2))  # offered the same: no record
    assert store.mcp_listing(fence.run_id) == offered
    later = {"gh_search": {"server": "gh", "digest": "def"}}
    third = dataclasses.replace(llm_record(3), input={"mcp_tools": later})
    assert store.record_llm_step(fence, third)
    assert store.mcp_listing(fence.run_id) == later
    with pytest.raises(RunNotFound):
        store.mcp_listing("not-a-run-id")


def _child(fence: Fence, call_id: str) -> NewChild:
    envelope = TriggerEnvelope(id=f"child:{fence.run_id}:{call_id}", payload={"task": call_id})
    return NewChild(agent="writer", trigger=envelope, call_id=call_id)


def test_children_start_once_per_call_and_their_last_settle_resumes_the_parent(
    store: PostgresStore,
) -> None:
    fence = claimed(store)
    first = store.start_children(fence, [_child(fence, "c1"), _child(fence, "c2")])
    assert [(c.parent_call_id, c.status, c.parent_id) for c in first] == [
        ("c1", RunStatus.QUEUED, fence.run_id),
        ("c2", RunStatus.QUEUED, fence.run_id),
    ]
    # Started again (a recovered parent's, a redelivered one's): the same children.
    again = store.start_children(fence, [_child(fence, "c2")])
    assert [c.id for c in again] == [first[1].id]
    assert [c.id for c in store.children(fence.run_id)] == [c.id for c in first]
    store.commit_step(
        fence,
        commit(1, 0, [msg(0), msg(1)], waits=True, child_calls=["c1", "c2"]),
    )
    assert store.get_run(fence.run_id).status is RunStatus.WAITING
    assert store.resume_if_done(fence.run_id) == []  # both children are open
    settled = []
    for child in first:
        child_fence = claimed_run(store, child.id)
        settled.append(store.end(child_fence, Outcome(RunStatus.COMPLETED, output="ok")))
    assert [s.resumed for s in settled] == [(), (fence.run_id,)]  # the last one resumes it
    assert store.get_run(fence.run_id).status is RunStatus.QUEUED
    assert store.resume_if_done(fence.run_id) == []  # once
    assert store.resume_stranded_parents(10, 0.0) == []
    with pytest.raises(RunNotFound):
        store.children(str(uuid.uuid4()))


def test_a_childs_usage_counts_in_its_ancestors_totals(store: PostgresStore) -> None:
    root = claimed(store)
    [middle] = store.start_children(root, [_child(root, "c1")])
    middle_fence = claimed_run(store, middle.id)
    [leaf] = store.start_children(middle_fence, [_child(middle_fence, "c2")])
    leaf_fence = claimed_run(store, leaf.id)
    store.record_llm_step(leaf_fence, llm_record(1, tokens=(100, 10)), rolls_up=True)
    # Again (an ambiguous commit retried): counted once.
    store.record_llm_step(leaf_fence, llm_record(1, tokens=(100, 10)), rolls_up=True)
    store.record_llm_step(root, llm_record(1, tokens=(7, 1)))
    totals = {r: store.get_run(r).usage.total for r in (root.run_id, middle.id, leaf.id)}
    assert totals == {root.run_id: 110 + 8, middle.id: 110, leaf.id: 110}
    # Each child names its chain, its parent first, and its top-level run.
    assert store.get_run(leaf.id).ancestors == (middle.id, root.run_id)
    assert store.get_run(leaf.id).root_id == root.run_id
    assert store.get_run(root.run_id).depth == 0 and store.get_run(leaf.id).depth == 2
    # The chain up from the leaf, its parent first.
    assert [r.id for r in store.ancestors(leaf.id)] == [middle.id, root.run_id]
    assert store.ancestors(root.run_id) == []


def test_children_side_by_side_take_turns_on_a_shared_budget_by_reservations(
    store: PostgresStore,
) -> None:
    root = claimed(store)
    bounds = (BudgetBound(root.run_id, max_tokens=1000),)
    kids = [dataclasses.replace(_child(root, f"c{i}"), bounds=bounds) for i in range(3)]
    started = store.start_children(root, kids)
    store.end(root, Outcome(RunStatus.WAITING))
    fences = [claimed_run(store, c.id) for c in started]
    first, second, third = (store.get_run(f.run_id) for f in fences)
    # The first call reserves 600; the second fits beside it (600 < 1000) and
    # reserves 500; the third finds the room held by both.
    assert store.admit(fences[0], first, 600).verdict is AdmissionVerdict.ADMITTED
    assert store.admit(fences[1], second, 500).verdict is AdmissionVerdict.ADMITTED
    held = store.admit(fences[2], third, 100)
    assert held.verdict is AdmissionVerdict.HELD and held.use is not None
    assert (held.use.tokens, held.use.reserved) == (0, 1100)
    # Once their claims lapsed (their workers died mid-call), their
    # reservations hold nothing.
    later = utcnow() + timedelta(seconds=120)
    assert store.admit(fences[2], third, 100, now=later).verdict is AdmissionVerdict.ADMITTED
    # A run asking again replaces its own reservation; it never counts twice.
    assert store.admit(fences[0], first, 600).verdict is AdmissionVerdict.ADMITTED
    # The first call's journal write gives its reservation back and adds
    # what it took: 200 spent, 500 reserved, room for the third.
    store.record_llm_step(fences[0], llm_record(1, tokens=(150, 50)), rolls_up=True)
    assert store.admit(fences[2], third, 100).verdict is AdmissionVerdict.ADMITTED
    # A settle ends a reservation (the second's), as a takeover's claim does.
    store.end(fences[1], Outcome(RunStatus.FAILED, error=RunError("x", "y")))
    store.record_llm_step(fences[2], llm_record(1, tokens=(700, 100)), rolls_up=True)
    # Spent: 1000 of 1000. A journaled reply (no call: 0 tokens) is stopped too.
    spent = store.admit(fences[0], first, 0)
    assert spent.verdict is AdmissionVerdict.SPENT and spent.use is not None
    assert spent.use.tokens == 1000 and spent.bound == bounds[0]
    # A stale owner asks nothing of the budget.
    stale = Fence(fences[0].run_id, "someone-else", fences[0].epoch)
    with pytest.raises(LeaseLostError):
        store.admit(stale, first, 10)


def test_a_parent_left_waiting_with_its_children_settled_is_resumed_by_the_sweep(
    store: PostgresStore,
) -> None:
    fence = claimed(store)
    [child] = store.start_children(fence, [_child(fence, "c1")])
    child_fence = claimed_run(store, child.id)
    store.end(child_fence, Outcome(RunStatus.COMPLETED, output="early"))
    # The parent's wait is committed after its only child settled: the
    # commit's own check resumes it at once.
    settled = store.commit_step(
        fence, commit(1, 0, [msg(0), msg(1)], waits=True, child_calls=["c1"])
    )
    assert settled is not None and settled.resumed == (fence.run_id,)
    assert store.get_run(fence.run_id).status is RunStatus.QUEUED
    # Left waiting with nothing open (the resume never ran): the sweep finds it.
    again = claimed(store)
    [late] = store.start_children(again, [_child(again, "c9")])
    store.end(claimed_run(store, late.id), Outcome(RunStatus.CANCELLED))
    with store.engine.begin() as conn:  # the parent's wait, as a dead worker left it
        conn.execute(
            sa.text("UPDATE runs SET status = 'waiting', claim_owner = NULL WHERE id = :id"),
            {"id": again.run_id},
        )
    assert store.resume_stranded_parents(10, 0.0) == [again.run_id]
    assert store.get_run(again.run_id).status is RunStatus.QUEUED


def claimed_run(store: PostgresStore, run_id: str) -> Fence:
    claim = try_claim(store, run_id, "worker-c", 30)
    assert claim is not None
    return Fence(run_id, "worker-c", claim.epoch)


def test_versions_are_recorded_and_runs_move_between_them(store: PostgresStore) -> None:
    a, b = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
    store.note_versions(
        [
            {
                "agent": "triage",
                "version": a,
                "label": "a",
                "policy": "pin",
                "definition": {"n": 1},
            },
            {"agent": "triage", "version": b, "label": None, "definition": {"n": 2}},
        ]
    )
    record = store.agent_version("triage", a)
    assert record is not None and record.title == f"a ({a})" and record.policy == "pin"
    assert record.definition == {"n": 1}
    assert store.agent_version("triage", "nope") is None
    assert {r.version for r in store.agent_versions("triage")} == {a, b}
    assert store.agent_versions("nobody") == []
    fence = claimed(store)
    store.record_version(fence, a, None)  # its first: no move
    run = store.get_run(fence.run_id)
    assert (run.version, run.started_version) == (a, a)
    store.record_version(fence, b, {"changes": ["instructions changed"]})
    [moved] = store.version_events(fence.run_id)
    assert moved.data == {"from": a, "to": b, "changes": ["instructions changed"]}
    with pytest.raises(LeaseLostError):
        store.record_version(Fence(fence.run_id, "someone-else", fence.epoch), a, None)
    [count] = [c for c in store.version_counts("triage") if c.version == b]
    assert (count.running, count.queued, count.parked, count.waiting) == (1, 0, 0, 0)
    assert store.version_titles("triage", [a, None, "zzz"]) == {a: f"a ({a})", "zzz": "zzz"}
    # Parked for a worker of version b: movable, woken, moved by a person.
    key = f"version:triage:{b}"
    store.park(fence, key, utcnow() + timedelta(hours=1))
    assert [r.id for r in store.movable_runs("triage", b)] == [fence.run_id]
    assert store.wake_versions([key]) == [(fence.run_id, key)]
    assert store.wake_versions([]) == []
    again = store.move_run(fence.run_id, b, a, {"changes": [], "by": "ops"})
    assert again is not None and again.version == a and again.parked_key is None
    assert store.move_run(fence.run_id, b, a, {"changes": []}) is None  # it moved already
    assert store.version_events(fence.run_id)[-1].data["by"] == "ops"


def test_the_audit_log_is_one_chain_and_erasure_keeps_a_runs_skeleton(
    store: PostgresStore,
) -> None:
    first = store.append_audit("ana", "decided", run_id=None, source="cli ana@host")
    second = store.append_audit("bo", "viewed_payloads", detail={"page": "run"})
    assert [e.id for e in store.audit_entries()] == [first, second]
    assert [e.id for e in store.audit_entries(after=first)] == [second]
    assert store.verify_audit().ok
    envelope = TriggerEnvelope(payload={"secret": "marker-42"}, keys={"customer": "42"})
    run, _ = store.create_run(NewRun(agent="triage", trigger=envelope))
    assert store.runs_by_key("customer", "42") == [run.id]
    [refused] = store.erase_runs([run.id], "ana")  # queued: live
    assert not refused.erased and refused.refused
    store.request_cancel(run.id)
    [erased] = store.erase_runs([run.id], "ana")
    assert erased.erased
    after = store.get_run(run.id)
    assert after.erased_by == "ana" and "marker-42" not in str(after.trigger)
    assert store.runs_by_key("customer", "42") == [run.id]  # found by the hash it keeps


def _cases(marker: str, count: int) -> list[dict[str, Any]]:
    """Cases as runner/evals/recording.py writes them, ``marker`` in each."""
    return [
        {
            "format": "runwright.case/1",
            "agent": "triage",
            "trigger": {"payload": {"note": f"{marker} {n}"}, "source": "cli"},
            "expected": {"output": {"label": "bug", "n": n}},
        }
        for n in range(count)
    ]


def test_datasets_are_versioned_by_content_and_their_cases_sealed(store: PostgresStore) -> None:
    marker = f"MARKER-{uuid.uuid4().hex[:8]}"
    cases = _cases(marker, 3)
    first = store.save_dataset(
        "refunds", cases, created_by="ana", query={"agent": "triage"}, description="last week"
    )
    assert (first.name, first.case_count, first.created_by) == ("refunds", 3, "ana")
    assert len(first.version) == 16 and first.query == {"agent": "triage"}
    # The same cases again, keys in another order: the same version, nothing written.
    reordered = [dict(reversed(list(case.items()))) for case in cases]
    assert store.save_dataset("refunds", reordered, created_by="bo") == first
    assert store.datasets() == [first]
    changed = store.save_dataset("refunds", cases[:2])
    assert changed.version != first.version and changed.case_count == 2
    assert store.datasets() == [changed, first]
    newest = store.dataset("refunds")
    assert newest.info == changed and newest.cases == cases[:2]
    assert store.dataset("refunds", first.version).cases == cases
    assert list(store.dataset("refunds", first.version).cases[0]) == list(cases[0])  # key order
    # Another name, the same cases: the same version under that name.
    assert store.save_dataset("copy", cases).version == first.version
    hits = found(store, marker)
    if store.sealing.cipher is not None:
        assert hits == []
    else:
        assert hits == ["dataset_cases.data"]

    before = snapshot(store)
    for name, bad in [
        ("-starts-badly", cases),
        ("x" * 101, cases),
        ("sp ace", cases),
        ("refunds", []),
        ("refunds", "not a list"),
        ("refunds", [{"ok": 1}, ["not", "an", "object"]]),
        ("refunds", [{"nul": "a\x00b"}]),
        ("refunds", [{"nan": float("nan")}]),
    ]:
        with pytest.raises(InvalidInput):
            store.save_dataset(name, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        store.save_dataset("refunds", cases, created_by="")
    with pytest.raises(InvalidInput):
        store.save_dataset("refunds", cases, query=["not", "an", "object"])  # type: ignore[arg-type]
    for name, version in [
        ("nobody", None),
        ("refunds", "0" * 16),
        ("refunds", "not-a-version"),
        ("../etc", None),
    ]:
        with pytest.raises(DatasetNotFound):
            store.dataset(name, version)
    assert store.delete_dataset("nobody") == 0
    assert snapshot(store) == before

    assert store.delete_dataset("refunds", first.version) == 1
    with pytest.raises(DatasetNotFound, match=first.version):
        store.dataset("refunds", first.version)
    assert store.delete_dataset("refunds") == 1
    assert [d.name for d in store.datasets()] == ["copy"]


def test_evaluation_cases_are_claimed_once_fenced_and_their_results_sealed(
    store: PostgresStore,
) -> None:
    marker = f"MARKER-{uuid.uuid4().hex[:8]}"
    data = store.save_dataset("triage", _cases("case", 3))
    options = {"mode": "live", "tools": "recorded", "scorers": ["exact"]}
    made = store.create_evaluation(
        "ev-1",
        dataset="triage",
        version=data.version,
        agent="triage",
        label="v2",
        case_count=3,
        created_by="ana",
        options=options,
    )
    assert (made.id, made.status, made.done, made.case_count) == (
        "ev-1",
        EvaluationStatus.RUNNING,
        0,
        3,
    )
    assert (made.options, made.summary, made.finished_at) == (options, None, None)
    t0 = utcnow()
    first = store.claim_eval_case("ev-1", "w1", 30, now=t0)
    assert first is not None and (first.position, first.attempts, first.claimed_by) == (0, 1, "w1")
    assert first.status is EvaluationCaseStatus.RUNNING and first.claimed_until is not None
    second = store.claim_eval_case("ev-1", "w2", 30, now=t0)
    assert second is not None and second.position == 1
    assert store.extend_eval_claim("ev-1", 0, "w1", 30, now=t0)
    assert not store.extend_eval_claim("ev-1", 0, "w2", 30, now=t0)  # not w2's
    # w1's claim lapses: w3 takes its case over, one attempt more, and w1 is fenced out.
    later = t0 + timedelta(seconds=61)
    taken = store.claim_eval_case("ev-1", "w3", 30, now=later)
    assert taken is not None and (taken.position, taken.attempts, taken.claimed_by) == (0, 2, "w3")
    result = {"output": f"done with {marker}", "steps": [{"n": 1}]}
    scores = {"exact": {"passed": True, "score": 1.0, "detail": "matched"}}
    before = snapshot(store)
    assert not store.finish_eval_case("ev-1", 0, "w1", result={"stale": 1}, scores={})
    assert not store.extend_eval_claim("ev-1", 0, "w1", 30, now=later)
    assert snapshot(store) == before
    assert store.finish_eval_case(
        "ev-1", 0, "w3", result=result, scores=scores, duration_ms=12.5, cost_usd=0.01, tokens=42
    )
    # A done case is never reopened, nor written again.
    assert not store.finish_eval_case("ev-1", 0, "w3", result={"again": 1}, scores={})
    # w2's process died: its case goes back, and the next claims take what is left.
    assert store.release_eval_claims("ev-1", "w2") == 1
    assert store.release_eval_claims("ev-1", "w2") == 0
    rest = [store.claim_eval_case("ev-1", "w4", 30, now=later) for _ in range(3)]
    assert [c.position if c else None for c in rest] == [1, 2, None]
    for position in (1, 2):
        assert store.finish_eval_case("ev-1", position, "w4", result={"n": position}, scores={})
    assert store.claim_eval_case("ev-1", "w5", 30, now=t0 + timedelta(days=10)) is None

    done = store.evaluation("ev-1")
    assert done.info.done == 3 and [c.status for c in done.cases] == [EvaluationCaseStatus.DONE] * 3
    case = done.cases[0]
    assert (case.result, case.scores, case.attempts, case.claimed_by) == (result, scores, 2, "w3")
    assert (case.duration_ms, case.cost_usd, case.tokens) == (12.5, 0.01, 42)
    assert (done.cases[1].result, done.cases[1].tokens) == ({"n": 1}, None)
    hits = found(store, marker)
    if store.sealing.cipher is not None:
        assert hits == []
    else:
        assert hits == ["evaluation_cases.result"]

    summary = {"exact": {"pass_rate": 1.0, "mean": 1.0}}
    ended = store.finish_evaluation("ev-1", summary)
    assert (ended.status, ended.summary, ended.done) == (EvaluationStatus.COMPLETED, summary, 3)
    assert ended.finished_at is not None
    assert store.finish_evaluation("ev-1", {"other": {}}, status="cancelled") == ended
    compared = store.create_evaluation(
        "ev-2", dataset="triage", version=data.version, agent="triage", label="v3",
        case_count=2, baseline="ev-1",
    )  # fmt: skip
    assert compared.baseline == "ev-1" and compared.options == {}
    assert [e.id for e in store.evaluations()] == ["ev-2", "ev-1"]
    assert [e.id for e in store.evaluations(dataset="triage", limit=1)] == ["ev-2"]
    assert store.evaluations(dataset="other") == []
    cancelled = store.finish_evaluation("ev-2", {}, status=EvaluationStatus.CANCELLED)
    assert cancelled.status is EvaluationStatus.CANCELLED
    assert store.claim_eval_case("ev-2", "w1", 30) is None  # an ended evaluation gives none

    # Bad input: one clear error each, nothing written.
    before = snapshot(store)
    store.save_dataset("other", _cases("other", 1))
    other = store.dataset("other").info.version
    before = snapshot(store)
    kwargs: dict[str, Any] = {"agent": "triage", "label": "v2", "case_count": 1}
    with pytest.raises(DatasetNotFound):
        store.create_evaluation("ev-3", dataset="nobody", version=other, **kwargs)
    with pytest.raises(DatasetNotFound):
        store.create_evaluation("ev-3", dataset="other", version="0" * 16, **kwargs)
    with pytest.raises(InvalidInput, match="exists already"):
        store.create_evaluation("ev-1", dataset="other", version=other, **kwargs)
    with pytest.raises(EvaluationNotFound, match="baseline"):
        store.create_evaluation("ev-3", dataset="other", version=other, baseline="ev-9", **kwargs)
    for bad in (0, 2, True):
        with pytest.raises(InvalidInput, match="case_count"):
            store.create_evaluation(
                "ev-3", dataset="other", version=other, agent="a", label="l", case_count=bad
            )
    for bad_id in ("", "-x", "a b", "x" * 200):
        with pytest.raises(InvalidInput):
            store.create_evaluation(bad_id, dataset="other", version=other, **kwargs)
    with pytest.raises(InvalidInput):
        store.create_evaluation("ev-3", dataset="other", version=other, agent="a", label="",
                                case_count=1)  # fmt: skip
    assert snapshot(store) == before
    store.create_evaluation("ev-3", dataset="other", version=other, **kwargs)
    claim = store.claim_eval_case("ev-3", "w1", 30)
    assert claim is not None
    before = snapshot(store)
    for bad_scores in (
        {"exact": {"passed": "yes"}},
        {"exact": {"score": float("inf")}},
        {"exact": {"score": True}},
        {"exact": {"extra": 1}},
        {"": {"passed": True}},
        {"exact": {"detail": 3}},
        ["not", "an", "object"],
    ):
        with pytest.raises(InvalidInput):
            store.finish_eval_case("ev-3", 0, "w1", result={}, scores=bad_scores)  # type: ignore[arg-type]
    for bad_kwargs in ({"tokens": -1}, {"cost_usd": float("nan")}, {"duration_ms": "1"}):
        with pytest.raises(InvalidInput):
            store.finish_eval_case("ev-3", 0, "w1", result={}, scores={}, **bad_kwargs)
    with pytest.raises(InvalidInput):
        store.finish_eval_case("ev-3", 0, "w1", result=[1], scores={})  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        store.finish_eval_case("ev-3", -1, "w1", result={}, scores={})
    for lease in (0, -1, float("nan"), float("inf"), 10**9):
        with pytest.raises(InvalidInput, match="lease"):
            store.claim_eval_case("ev-3", "w1", lease)
    with pytest.raises(InvalidInput):
        store.claim_eval_case("ev-3", "", 30)
    with pytest.raises(InvalidInput):
        store.finish_evaluation("ev-3", {}, status="running")
    with pytest.raises(InvalidInput):
        store.finish_evaluation("ev-3", ["no"])  # type: ignore[arg-type]
    for unknown in ("ev-9", "", "a b"):
        with pytest.raises(EvaluationNotFound):
            store.evaluation(unknown)
    assert store.claim_eval_case("ev-9", "w1", 30) is None  # nothing to claim there
    with pytest.raises(EvaluationNotFound):
        store.claim_eval_case("a b", "w1", 30)
    with pytest.raises(EvaluationNotFound):
        store.finish_evaluation("ev-9", {})
    with pytest.raises(InvalidInput):
        store.evaluations(limit=0)
    assert snapshot(store) == before


def _contract_tests() -> Iterator[tuple[Callable[..., Any], dict[str, Any]]]:
    """This module's tests of the store, in order, each with the arguments
    besides ``store`` of its first parametrized case."""
    for name, value in list(globals().items()):
        if not (name.startswith("test_") and inspect.isfunction(value)):
            continue
        parameters = list(inspect.signature(value).parameters)
        if parameters[:1] != ["store"]:
            continue
        first: dict[str, Any] = {}
        for mark in getattr(value, "pytestmark", []):
            if mark.name == "parametrize":
                names, cases = mark.args[0], mark.args[1]
                names = [n.strip() for n in names.split(",")] if isinstance(names, str) else names
                case = cases[0] if len(names) > 1 else [cases[0]]
                first.update(zip(names, case, strict=True))
        yield value, first


def test_key_counts_and_a_rotation_batch(store: PostgresStore) -> None:
    sealed = store.sealing.cipher is not None
    before_first = PostgresStore(
        store.engine, cipher=KeyRing.parse(f"before:{BEFORE_KEY},now:{NOW_KEY}") if sealed else None
    )
    fence = claimed(before_first)
    before_first.commit_step(
        fence,
        commit(1, 0, [msg(0), msg(1)], state={"n": 1}, outcome=Outcome(RunStatus.COMPLETED, "ok")),
    )
    written = store.get_run(fence.run_id)
    data = before_first.save_dataset("rotated", _cases("rotated", 2))
    before_first.create_evaluation(
        "ev-r", dataset="rotated", version=data.version, agent="a", label="l", case_count=1
    )
    assert before_first.claim_eval_case("ev-r", "w", 30) is not None
    before_first.finish_eval_case("ev-r", 0, "w", result={"report": 1}, scores={})
    counts = {(c.table, c.column, c.key): c.values for c in store.key_counts()}
    key = "before" if sealed else None
    assert counts[("messages", "body", key)] >= 2
    assert counts[("runs", "output", key)] >= 1 and counts[("runs", "trigger", key)] >= 1
    assert counts[("dataset_cases", "data", key)] == 2
    assert counts[("evaluation_cases", "result", key)] == 1
    if not sealed:
        with pytest.raises(CannotDecrypt, match="RUNWRIGHT_ENCRYPTION_KEYS is not set"):
            store.reseal("runs")
        return
    # A batch of one row at a time: where the next starts, until the table is done.
    first = store.reseal("messages", limit=1)
    assert (first.rows, first.values, first.unreadable) == (1, 1, [])
    assert first.after is not None
    rest = store.reseal("messages", first.after, limit=100)
    assert rest.rows >= 1 and rest.after is None
    for table in ("runs", "steps", "effects", "approvals", "schedules", "run_events"):
        assert store.reseal(table).after is None
    cases = store.reseal("dataset_cases", limit=1)
    assert (cases.rows, cases.after) == (1, ("rotated", data.version, 0))
    assert store.reseal("dataset_cases", cases.after).rows == 1
    assert store.reseal("evaluation_cases").values == 1
    assert {c.key for c in store.key_counts()} == {"now"}
    assert store.get_run(fence.run_id) == written
    assert store.dataset("rotated").cases == _cases("rotated", 2)
    assert store.evaluation("ev-r").cases[0].result == {"report": 1}
    assert store.reseal("messages").values == 0  # again: nothing to do


# The module's whole run, at worst, on a busy machine.
@pytest.mark.timeout(900)
def test_every_public_method_succeeded_in_each_mode(services: Services) -> None:
    """Every public method of the store returned normally in each mode, in
    this module's tests. Those that did not run in this process (the suite
    spread over processes, or run in part) run here, each on a database of
    its own, until every method has."""
    assert len(PUBLIC_METHODS) >= 30, PUBLIC_METHODS
    for kind in KINDS:
        for contract, arguments in _contract_tests():
            expected = set(PUBLIC_METHODS) - (set() if kind == "postgres-sealed" else SEALED_ONLY)
            if not expected - SUCCEEDED[kind]:
                break
            name = services.new_database()
            store = _store(services.database_url(name), kind)
            try:
                contract(Recording(store, kind), **arguments)
            finally:
                store.close()
                faults.disarm()
                services.drop_database(name)
    missing = {kind: sorted(set(PUBLIC_METHODS) - SUCCEEDED[kind]) for kind in KINDS}
    for kind in KINDS:
        if kind != "postgres-sealed":
            missing[kind] = sorted(set(missing[kind]) - SEALED_ONLY)
    assert missing == {kind: [] for kind in KINDS}, (
        "no test of this module made these methods return normally",
        missing,
    )
