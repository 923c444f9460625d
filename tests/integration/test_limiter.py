"""The limiter on real Redis: what it lets through, what finishing and
releasing give back, what a provider's word changes for every process, and
the order in which contended waiters are admitted.

Most tests drive the limiter's clock (``now=``), so that a minute passes in no
time; the test of two processes runs on the Redis server's clock with a short
window."""

from __future__ import annotations

import multiprocessing
import random
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from runner.core.coordination.leases import connect
from runner.core.limits import (
    CallTooLarge,
    Denial,
    Grant,
    Limiter,
    ModelLimit,
    Reason,
    Turn,
    Waiter,
)

T0 = 1_800_000_000.0  # a time the tests drive, far from the server's
KEY = "openai/gpt-4o-mini"


@pytest.fixture
def prefix() -> str:
    return f"runwright-test:{uuid.uuid4().hex[:8]}:"


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    made = connect(redis_url)
    yield made
    made.close()


@pytest.fixture
def limiter(client: redis.Redis, prefix: str) -> Limiter:
    return Limiter(client, prefix=prefix)


def granted(result: Grant | Denial) -> Grant:
    assert isinstance(result, Grant), result
    return result


def denied(result: Grant | Denial) -> Denial:
    assert isinstance(result, Denial), result
    return result


# ------------------------------------------------------------ requests and tokens


def test_requests_per_minute_hold_in_every_window(limiter: Limiter) -> None:
    limit = ModelLimit(rpm=3)
    for i in range(3):
        granted(limiter.acquire(KEY, limit, 0, f"h{i}", now=T0 + i))
    denial = denied(limiter.acquire(KEY, limit, 0, "h3", now=T0 + 10))
    assert denial.reason is Reason.REQUESTS
    assert denial.retry_after == pytest.approx(50)  # when the first leaves the window
    # The window slides: one leaves, one more goes, not three.
    granted(limiter.acquire(KEY, limit, 0, "h3", now=T0 + 60.001))
    assert isinstance(limiter.acquire(KEY, limit, 0, "h4", now=T0 + 60.002), Denial)
    assert limiter.state(KEY, now=T0 + 60.002)["requests_in_window"] == 3


def test_tokens_are_reserved_and_finish_gives_back_or_takes_more(limiter: Limiter) -> None:
    limit = ModelLimit(tpm=100)
    first = granted(limiter.acquire(KEY, limit, 60, "a", now=T0))
    denial = denied(limiter.acquire(KEY, limit, 50, "b", now=T0 + 1))
    assert (denial.reason, denial.retry_after) == (Reason.TOKENS, pytest.approx(59))
    # It used 30 of the 60 reserved: 30 come back, and the 50 fit.
    assert limiter.finish(first, 30, now=T0 + 2)
    second = granted(limiter.acquire(KEY, limit, 50, "b", now=T0 + 3))
    assert limiter.state(KEY, now=T0 + 3)["tokens_in_window"] == 80
    # It used 60 of its 50: the window is in debt, and even 0 tokens wait.
    assert limiter.finish(second, 60, now=T0 + 4)
    assert limiter.state(KEY, now=T0 + 4)["tokens_in_window"] == 90
    assert denied(limiter.acquire(KEY, limit, 20, "c", now=T0 + 5)).reason is Reason.TOKENS
    granted(limiter.acquire(KEY, limit, 10, "c", now=T0 + 5))
    assert denied(limiter.acquire(KEY, limit, 1, "d", now=T0 + 6)).reason is Reason.TOKENS


def test_finishing_twice_changes_nothing(limiter: Limiter) -> None:
    limit = ModelLimit(tpm=100, max_concurrent=2)
    grant = granted(limiter.acquire(KEY, limit, 50, "a", now=T0))
    assert limiter.finish(grant, 10, now=T0 + 1)
    other = granted(limiter.acquire(KEY, limit, 10, "b", now=T0 + 1))
    before = limiter.state(KEY, now=T0 + 2)
    assert not limiter.finish(grant, 0, now=T0 + 2)
    assert not limiter.release(grant, now=T0 + 2)
    assert limiter.state(KEY, now=T0 + 2) == before
    assert before["tokens_in_window"] == 20
    assert before["holders"] == [other.holder]


