"""The engine and its executions.

- ``engine.py``: :class:`Engine`, the public face (start, execute, inspect,
  cancel, decide, retry, fork, tick, drain), built on one ``Deps``.
- ``deps.py``: what the executions and ``tick()`` are handed in the engine's
  place, and the sends to workers.
- ``execution.py``: one execution of a run: claim, heartbeat, the step loop
  (``runner/steps/``), settle.
- ``runtime.py``: the per-process loop and thread pools that hold the
  executions, and the drain.
- ``tick.py``: the periodic housekeeping Celery beat runs.
- ``watchdog.py``: a worker's beacon and the check that beat still runs.
- ``rerun.py``: starting a settled run again (retry) or a new one from its
  history (fork).
"""
