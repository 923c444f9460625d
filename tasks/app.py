"""Runwright's own Celery app: the preset in ``celeryconfig.py`` and
Runwright installed on it (runner/celery.py)."""

from __future__ import annotations

from celery import Celery

from runner.celery import engine, enqueue, install

app = Celery("runwright")
app.config_from_object("celeryconfig")
execute, tick = install(app)

__all__ = ["app", "engine", "enqueue", "execute", "tick"]