def test_release_gives_back_the_request_the_tokens_and_the_slot(limiter: Limiter) -> None:
    limit = ModelLimit(rpm=1, tpm=100, max_concurrent=1)
    grant = granted(limiter.acquire(KEY, limit, 100, "a", now=T0))
    assert denied(limiter.acquire(KEY, limit, 1, "b", now=T0)).reason in set(Reason)
    assert limiter.release(grant, now=T0 + 1)
    state = limiter.state(KEY, now=T0 + 1)
    assert (state["requests_in_window"], state["tokens_in_window"]) == (0, 0)
    assert state["holders"] == []
    granted(limiter.acquire(KEY, limit, 100, "b", now=T0 + 1))


def test_a_call_larger_than_a_minute_of_tokens_raises(limiter: Limiter) -> None:
    with pytest.raises(CallTooLarge, match="could never go"):
        limiter.acquire(KEY, ModelLimit(tpm=1000), 1001, "a", now=T0)
    # Nothing was taken.
    assert limiter.state(KEY, now=T0)["tokens_in_window"] == 0


def test_a_denial_takes_nothing_and_names_the_most_constraining_part(limiter: Limiter) -> None:
    limit = ModelLimit(rpm=10, tpm=100)
    granted(limiter.acquire(KEY, limit, 100, "a", now=T0))
    for i in range(8):
        granted(limiter.acquire(KEY, limit, 0, f"b{i}", now=T0 + 30))
    # Requests allow one more; tokens do not for 30 s, so nothing is taken.
    denial = denied(limiter.acquire(KEY, limit, 10, "c", now=T0 + 30))
    assert (denial.reason, denial.retry_after) == (Reason.TOKENS, pytest.approx(30))
    assert limiter.state(KEY, now=T0 + 30)["requests_in_window"] == 9


# ---------------------------------------------------------------- concurrency


def test_concurrent_calls_are_limited_and_a_dead_holder_frees_its_slot(limiter: Limiter) -> None:
    limit = ModelLimit(max_concurrent=2)
    granted(limiter.acquire(KEY, limit, 0, "a", hold_seconds=10, now=T0))
    b = granted(limiter.acquire(KEY, limit, 0, "b", hold_seconds=100, now=T0))
    denial = denied(limiter.acquire(KEY, limit, 0, "c", now=T0 + 1))
    assert (denial.reason, denial.retry_after) == (Reason.CONCURRENCY, pytest.approx(9))
    # "a" never finishes (its process died): its slot frees at its hold time.
    granted(limiter.acquire(KEY, limit, 0, "c", now=T0 + 10.001))
    assert sorted(limiter.state(KEY, now=T0 + 11)["holders"]) == ["b", "c"]
    limiter.finish(b, 0, now=T0 + 12)
    granted(limiter.acquire(KEY, limit, 0, "d", now=T0 + 12))


def test_a_holder_that_acquires_again_keeps_one_slot(limiter: Limiter) -> None:
    limit = ModelLimit(max_concurrent=1)
    old = granted(limiter.acquire(KEY, limit, 0, "run-1", now=T0))
    new = granted(limiter.acquire(KEY, limit, 0, "run-1", now=T0 + 1))  # after a crash
    # The stale grant's finish does not free the slot its successor holds.
    limiter.finish(old, 0, now=T0 + 2)
    assert denied(limiter.acquire(KEY, limit, 0, "run-2", now=T0 + 2)).reason is (
        Reason.CONCURRENCY
    )
    limiter.finish(new, 0, now=T0 + 3)
    granted(limiter.acquire(KEY, limit, 0, "run-2", now=T0 + 3))


def test_a_slot_frees_on_the_server_clock(client: redis.Redis, prefix: str) -> None:
    limiter = Limiter(client, prefix=prefix)
    limit = ModelLimit(max_concurrent=1)
    granted(limiter.acquire(KEY, limit, 0, "a", hold_seconds=0.2))
    denial = denied(limiter.acquire(KEY, limit, 0, "b"))
    assert 0 < denial.retry_after <= 0.2
    time.sleep(denial.retry_after + 0.05)
    granted(limiter.acquire(KEY, limit, 0, "b"))


