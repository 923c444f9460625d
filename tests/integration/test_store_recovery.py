"""Retry and fork in the store, with prepared statements and without:
``retry_run``, ``attempts`` and ``fork_run`` (rules: ``store/retry_fork.py`` and
``store/pg/retry_fork.py``)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from store.db import make_engine
from store.errors import InvalidInput, InvalidTransition, RunNotFound
from store.models import (
    Decision,
    Fence,
    Message,
    NewRun,
    Outcome,
    RetryWait,
    RunError,
    RunStatus,
    StepKind,
    StepRecord,
    TriggerEnvelope,
    Usage,
    utcnow,
)
from store.postgres import PostgresStore
from tests.helpers import (
    approval,
    claimed,
    commit,
    force_status,
    new_run,
    snapshot,
    tool_record,
    try_claim,
)


@pytest.fixture(params=("postgres", "postgres-unprepared"))
def store(request: pytest.FixtureRequest) -> Any:
    """The store with prepared statements and without (as
    tests/integration/test_store_contract.py runs it)."""
    if request.param == "postgres":
        return request.getfixturevalue("pg_store")
    store = PostgresStore(make_engine(request.getfixturevalue("database_url"), prepared=False))
    request.addfinalizer(store.close)
    return store


FAILED = RunError("model_error", "scripted/m: BadRequestError: no")


def assistant(step: int, *calls: str, text: str | None = None) -> Message:
    message: Message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"c{step}-{name}",
                "type": "function",
                "function": {"name": name, "arguments": "{}"},
            }
            for name in calls
        ]
    return message


def result(step: int, name: str) -> Message:
    return {"role": "tool", "tool_call_id": f"c{step}-{name}", "content": f"{name} {step}"}


def llm(index: int, message: Message, reason: str) -> StepRecord:
    now = utcnow()
    return StepRecord(
        index=index,
        kind=StepKind.LLM,
        started_at=now,
        finished_at=now,
        name="scripted/m",
        output={"message": message, "finish_reason": reason},
        usage=Usage(10, 5),
    )


def three_steps(store: PostgresStore, *, thread: str | None = None) -> Fence:
    """A run of three steps (each its model call, a lookup, the state it left),
    still running: step 1 answers its call, so does step 2, step 3 says done."""
    fence = claimed(store, thread=thread, key=f"thread:{thread}" if thread else None)
    trigger = {"role": "user", "content": "the trigger"}
    for step, base in ((1, 0), (2, 3)):
        call = assistant(step, "lookup")
        store.record_llm_step(fence, llm(step, call, "tool_calls"))
        first = [trigger] if step == 1 else []
        store.commit_step(
            fence,
            commit(
                step,
                base,
                [*first, call, result(step, "lookup")],
                tools=[tool_record(step, f"c{step}-lookup")],
                state={"n": step},
            ),
        )
    store.record_llm_step(fence, llm(3, assistant(3, text="done"), "stop"))
    store.commit_step(fence, commit(3, 5, [assistant(3, text="done")]))
    return fence


def failed_run(store: PostgresStore) -> Fence:
    fence = three_steps(store)
    store.end(fence, Outcome(RunStatus.FAILED, error=FAILED))
    return fence


def fork_of(
    store: PostgresStore, run_id: str, *, agent: str = "triage", trigger_id: str = ""
) -> NewRun:
    original = store.get_run(run_id)
    envelope = TriggerEnvelope(
        **{
            **original.trigger.model_dump(),
            "id": trigger_id or str(uuid.uuid4()),
            "thread": None,
        }
    )
    return NewRun(agent=agent, trigger=envelope)


def rows_of(store: PostgresStore, run_id: str) -> Any:
    """Every row of the run, in every table."""
    tables = {
        "runs": ("id", "id"),
        "steps": ("run_id", "id"),
        "messages": ("run_id", "seq"),
        "checkpoints": ("run_id", "run_id"),
        "effects": ("run_id", "key"),
        "approvals": ("run_id", "approval_id"),
        "run_attempts": ("run_id", "attempt"),
    }
    with store.engine.connect() as conn:
        return {
            name: [
                tuple(row)
                for row in conn.execute(
                    sa.text(f"SELECT * FROM {name} WHERE {key} = :id ORDER BY {order}"),
                    {"id": run_id},
                )
            ]
            for name, (key, order) in tables.items()
        }


# ------------------------------------------------------------------- retry


def test_retry_queues_a_failed_run_from_its_checkpoint_and_keeps_the_attempt(
    store: PostgresStore,
) -> None:
    fence = failed_run(store)
    failed = store.get_run(fence.run_id)
    checkpoint = store.checkpoint(fence.run_id)
    assert store.attempts(fence.run_id) == []

    result_ = store.retry_run(fence.run_id, extra_steps=5)
    assert result_.retried
    run = result_.run
    assert run == store.get_run(fence.run_id)
    assert run.status is RunStatus.QUEUED and run.claim is None
    assert run.error is None and run.output is None and run.finished_at is None
    assert run.started_at is None and not run.cancel_requested and run.retry is None
    assert run.extra_steps == 5
    assert run.enqueued_at is not None and failed.finished_at is not None
    assert run.enqueued_at >= failed.finished_at
    # The history is untouched: the next execution starts from the checkpoint.
    assert run.usage == failed.usage and run.steps_used == 3 and run.state == {"n": 2}
    assert store.checkpoint(fence.run_id) == checkpoint

    [attempt] = store.attempts(fence.run_id)
    assert attempt.attempt == 1 and attempt.status is RunStatus.FAILED
    assert attempt.error == FAILED and attempt.steps_used == 3 and attempt.extra_steps == 5
    assert attempt.usage == Usage(30, 15)
    assert attempt.started_at == failed.started_at and attempt.finished_at == failed.finished_at
    assert attempt.retried_at >= failed.finished_at

    claim = try_claim(store, fence.run_id, "worker-b", 30)
    assert claim is not None and claim.epoch == fence.epoch + 1
    assert store.get_run(fence.run_id).started_at is not None  # this attempt's start


def test_retry_of_a_cancelled_run_clears_the_request_and_the_retry_wait(
    store: PostgresStore,
) -> None:
    fence = claimed(store)
    store.commit_step(fence, commit(1, 0, [{"role": "user", "content": "go"}]))
    now = utcnow()
    wait = RetryWait(attempts=3, since=now, error="503", at=now + timedelta(minutes=1))
    store.defer_retry(fence, wait)
    cancelled = store.request_cancel(fence.run_id).run
    assert cancelled.status is RunStatus.CANCELLED and cancelled.cancel_requested
    assert cancelled.retry == wait  # kept by the settle; the retry clears it

    run = store.retry_run(fence.run_id).run
    assert run.status is RunStatus.QUEUED and run.retry is None and run.retry_at is None
    assert not run.cancel_requested and run.error is None and run.extra_steps == 0
    assert try_claim(store, fence.run_id, "w", 30) is not None  # claimable now, no wait
    [attempt] = store.attempts(fence.run_id)
    assert attempt.status is RunStatus.CANCELLED
    assert attempt.error is not None and attempt.error.code == "cancelled"


@pytest.mark.parametrize(
    "status",
    [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.INTERRUPTED],
)
def test_retry_of_a_live_run_changes_nothing(store: PostgresStore, status: RunStatus) -> None:
    fence = claimed(store)
    if status is RunStatus.WAITING:
        store.commit_step(fence, commit(1, 0, [{"role": "user"}], approvals=[approval("c")]))
    elif status is not RunStatus.RUNNING:
        force_status(store, fence.run_id, status)
    before = snapshot(store)
    live = store.get_run(fence.run_id)
    result_ = store.retry_run(fence.run_id, extra_steps=3)
    assert not result_.retried and result_.run == live and live.status is status
    assert snapshot(store) == before
    assert store.attempts(fence.run_id) == []


def test_retry_of_a_completed_run_is_refused_in_one_line(store: PostgresStore) -> None:
    fence = three_steps(store)
    store.end(fence, Outcome(RunStatus.COMPLETED, output="done"))
    before = snapshot(store)
    with pytest.raises(InvalidTransition) as refused:
        store.retry_run(fence.run_id)
    assert str(refused.value) == (
        f"run {fence.run_id} completed; a completed run cannot be retried"
    )
    assert snapshot(store) == before


@pytest.mark.parametrize("extra", [-1, 1_000_001, True, "3", 2.0, None])
def test_retry_refuses_bad_extra_steps(store: PostgresStore, extra: Any) -> None:
    fence = failed_run(store)
    before = snapshot(store)
    with pytest.raises(InvalidInput, match="extra steps must be"):
        store.retry_run(fence.run_id, extra_steps=extra)
    assert snapshot(store) == before
    assert store.get_run(fence.run_id).status is RunStatus.FAILED


def test_retry_and_attempts_of_unknown_runs(store: PostgresStore) -> None:
    for bad in (str(uuid.uuid4()), "not-a-uuid", ""):
        with pytest.raises(RunNotFound, match="no run with id"):
            store.retry_run(bad)
        with pytest.raises(RunNotFound, match="no run with id"):
            store.attempts(bad)


def test_attempts_are_kept_oldest_first(store: PostgresStore) -> None:
    fence = failed_run(store)
    store.retry_run(fence.run_id, extra_steps=2)
    claim = try_claim(store, fence.run_id, "worker-b", 30)
    assert claim is not None
    again = Fence(fence.run_id, "worker-b", claim.epoch)
    store.record_llm_step(again, llm(4, assistant(4, text="x"), "stop"))
    second_error = RunError("timeout", "the execution ran past its timeout of 10 ms")
    store.end(again, Outcome(RunStatus.FAILED, error=second_error))
    second_start = store.get_run(fence.run_id).started_at
    run = store.retry_run(fence.run_id, extra_steps=1).run
    assert run.extra_steps == 3

    first, second = store.attempts(fence.run_id)
    assert (first.attempt, first.error, first.extra_steps) == (1, FAILED, 2)
    assert (second.attempt, second.error, second.extra_steps) == (2, second_error, 1)
    assert second.steps_used == 4 and second.usage == Usage(40, 20)
    assert second.started_at == second_start and first.started_at is not None
    assert first.started_at < second.started_at  # type: ignore[operator]
    assert first.retried_at <= second.retried_at


def test_a_run_cancelled_while_waiting_waits_again_for_the_same_approvals(
    store: PostgresStore,
) -> None:
    """Cancelling a waiting run withdrew its approvals; retried, the run would
    re-pause on requests nobody can answer. The retry opens them again: same
    ids (the history's requests and any link still name them), a fresh
    lifetime, notified again; one decided before the cancel stays decided."""
    fence = claimed(store)
    decided, open_ = approval("c1", notify_in=60), approval("c2", notify_in=60)
    store.commit_step(fence, commit(1, 0, [{"role": "user"}], approvals=[decided, open_]))
    response = {"role": "approval_response", "approval_id": decided.approval_id}
    store.decide(decided.approval_id, Decision.APPROVED, "ok", lambda _: response)
    store.record_notification(open_.approval_id, accepted=True, retry_at=None)
    store.request_cancel(fence.run_id)
    assert store.get_approval(open_.approval_id).decision is Decision.WITHDRAWN
    lifetime = open_.expires_at - store.get_approval(open_.approval_id).created_at

    before_retry = utcnow()
    assert store.retry_run(fence.run_id).retried
    reopened = store.get_approval(open_.approval_id)
    assert reopened.pending and reopened.reason is None and reopened.decided_at is None
    assert reopened.notified_at is None and reopened.attempts == 0
    assert reopened.next_notify_at is not None and reopened.next_notify_at <= utcnow()
    assert reopened.expires_at - reopened.created_at == lifetime
    assert reopened.created_at >= before_retry - timedelta(seconds=1)
    assert store.get_approval(decided.approval_id).decision is Decision.APPROVED

    # The execution re-pauses (the loop sees the unanswered request), the
    # approval is the run's wait again, tick() re-sends it, a decision resumes.
    claim = try_claim(store, fence.run_id, "worker-b", 30)
    assert claim is not None
    settled = store.end(Fence(fence.run_id, "worker-b", claim.epoch), Outcome(RunStatus.WAITING))
    assert settled.run.waiting is not None
    assert settled.run.waiting.approval_id == open_.approval_id
    due = store.claim_due_notifications(10, 5, 60)
    assert [n.approval.approval_id for n in due] == [open_.approval_id]
    answer = {"role": "approval_response", "approval_id": open_.approval_id}
    assert store.decide(open_.approval_id, Decision.DENIED, "no", lambda _: answer).resumed
    [attempt] = store.attempts(fence.run_id)
    assert attempt.status is RunStatus.CANCELLED


def test_a_run_failed_on_an_expired_approval_gets_a_fresh_expiry(store: PostgresStore) -> None:
    fence = claimed(store)
    asked = approval("c1", expires_in=600)
    store.commit_step(fence, commit(1, 0, [{"role": "user"}], approvals=[asked]))
    later = utcnow() + timedelta(minutes=11)
    assert [a.approval_id for a in store.expired_approvals(10, now=later)] == [asked.approval_id]
    store.fail_waiting(fence.run_id, RunError("approval_expired", "too late"))

    retried_at = utcnow()
    store.retry_run(fence.run_id)
    reopened = store.get_approval(asked.approval_id)
    assert reopened.pending and reopened.expires_at >= retried_at + timedelta(seconds=599)
    assert reopened.next_notify_at is not None  # the agent has a notifier
    claim = try_claim(store, fence.run_id, "w", 30)
    assert claim is not None
    store.end(Fence(fence.run_id, "w", claim.epoch), Outcome(RunStatus.WAITING))
    assert store.expired_approvals(10, now=utcnow() + timedelta(minutes=9)) == []
    assert store.expired_approvals(10, now=utcnow() + timedelta(minutes=11))


def test_only_the_last_steps_approvals_open_again(store: PostgresStore) -> None:
    fence = claimed(store)
    first = approval("c1")
    store.commit_step(fence, commit(1, 0, [{"role": "user"}], approvals=[first]))
    response = {"role": "approval_response", "approval_id": first.approval_id}
    store.decide(first.approval_id, Decision.DENIED, "no", lambda _: response)
    claim = try_claim(store, fence.run_id, "w", 30)
    assert claim is not None
    again = Fence(fence.run_id, "w", claim.epoch)
    store.commit_step(again, commit(2, 2, [{"role": "assistant", "content": "ok"}]))
    store.end(again, Outcome(RunStatus.FAILED, error=FAILED))
    store.retry_run(fence.run_id)
    assert store.get_approval(first.approval_id).decision is Decision.DENIED


def test_two_retries_at_once_retry_once(store: PostgresStore) -> None:
    """The run row is locked: of two concurrent retries one queues the run, the
    other finds it live."""
    for _ in range(5):
        fence = failed_run(store)
        barrier = threading.Barrier(2)
        results: list[bool] = []
        threads = [
            threading.Thread(target=_retry_after, args=(store, fence.run_id, barrier, results))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(results) == [False, True]
        assert len(store.attempts(fence.run_id)) == 1
        assert store.get_run(fence.run_id).extra_steps == 1


def _retry_after(
    store: PostgresStore, run_id: str, barrier: threading.Barrier, results: list[bool]
) -> None:
    barrier.wait()
    results.append(store.retry_run(run_id, extra_steps=1).retried)


# -------------------------------------------------------------------- fork


def test_fork_starts_from_the_history_after_a_step(store: PostgresStore) -> None:
    fence = three_steps(store, thread="t-9")
    store.end(fence, Outcome(RunStatus.COMPLETED, output="done"))
    original = store.get_run(fence.run_id)
    kept = rows_of(store, fence.run_id)
    full = store.checkpoint(fence.run_id)
    assert full is not None

    new = fork_of(store, fence.run_id, agent="other")
    fork = store.fork_run(fence.run_id, 2, new, model="scripted/other")
    assert fork == store.get_run(new.id)
    assert fork.id == new.id and fork.agent == "other" and fork.status is RunStatus.QUEUED
    assert fork.forked_from == fence.run_id and fork.forked_at_step == 2
    assert fork.model == "scripted/other"
    assert fork.extra_steps == 2 and fork.steps_used == 2 and fork.usage == Usage()
    assert fork.state == {"n": 2} and fork.thread is None and fork.trigger.thread is None
    assert fork.trigger.id == new.trigger.id != original.trigger.id
    assert fork.trigger.payload == original.trigger.payload
    assert fork.enqueued_at is not None and fork.started_at is None and fork.error is None

    checkpoint = store.checkpoint(fork.id)
    assert checkpoint is not None and checkpoint.step_index == 2
    assert checkpoint.messages == full.messages[:5]
    assert checkpoint.finish_reason == "tool_calls"
    # Its own history through step 2: the state steps; no model call, no tool.
    steps = store.steps(fork.id)
    assert [(s.kind, s.index, s.output) for s in steps] == [
        (StepKind.STATE, 1, {"n": 1}),
        (StepKind.STATE, 2, {"n": 2}),
    ]
    assert rows_of(store, fence.run_id) == kept  # the original is not written
    assert try_claim(store, fork.id, "w", 30) is not None

    # A fork of the fork at step 1 finds that step's state and messages.
    second = store.fork_run(fork.id, 1, fork_of(store, fork.id), model=None)
    assert second.state == {"n": 1} and second.model is None
    cp = store.checkpoint(second.id)
    assert cp is not None and cp.messages == full.messages[:3]


def test_fork_at_the_last_step_takes_the_whole_checkpoint(store: PostgresStore) -> None:
    fence = three_steps(store)
    store.end(fence, Outcome(RunStatus.FAILED, error=FAILED))
    fork = store.fork_run(fence.run_id, 3, fork_of(store, fence.run_id), model=None)
    checkpoint = store.checkpoint(fork.id)
    original = store.checkpoint(fence.run_id)
    assert checkpoint is not None and original is not None
    assert checkpoint.messages == original.messages and checkpoint.step_index == 3
    assert checkpoint.finish_reason == original.finish_reason
    assert fork.state == {"n": 2} and fork.extra_steps == 3


def test_fork_refuses_steps_it_cannot_start_from(store: PostgresStore) -> None:
    fence = three_steps(store)
    fresh, _ = store.create_run(new_run())
    waiting = claimed(store)
    call = assistant(1, "refund", "lookup")
    store.commit_step(
        waiting,
        commit(1, 0, [{"role": "user"}, call, result(1, "lookup")], approvals=[approval("c")]),
    )
    before = snapshot(store)
    cases: list[tuple[str, int, Any, str]] = [
        (fence.run_id, 0, None, "steps 1 to 3, not at step 0"),
        (fence.run_id, 4, None, "steps 1 to 3, not at step 4"),
        (fence.run_id, -1, None, "not at step -1"),
        (fence.run_id, "2", None, "must be a whole number"),
        (fence.run_id, True, None, "must be a whole number"),
        (fresh.id, 1, None, "has no checkpoint yet"),
        (waiting.run_id, 1, None, "ends with tool calls that have no result (refund)"),
        (fence.run_id, 2, "", "the model is empty"),
        (fence.run_id, 2, "bad\x00model", "NUL"),
        (fence.run_id, 2, "m" * 300, "the limit is 256"),
    ]
    for run_id, at, model, says in cases:
        with pytest.raises(InvalidInput, match=says.replace("(", r"\(").replace(")", r"\)")):
            store.fork_run(run_id, at, fork_of(store, run_id), model=model)
    for bad in (str(uuid.uuid4()), "nope"):
        with pytest.raises(RunNotFound, match="no run with id"):
            store.fork_run(bad, 1, fork_of(store, fence.run_id), model=None)
    not_an_id = NewRun(agent="triage", trigger=TriggerEnvelope(), id="NOT-A-UUID")
    with pytest.raises(InvalidInput, match="lowercase UUID"):
        store.fork_run(fence.run_id, 1, not_an_id, model=None)
    assert snapshot(store) == before


def _forget_step_numbers(store: PostgresStore, run_id: str) -> None:
    """As if the run's messages were written before revision 0004."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE messages SET step_index = NULL WHERE run_id = :id"), {"id": run_id}
        )


