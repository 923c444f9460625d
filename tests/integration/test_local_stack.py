"""The local stack starts a real Postgres and Redis from pip packages, with no
services on the machine needed, and the store round-trips on it."""

from __future__ import annotations

from pathlib import Path

import redis

from runner.core.coordination.claims import Claims
from runner.core.coordination.leases import Leases
from store.db import make_engine
from store.local import LocalStack
from store.migrate import HEAD, REVISIONS, current_revision, downgrade
from store.models import Outcome, RunStatus
from store.postgres import PostgresStore
from tests.helpers import commit, msg, new_run


def test_local_stack_round_trip(tmp_path: Path) -> None:
    stack = LocalStack(tmp_path / ".runwright")
    try:
        urls = stack.up()
        assert stack.status()["postgres"] == "running"
        assert stack.status()["redis"] == "running"
        assert urls == stack.up()  # idempotent

        store = PostgresStore.from_url(urls.database_url)
        client = redis.Redis.from_url(urls.redis_url)
        claims = Claims(store, Leases(client), ttl_seconds=15)
        run, _ = store.create_run(new_run())
        claimed = claims.acquire_run(run.id, "local-worker")
        assert isinstance(claimed, tuple)
        fence, _ = claimed
        store.commit_step(
            fence, commit(1, 0, [msg(0), msg(1)], outcome=Outcome(RunStatus.COMPLETED, "ok"))
        )
        claims.release(fence)
        assert store.get_run(run.id).status is RunStatus.COMPLETED
        cp = store.checkpoint(run.id)
        assert cp is not None and cp.messages == [msg(0), msg(1)]
        client.close()
        store.close()

        secret = stack.secret_key()
        assert secret.startswith("local:") and stack.secret_key() == secret

        # A stack made by an older version gets later migrations on its next up.
        downgrade(urls.database_url, REVISIONS[-2])
        # Not prepared: the hot statements name columns an older schema lacks.
        engine = make_engine(urls.database_url, pool_size=1, prepared=False)
        try:
            assert current_revision(engine) == REVISIONS[-2]
            stack.up()
            assert current_revision(engine) == HEAD
        finally:
            engine.dispose()
    finally:
        stack.down()
    status = stack.status()
    assert status["postgres"] == "stopped" and status["redis"] == "stopped"