# ------------------------------------------------------- what the provider says


def test_a_429_seen_by_one_process_lowers_the_limit_of_another_and_it_rises_back(
    redis_url: str, prefix: str
) -> None:
    one, other = connect(redis_url), connect(redis_url)
    try:
        seer, caller = Limiter(one, prefix=prefix), Limiter(other, prefix=prefix)
        limit = ModelLimit(rpm=10)
        granted(caller.acquire(KEY, limit, 0, "x", now=T0))
        seer.learn(KEY, retry_after=2, now=T0 + 1)
        denial = denied(caller.acquire(KEY, limit, 0, "a", now=T0 + 2))
        assert (denial.reason, denial.retry_after) == (Reason.BLOCKED, pytest.approx(1))
        # After the pause, half the limit: 5 in the window, one taken already.
        went = [caller.acquire(KEY, limit, 0, f"b{i}", now=T0 + 3) for i in range(6)]
        assert [isinstance(result, Grant) for result in went] == [True] * 4 + [False] * 2
        assert caller.state(KEY, now=T0 + 3)["factor"] == 0.5  # it rises from the end of the pause
        assert caller.state(KEY, now=T0 + 9)["factor"] == pytest.approx(0.6)
        # A minute after the pause, all of it again.
        state = caller.state(KEY, now=T0 + 3 + 60)
        assert (state["factor"], state["rpm_in_force"]) == (1.0, 10)
        went = [caller.acquire(KEY, limit, 0, f"c{i}", now=T0 + 63.5) for i in range(11)]
        assert sum(isinstance(result, Grant) for result in went) == 10
    finally:
        one.close()
        other.close()


def test_a_burst_of_429s_halves_once_and_never_below_a_tenth(limiter: Limiter) -> None:
    limit = ModelLimit(rpm=100)
    granted(limiter.acquire(KEY, limit, 0, "x", now=T0))
    for _ in range(5):  # five workers see the same burst
        limiter.learn(KEY, retry_after=0, now=T0 + 1)
    assert limiter.state(KEY, now=T0 + 1)["factor"] == 0.5
    for second in range(2, 12):
        limiter.learn(KEY, retry_after=0, now=T0 + second)
    assert limiter.state(KEY, now=T0 + 11)["factor"] == pytest.approx(0.1)


def test_the_providers_headers_lower_what_goes(limiter: Limiter) -> None:
    limit = ModelLimit(rpm=10, tpm=1000)
    granted(limiter.acquire(KEY, limit, 100, "x", now=T0))
    # Someone else uses the deployment too: 2 requests and 300 tokens remain.
    limiter.learn(KEY, remaining_requests=2, remaining_tokens=300, now=T0 + 1)
    state = limiter.state(KEY, now=T0 + 1)
    assert (state["requests_in_window"], state["tokens_in_window"]) == (8, 700)
    assert denied(limiter.acquire(KEY, limit, 301, "a", now=T0 + 1)).reason is Reason.TOKENS
    granted(limiter.acquire(KEY, limit, 300, "a", now=T0 + 1))
    # The provider's own limit is lower than the declared one: its share follows.
    limiter.learn(KEY, limit_requests=5, now=T0 + 2)
    assert limiter.state(KEY, now=T0 + 2)["rpm_in_force"] == 5


# ------------------------------------------------------------ two processes


WINDOW = 0.4
HAMMERED = ModelLimit(rpm=8, tpm=240)


def _hammer(
    url: str, prefix: str, count: int, seed: int, out: multiprocessing.Queue[object]
) -> None:
    """Take ``count`` grants as fast as the limit allows; report their times and tokens."""
    client = connect(url)
    limiter = Limiter(client, prefix=prefix, window_seconds=WINDOW)
    rng = random.Random(seed)
    taken: list[tuple[float, int]] = []
    try:
        while len(taken) < count:
            tokens = rng.randint(10, 60)
            result = limiter.acquire(KEY, HAMMERED, tokens, f"p{seed}-{len(taken)}")
            if isinstance(result, Denial):
                time.sleep(min(result.retry_after, 0.02))
                continue
            used = rng.randint(0, tokens)
            limiter.finish(result, used)
            taken.append((result.at, used))
        out.put(taken)
    finally:
        client.close()


