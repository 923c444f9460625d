"""A process that executes one run, for tests that kill or stall it.

    python -m tests.proc RUN_ID

Configured by the environment: RUNWRIGHT_DATABASE_URL, RUNWRIGHT_REDIS_URL,
RUNWRIGHT_LEASE_TTL_SECONDS, and RUNWRIGHT_TEST_FAULTS to arm fault points
(see ``runner.core.faults``).
"""

from __future__ import annotations

import logging
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import tests.agents  # (registers the agents)
import tests.agents_children  # noqa: F401  (and those that delegate)
from runner import Engine
from runner.core import faults
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from store.postgres import PostgresStore


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    faults.arm_from_spec(os.environ.get("RUNWRIGHT_TEST_FAULTS", ""))
    settings = Settings.from_env()
    assert settings.database_url and settings.redis_url
    engine = Engine(
        PostgresStore.from_url(settings.database_url),
        leases=Leases.from_url(settings.redis_url),
        settings=settings,
    )
    run = engine.execute(sys.argv[1])
    print(f"RESULT {run.status.value if run else 'none'}", flush=True)


if __name__ == "__main__":
    main()
