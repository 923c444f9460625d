"""Runwright's own Celery app, with the ``runwright.execute`` and
``runwright.tick`` tasks and the worker signals (warm-up, drain) that
``runner.celery.install`` gives it.

Start workers with ``celery -A tasks worker`` and beat with ``celery -A tasks beat``.
"""

from runner.core.layout import require_own_modules

require_own_modules("runner", "store", "celeryconfig")

from tasks.app import app, engine, enqueue, execute, tick  # noqa: E402

__all__ = ["app", "engine", "enqueue", "execute", "tick"]