def test_two_processes_never_exceed_the_limits_together(redis_url: str, prefix: str) -> None:
    context = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[object] = context.Queue()
    workers = [
        context.Process(target=_hammer, args=(redis_url, prefix, 12, seed, out)) for seed in (1, 2)
    ]
    for worker in workers:
        worker.start()
    try:
        results = [out.get(timeout=60) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=10)
    assert [worker.exitcode for worker in workers] == [0, 0]
    grants = sorted(item for result in results for item in result)  # type: ignore[attr-defined]
    assert len(grants) == 24  # three windows' worth of requests, at least
    assert HAMMERED.rpm is not None and HAMMERED.tpm is not None
    window = round(WINDOW * 1_000_000)  # in the server's microseconds, as the script counts
    micros = [(round(at * 1_000_000), used) for at, used in grants]
    for end, _ in micros:
        inside = [used for at, used in micros if end - window < at <= end]
        assert len(inside) <= HAMMERED.rpm
        assert sum(inside) <= HAMMERED.tpm


# ------------------------------------------------------------ fair admission


def _fill(limiter: Limiter, limit: ModelLimit, waiters: list[Waiter], now: float) -> None:
    """Enroll ``waiters`` in order while a blocker holds the only slot."""
    for waiter in waiters:
        denied(limiter.acquire(KEY, limit, 0, waiter.id, waiter=waiter, now=now))


def _admit_all(limiter: Limiter, limit: ModelLimit, now: float) -> list[Turn]:
    """Wake whoever's turn it is, one at a time, as the engine would."""
    order: list[Turn] = []
    while turns := limiter.next_waiters(KEY, now=now):
        turn = turns[0]
        grant = granted(
            limiter.acquire(
                KEY, limit, 0, turn.waiter, waiter=Waiter(turn.waiter, turn.tenant), now=now
            )
        )
        order.append(turn)
        assert grant.next == (limiter.next_waiters(KEY, now=now) or [None])[0]
        limiter.release(grant, now=now)
    return order


def test_a_tenant_with_five_waiters_is_not_stuck_behind_one_with_a_hundred(
    limiter: Limiter,
) -> None:
    limit = ModelLimit(max_concurrent=1)
    blocker = granted(limiter.acquire(KEY, limit, 0, "blocker", now=T0))
    _fill(limiter, limit, [Waiter(f"a{i}", "A") for i in range(100)], T0 + 1)
    _fill(limiter, limit, [Waiter(f"b{i}", "B") for i in range(5)], T0 + 2)
    assert limiter.state(KEY, now=T0 + 2)["waiters"] == {"A": 100, "B": 5}
    limiter.release(blocker, now=T0 + 3)
    order = _admit_all(limiter, limit, T0 + 3)
    assert [turn.waiter for turn in order[:10]] == [w for i in range(5) for w in (f"a{i}", f"b{i}")]
    assert [turn.waiter for turn in order[10:]] == [f"a{i}" for i in range(5, 100)]


def test_only_the_waiter_whose_turn_it_is_goes(limiter: Limiter) -> None:
    limit = ModelLimit(max_concurrent=1)
    blocker = granted(limiter.acquire(KEY, limit, 0, "blocker", now=T0))
    _fill(limiter, limit, [Waiter("a1", "A"), Waiter("b1", "B")], T0)
    limiter.release(blocker, now=T0 + 1)
    # Capacity is free, but it is a1's turn: b1 and a newcomer wait.
    denial = denied(limiter.acquire(KEY, limit, 0, "b1", waiter=Waiter("b1", "B"), now=T0 + 1))
    assert (denial.reason, denial.retry_after) == (Reason.TURN, pytest.approx(0.05))
    assert denied(limiter.acquire(KEY, limit, 0, "c", now=T0 + 1)).reason is Reason.TURN
    grant = granted(limiter.acquire(KEY, limit, 0, "a1", waiter=Waiter("a1", "A"), now=T0 + 1))
    assert grant.next == Turn("b1", "B")


