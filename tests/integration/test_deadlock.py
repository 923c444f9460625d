"""Cancel and decide on the same waiting runs, all at once, on real Postgres:
every path locks the run row before its approvals, so none deadlocks."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from runner import Engine
from runner.core.errors import ApprovalError
from runner.core.settings import Settings
from store.db import make_engine
from store.models import Decision, Fence, RunStatus
from store.postgres import PostgresStore
from tests.helpers import approval, commit, msg, new_run, try_claim

RUNS = 60
APPROVALS = 3  # per run: three responders and one canceller race on each run


@pytest.fixture
def wide_store(database_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(make_engine(database_url, pool_size=24))
    yield store
    store.close()


def _waiting_run(store: PostgresStore) -> tuple[str, list[str]]:
    run, _ = store.create_run(new_run())
    claim = try_claim(store, run.id, "w", 30)
    assert claim is not None
    approvals = [approval(f"c{i}") for i in range(APPROVALS)]
    store.commit_step(
        Fence(run.id, "w", claim.epoch),
        commit(1, 0, [msg(0), {"role": "assistant", "content": "?"}], approvals=approvals),
    )
    return run.id, [a.approval_id for a in approvals]


def test_concurrent_cancel_and_respond_never_deadlock(wide_store: PostgresStore) -> None:
    engine = Engine(
        wide_store, settings=Settings(secret_key="test:test-secret-for-runwright-tests-only")
    )
    runs = dict(_waiting_run(wide_store) for _ in range(RUNS))
    outcomes: dict[str, Any] = {}  # approval id (or run id for cancel) -> result or error

    def attempt(key: str, fn: Callable[[], Any], gate: threading.Barrier) -> None:
        gate.wait(timeout=30)
        try:
            outcomes[key] = fn()
        except Exception as exc:
            outcomes[key] = exc

    with ThreadPoolExecutor(max_workers=(APPROVALS + 1) * 6) as pool:
        futures = []
        for run_id, approval_ids in runs.items():
            gate = threading.Barrier(APPROVALS + 1)
            calls: list[tuple[str, Callable[[], Any]]] = [
                (run_id, lambda r=run_id: engine.cancel(r))  # type: ignore[misc]
            ]
            for n, approval_id in enumerate(approval_ids):
                calls.append(
                    (
                        approval_id,
                        lambda a=approval_id, ok=n % 2 == 0: engine.decide(  # type: ignore[misc]
                            a, ok, trusted=True
                        ),
                    )
                )
            futures += [pool.submit(attempt, key, fn, gate) for key, fn in calls]
        for future in futures:
            future.result()

    unexpected = [
        f"{type(v).__name__}: {v}"
        for v in outcomes.values()
        if isinstance(v, Exception) and not isinstance(v, ApprovalError)
    ]
    assert unexpected == []  # no deadlock, no other failure
    for run_id, approval_ids in runs.items():
        cancel = outcomes[run_id]
        assert cancel.action == "cancelled"  # waiting or queued, it settles at once
        run = engine.get_run(run_id)
        assert run.status is RunStatus.CANCELLED and run.waiting is None
        decided = 0
        for approval_id in approval_ids:
            stored = wide_store.get_approval(approval_id)
            if isinstance(outcomes[approval_id], ApprovalError):
                # Cancelled first: the approval was withdrawn, never decided.
                assert stored.decision is Decision.WITHDRAWN
            else:
                assert stored.decision in (Decision.APPROVED, Decision.DENIED)
                decided += 1
        # Each recorded decision appended exactly one response to the checkpoint.
        checkpoint = engine.checkpoint(run_id)
        assert checkpoint is not None and len(checkpoint.messages) == 2 + decided