def _shuffle_step_numbers(store: PostgresStore, run_id: str) -> None:
    """Step numbers that are not in message order (no public call writes them)."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE messages SET step_index = 3 WHERE run_id = :id AND seq = 0"),
            {"id": run_id},
        )


def test_a_history_without_step_numbers_forks_only_at_its_last_step(
    store: PostgresStore,
) -> None:
    fence = three_steps(store)
    _forget_step_numbers(store, fence.run_id)
    with pytest.raises(InvalidInput, match=r"revision 0004.*only at its last step, 3"):
        store.fork_run(fence.run_id, 2, fork_of(store, fence.run_id), model=None)
    fork = store.fork_run(fence.run_id, 3, fork_of(store, fence.run_id), model=None)
    checkpoint = store.checkpoint(fork.id)
    assert checkpoint is not None and len(checkpoint.messages) == 6
    # The fork's messages carry no step numbers either.
    with pytest.raises(InvalidInput, match="revision 0004"):
        store.fork_run(fork.id, 1, fork_of(store, fork.id), model=None)


def test_step_numbers_out_of_order_refuse_the_fork(store: PostgresStore) -> None:
    fence = three_steps(store)
    _shuffle_step_numbers(store, fence.run_id)
    with pytest.raises(InvalidInput, match="not the start of its history"):
        store.fork_run(fence.run_id, 2, fork_of(store, fence.run_id), model=None)


def test_fork_is_idempotent_on_its_id_and_trigger_id(store: PostgresStore) -> None:
    fence = three_steps(store)
    new = fork_of(store, fence.run_id, trigger_id="fork-1")
    fork = store.fork_run(fence.run_id, 2, new, model=None)
    before = snapshot(store)
    assert store.fork_run(fence.run_id, 2, new, model=None) == fork
    same_trigger = fork_of(store, fence.run_id, trigger_id="fork-1")
    assert same_trigger.id != new.id
    assert store.fork_run(fence.run_id, 2, same_trigger, model=None) == fork
    assert snapshot(store) == before
    # The id of a run that is not this fork is refused, not returned.
    with pytest.raises(InvalidInput, match=r"not a fork of run .* at step 1"):
        store.fork_run(fence.run_id, 1, same_trigger, model=None)
    original = store.get_run(fence.run_id)
    taken = fork_of(store, fence.run_id, trigger_id=original.trigger.id)
    with pytest.raises(InvalidInput, match=f"run {fence.run_id} already has this id"):
        store.fork_run(fence.run_id, 2, taken, model=None)
    assert snapshot(store) == before

    # Asked again once it waits, the fork comes back with its wait point.
    claim = try_claim(store, fork.id, "w", 30)
    assert claim is not None
    store.commit_step(
        Fence(fork.id, "w", claim.epoch), commit(3, 5, [assistant(3)], approvals=[approval("c")])
    )
    waiting = store.fork_run(fence.run_id, 2, new, model=None)
    assert waiting.waiting is not None and waiting == store.get_run(fork.id)


def test_a_fork_leaves_every_row_of_the_original_as_it_was(pg_store: PostgresStore) -> None:
    """Byte for byte, on Postgres: runs, steps, messages, checkpoints, effects,
    approvals and attempts of the original, before and after forks at every step."""
    fence = three_steps(pg_store)
    pg_store.begin_effect(fence, f"{fence.run_id}:c9", "charge", {"a": 1}, rerun_started=False)
    pg_store.finish_effect(fence, f"{fence.run_id}:c9", output={"ok": True})
    call = assistant(4, "refund")
    pg_store.record_llm_step(fence, llm(4, call, "tool_calls"))
    asked = approval("c4-refund")
    pg_store.commit_step(fence, commit(4, 6, [call], approvals=[asked]))
    answer = {"role": "approval_response", "approval_id": asked.approval_id}
    pg_store.decide(asked.approval_id, Decision.APPROVED, "ok", lambda _: answer)
    pg_store.request_cancel(fence.run_id)
    pg_store.retry_run(fence.run_id)
    pg_store.request_cancel(fence.run_id)
    before = rows_of(pg_store, fence.run_id)
    assert all(before[table] for table in before), before  # every table has rows
    for step in (1, 2, 3):
        pg_store.fork_run(fence.run_id, step, fork_of(pg_store, fence.run_id), model="m")
    with pytest.raises(InvalidInput, match=r"no result \(refund\)"):
        pg_store.fork_run(fence.run_id, 4, fork_of(pg_store, fence.run_id), model=None)
    assert rows_of(pg_store, fence.run_id) == before


def test_forks_taken_while_the_original_moves_on_see_one_checkpoint(
    pg_store: PostgresStore,
) -> None:
    """Forks at the original's latest step while its execution commits step
    after step (on Postgres, where the two run in separate transactions): each
    fork holds exactly the messages the steps up to its own wrote, and no
    statement deadlocks."""
    fence = three_steps(pg_store)
    stop = threading.Event()
    errors: list[BaseException] = []

    def move_on() -> None:
        try:
            for step in range(4, 60):
                if stop.is_set():
                    return
                call = assistant(step, "lookup")
                pg_store.record_llm_step(fence, llm(step, call, "tool_calls"))
                base = 6 + 2 * (step - 4)
                pg_store.commit_step(
                    fence, commit(step, base, [call, result(step, "lookup")], state={"n": step})
                )
        except BaseException as exc:  # reported below
            errors.append(exc)

    writer = threading.Thread(target=move_on)
    writer.start()
    forks = []
    try:
        for _ in range(15):
            checkpoint = pg_store.checkpoint(fence.run_id)
            assert checkpoint is not None
            at = checkpoint.step_index
            forks.append(
                (
                    at,
                    pg_store.fork_run(
                        fence.run_id, at, fork_of(pg_store, fence.run_id), model=None
                    ),
                )
            )
    finally:
        stop.set()
        writer.join(30)
    assert errors == []
    final = pg_store.checkpoint(fence.run_id)
    assert final is not None
    for at, fork in forks:
        checkpoint = pg_store.checkpoint(fork.id)
        assert checkpoint is not None and checkpoint.step_index == at
        expected = 6 + 2 * (at - 3) if at >= 3 else [0, 3, 5][at]
        assert len(checkpoint.messages) == expected
        assert checkpoint.messages == final.messages[:expected]
        assert fork.state == {"n": at if at != 3 else 2}  # step 3 changed no state