def test_priority_orders_waiters_within_a_tenant(limiter: Limiter) -> None:
    limit = ModelLimit(max_concurrent=1)
    blocker = granted(limiter.acquire(KEY, limit, 0, "blocker", now=T0))
    _fill(
        limiter,
        limit,
        [
            Waiter("low", "A", 0),
            Waiter("high", "A", 9),
            Waiter("mid", "A", 5),
            Waiter("mid2", "A", 5),
        ],
        T0,
    )
    limiter.release(blocker, now=T0)
    assert [t.waiter for t in _admit_all(limiter, limit, T0)] == ["high", "mid", "mid2", "low"]


def test_a_tenant_of_weight_two_gets_two_turns_a_round(limiter: Limiter) -> None:
    limit = ModelLimit(max_concurrent=1)
    blocker = granted(limiter.acquire(KEY, limit, 0, "blocker", now=T0))
    _fill(limiter, limit, [Waiter(f"a{i}", "A", weight=2) for i in range(4)], T0)
    _fill(limiter, limit, [Waiter(f"b{i}", "B") for i in range(4)], T0)
    assert [t.waiter for t in limiter.next_waiters(KEY, 5, now=T0)] == [
        "a0",
        "a1",
        "b0",
        "a2",
        "a3",
    ]
    limiter.release(blocker, now=T0)
    order = [t.waiter for t in _admit_all(limiter, limit, T0)]
    assert order == ["a0", "a1", "b0", "a2", "a3", "b1", "b2", "b3"]


def test_a_waiter_that_does_not_come_back_loses_its_place(limiter: Limiter) -> None:
    limiter = Limiter(limiter.redis, prefix=limiter.prefix, grace_seconds=5)
    limit = ModelLimit(max_concurrent=1)
    blocker = granted(limiter.acquire(KEY, limit, 0, "blocker", hold_seconds=10, now=T0))
    # Told to come back in 10 s (when the slot frees at the latest): kept until 15.
    _fill(limiter, limit, [Waiter("dead", "A"), Waiter("alive", "B")], T0)
    limiter.release(blocker, now=T0 + 1)
    assert limiter.next_waiters(KEY, 2, now=T0 + 1) == [Turn("dead", "A"), Turn("alive", "B")]
    # "alive" comes back and refreshes its place; "dead" never does.
    denied(limiter.acquire(KEY, limit, 0, "alive", waiter=Waiter("alive", "B"), now=T0 + 12))
    assert limiter.next_waiters(KEY, 2, now=T0 + 15.001) == [Turn("alive", "B")]
    granted(limiter.acquire(KEY, limit, 0, "alive", waiter=Waiter("alive", "B"), now=T0 + 16))


def test_a_withdrawn_waiter_gives_its_turn_at_once(limiter: Limiter) -> None:
    limit = ModelLimit(max_concurrent=1)
    blocker = granted(limiter.acquire(KEY, limit, 0, "blocker", now=T0))
    _fill(limiter, limit, [Waiter("cancelled", "A"), Waiter("next", "B")], T0)
    assert limiter.withdraw(KEY, "cancelled")
    assert not limiter.withdraw(KEY, "cancelled")
    limiter.release(blocker, now=T0)
    granted(limiter.acquire(KEY, limit, 0, "next", waiter=Waiter("next", "B"), now=T0))
    assert limiter.state(KEY, now=T0)["waiters"] == {}


def test_keys_are_apart_and_under_the_prefix(limiter: Limiter, client: redis.Redis) -> None:
    limit = ModelLimit(rpm=1)
    granted(limiter.acquire("m1", limit, 0, "a", now=T0))
    granted(limiter.acquire("m2", limit, 0, "a", now=T0))
    keys = {k.decode() for k in client.scan_iter(match="*")} - {"runwright-tests:owned"}
    assert keys and all(k.startswith(limiter.prefix) for k in keys)
    assert all(0 < client.pttl(k) <= 3600 * 1000 for k in keys)
