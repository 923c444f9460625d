"""Celery glue: the app, the ``runwright.execute`` and ``runwright.tick`` tasks,
and the worker signals (warm-up, drain).

Start workers with ``celery -A tasks worker`` and beat with ``celery -A tasks beat``.
"""

from tasks.app import app, engine, enqueue, execute, tick

__all__ = ["app", "engine", "enqueue", "execute", "tick"]
