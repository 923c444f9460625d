"""Where replays execute: a schema of its own in the journal's database
(``runwright_replay``), migrated like the real one on first use, with a real
:class:`~runner.core.engine.engine.Engine` on it that runs in the calling
process, with no Redis and no workers (the Postgres fence alone decides who
executes, as in the testing kit).

A replay's run is a real run there, with steps, effects and decisions
journaled as any run's, and sealed under the same keys; but no worker, no
``tick()`` and no console of the deployment reads that schema, and nothing
in it touches the real runs. It is a record to read back and to prune
(``runwright sandbox prune``).
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url

from runner.core.clock import SYSTEM
from runner.core.errors import InvalidInput
from store.models import utcnow
from store.status import RunStatus

if TYPE_CHECKING:
    from runner.core.agent import Registry
    from runner.core.engine.engine import Engine
    from runner.core.observe import Observer
    from runner.core.settings import Settings
    from store.models import Run
    from store.postgres import PostgresStore
    from store.sealing import Cipher

SCHEMA = "runwright_replay"
# How many executions one replay allows its run (a wait decided is one more).
MAX_EXECUTIONS = 50
# The longest a replay sleeps for a model step's retry wait.
MAX_RETRY_WAIT_SECONDS = 60.0
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# The sandboxes this process made ready: each is checked once.
_prepared: set[str] = set()
_prepared_lock = threading.Lock()


def sandbox_url(database_url: str, schema: str = SCHEMA) -> str:
    """``database_url`` with its connections' search path set to ``schema``."""
    if not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidInput(f"a sandbox schema is a lower-case identifier, not {schema!r}")
    url = make_url(database_url)
    options = url.query.get("options")
    extra = f"-csearch_path={schema}"
    if isinstance(options, str) and options:
        extra = f"{options} {extra}"
    return str(url.update_query_dict({"options": extra}).render_as_string(hide_password=False))


def store_url(store: PostgresStore) -> str:
    """The database URL ``store`` is on."""
    return str(store.db.engine.url.render_as_string(hide_password=False))


def prepare(database_url: str, schema: str = SCHEMA) -> str:
    """Create and migrate the sandbox schema of ``database_url`` if it is not
    at the code's revision (once a process); the sandbox's URL."""
    import sqlalchemy as sa

    from store.db import normalize_url
    from store.migrate import upgrade_if_behind

    url = sandbox_url(database_url, schema)
    with _prepared_lock:
        if url in _prepared:
            return url
    engine = sa.create_engine(normalize_url(database_url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
    finally:
        engine.dispose()
    upgrade_if_behind(url)
    with _prepared_lock:
        _prepared.add(url)
    return url


class Sandbox:
    """An engine on the sandbox schema, driven by the replay (see the module
    docstring). ``registry`` holds the agents as the replay defines them."""

    def __init__(
        self,
        database_url: str,
        registry: Registry,
        *,
        settings: Settings,
        cipher: Cipher | None = None,
        observers: Sequence[Observer] = (),
        schema: str = SCHEMA,
    ) -> None:
        from runner.core.engine.engine import Engine
        from store.postgres import PostgresStore

        self.url = prepare(database_url, schema)
        self._queue: deque[str] = deque()
        self.store = PostgresStore.from_url(self.url, pool_size=2, cipher=cipher)
        self.engine: Engine = Engine(
            self.store,
            leases=None,
            enqueue=self._queue.append,
            settings=settings,
            registry=registry,
            clock=SYSTEM,
            observers=observers,
        )

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_until_stopped(self, run_id: str) -> Run:
        """Execute the run here until it ends or waits for a person; the run
        as it is then. A wait to retry a model step is slept through (up to
        :data:`MAX_RETRY_WAIT_SECONDS` each)."""
        for _ in range(MAX_EXECUTIONS):
            run = self.engine.get_run(run_id)
            if run.status.ended or run.status is RunStatus.WAITING:
                return run
            if run.retry is not None and run.retry.at is not None:
                wait = (run.retry.at - utcnow()).total_seconds()
                time.sleep(min(max(wait, 0.0), MAX_RETRY_WAIT_SECONDS))
            self.engine.execute(run_id)
        return self.engine.get_run(run_id)
