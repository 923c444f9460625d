"""The engine and its executions.

- ``engine.py``: :class:`Engine`, the public face (start, execute, inspect,
  cancel, decide, retry, fork, tick, drain), built on one ``Deps``.
- ``deps.py``: what the executions and ``tick()`` are handed in the engine's
  place, and the sends to workers.
- ``execution.py``: one execution of a run: the step loop (``runner/core/steps/``)
  over the journal port (``runner/core/journal.py``).
- ``pg_journal.py``: the journal port on Postgres: the claim, the lease and
  heartbeat, and the writes fenced by the execution's epoch.
- ``tick.py``: the periodic housekeeping Celery beat runs.
- ``watchdog.py``: a worker's beacon and the check that beat still runs.
- ``retry_fork.py``: a new attempt at a run that ended: the same run again
  (retry) or a new one from its history (fork). ``rerun.py`` is its
  deprecated old name.
"""
