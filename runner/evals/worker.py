"""An evaluation's worker process: ``python -m runner.evals.worker EVALUATION``.

The runner (runner/evals/evaluation.py) starts it with the database, the
keys and the agent modules in its environment, as any Runwright process
reads them (``RUNWRIGHT_DATABASE_URL``, ``RUNWRIGHT_ENCRYPTION_KEYS``,
``RUNWRIGHT_AGENTS``); it claims the evaluation's cases until none is left
and exits 0. Killed, it exits otherwise, and the runner releases its claims
and starts another.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    from runner.core.agent import registry
    from runner.core.engine.engine import Engine
    from runner.core.settings import Settings, open_store
    from runner.evals.evaluation import work, worker_name

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m runner.evals.worker EVALUATION", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    registry.load(settings.agents)
    engine = Engine(open_store(settings), settings=settings)
    try:
        work(engine, args[0], worker_name(os.getpid()))
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
