"""Two threads race to claim, 200 rounds: exactly one winner each time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

from store.models import Claim, Fence, Outcome, RunStatus
from store.postgres import PostgresStore
from tests.helpers import new_run, try_claim

ROUNDS = 200


def _race(claimers: list[Callable[[], Claim | None]]) -> list[Claim | None]:
    barrier = threading.Barrier(len(claimers))
    results: list[Claim | None] = [None] * len(claimers)

    def go(i: int) -> None:
        barrier.wait()
        results[i] = claimers[i]()

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(claimers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_threads_claiming_one_run(pg_store: PostgresStore) -> None:
    for _ in range(ROUNDS):
        run, _ = pg_store.create_run(new_run())
        run_id = run.id
        results = _race([partial(try_claim, pg_store, run_id, owner, 30) for owner in ("a", "b")])
        winners = [r for r in results if r is not None]
        assert len(winners) == 1, results
        assert winners[0].epoch == 1
        assert pg_store.get_run(run.id).claim == winners[0]


def test_two_runs_sharing_a_key_one_runs_the_other_waits_fifo(pg_store: PostgresStore) -> None:
    for round_ in range(ROUNDS):
        key = f"k{round_}"
        older, _ = pg_store.create_run(new_run(key=key))
        newer, _ = pg_store.create_run(new_run(key=key))
        results = _race(
            [
                partial(try_claim, pg_store, newer.id, "b", 30),
                partial(try_claim, pg_store, older.id, "a", 30),
            ]
        )
        # Only the older run may hold the key; the newer one waits its turn.
        assert results[0] is None and results[1] is not None, results
        assert pg_store.get_run(newer.id).status is RunStatus.QUEUED
        settled = pg_store.end(Fence(older.id, "a", results[1].epoch), Outcome(RunStatus.COMPLETED))
        assert settled.next_in_key == newer.id
        assert try_claim(pg_store, newer.id, "b", 30) is not None
