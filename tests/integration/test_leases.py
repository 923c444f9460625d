"""Redis leases and the claim that combines them with Postgres, on real Redis."""

from __future__ import annotations

import threading
import time

import pytest

from runner.core.coordination.claims import Claims
from runner.core.coordination.leases import CancelListener, Holder, Leases, Renewal, lease_key
from store.errors import LeaseLostError
from store.models import Fence, RunStatus
from store.postgres import PostgresStore
from tests.helpers import new_run


def test_acquire_is_exclusive_and_carries_owner_and_epoch(leases: Leases) -> None:
    assert leases.acquire("r1", "a", 10_000)
    assert not leases.acquire("r1", "b", 10_000)
    assert leases.holder("r1") == Holder("a", 0)
    assert leases.bind("r1", "a", 3, 10_000)
    assert leases.holder("r1") == Holder("a", 3)
    assert leases.redis.get(lease_key("r1")) == b"3:a"


def test_only_the_owner_renews_or_releases(leases: Leases) -> None:
    leases.acquire("r1", "a", 10_000)
    leases.bind("r1", "a", 1, 10_000)
    assert leases.renew("r1", "b", 1, 60_000) is Renewal.FOREIGN
    assert leases.renew("r1", "a", 2, 60_000) is Renewal.FOREIGN  # wrong epoch
    assert 0 < leases.redis.pttl(lease_key("r1")) <= 10_000
    assert leases.renew("r1", "a", 1, 60_000) is Renewal.RENEWED
    assert leases.redis.pttl(lease_key("r1")) > 10_000
    assert not leases.release("r1", "b", 1)
    assert leases.holder("r1") == Holder("a", 1)
    assert leases.release("r1", "a", 1)
    assert leases.holder("r1") is None


def test_expired_lease_reads_as_lapsed(leases: Leases) -> None:
    leases.acquire("r1", "a", 100)
    leases.acquire("r2", "a", 60_000)
    assert leases.lapsed(["r1", "r2", "r3"]) == {"r3"}
    time.sleep(0.25)
    assert leases.holder("r1") is None
    assert leases.lapsed(["r1", "r2", "r3"]) == {"r1", "r3"}


def test_heartbeat_recreates_a_lost_lease_only_for_the_postgres_owner(
    pg_store: PostgresStore, leases: Leases
) -> None:
    claims = Claims(pg_store, leases, ttl_seconds=30)
    run, _ = pg_store.create_run(new_run())
    claimed = claims.acquire_run(run.id, "worker-a")
    assert isinstance(claimed, tuple)
    fence, _ = claimed
    assert fence.epoch == 1
    assert leases.holder(run.id) == Holder("worker-a", 1)

    leases.redis.flushdb()  # this test's own database: the lease key is gone
    assert leases.holder(run.id) is None
    beat = claims.heartbeat(fence)
    assert beat.lease is Renewal.RESTORED and not beat.cancel_requested
    assert leases.holder(run.id) == Holder("worker-a", 1)

    leases.redis.flushdb()
    stale = Fence(run.id, "worker-z", 1)
    with pytest.raises(LeaseLostError):
        claims.heartbeat(stale)  # Postgres says no: nothing re-created
    assert leases.holder(run.id) is None


def test_check_fails_fast_on_a_newer_epoch_and_defers_otherwise(
    pg_store: PostgresStore, leases: Leases, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = Claims(pg_store, leases, ttl_seconds=30)
    run, _ = pg_store.create_run(new_run())
    claimed = claims.acquire_run(run.id, "worker-a")
    assert isinstance(claimed, tuple)
    fence, _ = claimed
    claims.check(fence)
    # Past half a TTL since Redis confirmed the lease (a process stopped that
    # long), the check asks Redis again.
    later = time.monotonic() + 16
    monkeypatch.setattr("runner.core.coordination.claims.time.monotonic", lambda: later)
    leases.redis.delete(lease_key(run.id))
    claims.check(fence)  # missing key: Postgres decides
    leases.redis.set(lease_key(run.id), Holder("worker-b", 0).encode())
    claims.check(fence)  # a claimer that has not reached Postgres
    leases.redis.set(lease_key(run.id), Holder("worker-b", 2).encode())
    with pytest.raises(LeaseLostError, match="taken over"):
        claims.check(fence)


def test_a_lease_redis_confirmed_lately_is_checked_from_memory(
    pg_store: PostgresStore, leases: Leases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within half a TTL of the claim's bind or a heartbeat's renewal, nobody
    else can hold the lease (its key cannot be gone): the check asks Redis
    nothing; a renewal Redis refuses ends that at once."""
    claims = Claims(pg_store, leases, ttl_seconds=30)
    run, _ = pg_store.create_run(new_run())
    claimed = claims.acquire_run(run.id, "worker-a")
    assert isinstance(claimed, tuple)
    fence, _ = claimed
    asked: list[str] = []
    real_holder = leases.holder

    def holder(run_id: str) -> Holder | None:
        asked.append(run_id)
        return real_holder(run_id)

    monkeypatch.setattr(leases, "holder", holder)
    for _ in range(5):
        claims.check(fence)
    assert asked == []
    claims.heartbeat(fence)
    claims.check(fence)
    assert asked == []
    # An older fence of the run (a zombie's) is not the one Redis confirmed.
    with pytest.raises(LeaseLostError):
        claims.check(Fence(run.id, "worker-old", fence.epoch - 1))
    assert asked == [run.id]
    # A renewal that finds the key another's: the next check asks Redis.
    leases.redis.set(lease_key(run.id), Holder("worker-b", fence.epoch + 1).encode())
    assert claims.heartbeat(fence).lease is Renewal.FOREIGN
    with pytest.raises(LeaseLostError, match="taken over"):
        claims.check(fence)


def test_failed_postgres_claim_releases_the_pending_lease(
    pg_store: PostgresStore, leases: Leases
) -> None:
    claims = Claims(pg_store, leases, ttl_seconds=30)
    run, _ = pg_store.create_run(new_run())
    claimed = claims.acquire_run(run.id, "worker-a")
    assert isinstance(claimed, tuple)
    owner, _ = claimed
    leases.redis.flushdb()  # e.g. a Redis restart: a duplicate can SET NX again
    assert claims.acquire_run(run.id, "worker-b") is None  # Postgres refuses
    assert leases.holder(run.id) is None  # and the duplicate cleaned up after itself
    assert pg_store.get_run(run.id).status is RunStatus.RUNNING
    claims.release(owner)


def test_cancel_channel_delivers_run_ids(leases: Leases) -> None:
    got: list[str] = []
    arrived = threading.Event()

    def on_cancel(run_id: str) -> None:
        got.append(run_id)
        arrived.set()

    listener = CancelListener(leases.redis, on_cancel).start()
    try:
        assert leases.publish_cancel("run-42") >= 1
        assert arrived.wait(5)
        assert got == ["run-42"]
    finally:
        listener.stop()
