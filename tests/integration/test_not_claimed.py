"""Why an execution could not claim its run (``Engine.try_execute``,
``Claims.refusal``), on real Postgres and Redis: another owner holds it (by
Postgres's claim, or a claimer that has only set the lease so far), it has
settled, or it is not claimable now. The refused execution changes nothing.
With a worker and Flower: tests/e2e/test_duplicate_delivery.py."""

from __future__ import annotations

from runner import Engine
from runner.core.coordination.claims import Claims, NotClaimed, Refusal
from runner.core.coordination.leases import Leases, lease_key
from store.models import RunStatus


def refused(engine: Engine, run_id: str) -> NotClaimed:
    before = engine.get_run(run_id)
    done = engine.try_execute(run_id)
    assert isinstance(done, NotClaimed), done
    assert engine.get_run(run_id) == before  # the refused execution wrote nothing
    assert engine.execute(run_id) is None  # what execute() has always said
    return done


def test_a_run_another_owner_holds_names_the_owner_and_its_epoch(
    engine: Engine, leases: Leases
) -> None:
    run = engine.start("steady", {"steps": 1})
    elsewhere = Claims(engine.store, leases, ttl_seconds=30)
    claimed = elsewhere.acquire_run(run.id, "host-b:42:abc")
    assert isinstance(claimed, tuple)
    fence, _ = claimed

    held = refused(engine, run.id)
    assert held.why is Refusal.HELD
    assert (held.owner, held.epoch) == ("host-b:42:abc", fence.epoch)
    assert str(held) == f"run {run.id} is held by host-b:42:abc (epoch {fence.epoch})"
    # Without its lease (a Redis restart), Postgres's claim still refuses, and names it.
    leases.redis.delete(lease_key(run.id))
    held = refused(engine, run.id)
    assert (held.why, held.owner, held.epoch) == (Refusal.HELD, "host-b:42:abc", fence.epoch)
    assert engine.get_run(run.id).claim.epoch == fence.epoch  # type: ignore[union-attr]


def test_a_claimer_still_on_its_way_to_postgres_holds_the_run(
    engine: Engine, leases: Leases
) -> None:
    run = engine.start("steady", {"steps": 1})
    assert leases.acquire(run.id, "host-c:7:def", 30_000)  # epoch 0: pending
    pending = refused(engine, run.id)
    assert (pending.why, pending.owner, pending.epoch) == (Refusal.HELD, "host-c:7:def", 0)
    assert str(pending) == f"run {run.id} is held by host-c:7:def (its claim pending)"
    assert engine.get_run(run.id).status is RunStatus.QUEUED


def test_a_settled_run_says_how_it_settled(engine: Engine) -> None:
    run = engine.start("steady", {"steps": 1, "latency": 0.0})
    done = engine.try_execute(run.id)
    assert not isinstance(done, NotClaimed) and done is not None
    assert done.status is RunStatus.COMPLETED
    settled = refused(engine, run.id)
    assert settled.why is Refusal.ENDED and settled.owner is None
    assert str(settled) == f"run {run.id} is already completed"


def test_a_waiting_run_and_a_run_behind_its_key_are_not_claimable_now(engine: Engine) -> None:
    waiting = engine.start("fleet", {"amount": 500})  # the refund waits for an approval
    left = engine.execute(waiting.id)
    assert left is not None and left.status is RunStatus.WAITING
    why = refused(engine, waiting.id)
    assert why.why is Refusal.NOT_CLAIMABLE and why.owner is None
    assert str(why) == f"run {waiting.id} is waiting and not claimable now"

    first = engine.start("steady", {"steps": 1, "latency": 0.0, "customer": "c-1"})
    second = engine.start("steady", {"steps": 1, "latency": 0.0, "customer": "c-1", "n": 2})
    behind = refused(engine, second.id)
    assert behind.why is Refusal.NOT_CLAIMABLE
    assert str(behind) == (
        f"run {second.id} is queued and not claimable now (it waits for its concurrency key)"
    )
    assert engine.get_run(first.id).status is RunStatus.QUEUED
