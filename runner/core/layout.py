"""Runwright's top-level modules have generic names (``runner``, ``store``,
``tasks``, ``celeryconfig``). A project with its own ``store/`` package or
``tasks.py`` on the import path would silently replace one of them and fail
far away (``No module named 'store.lazy'``). This check fails at once, in one
line that names the file in the way. It imports nothing but the standard
library, so it runs before the module it checks is imported.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# Runwright's modules are installed side by side.
HOME = Path(__file__).resolve().parents[2]


def _origin(name: str) -> Path | None:
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None) if module is not None else None
    if origin is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        origin = spec.origin if spec is not None else None
    return Path(origin).resolve() if origin else None


def _ours(name: str, origin: Path) -> bool:
    return origin == HOME / f"{name}.py" or HOME / name in origin.parents


def require_own_modules(*names: str) -> None:
    """Exit with one line if one of ``names`` is not Runwright's own module."""
    for name in names:
        origin = _origin(name)
        if origin is None or _ours(name, origin):
            continue
        # A project's tasks.py that installs Runwright on its own app (the
        # Celery tutorial's layout) sends runs through that app instead.
        hint = (
            "; if it installs Runwright on your Celery app, set "
            "RUNWRIGHT_ENQUEUE=runner.celery:enqueue (docs/celery.md)"
            if name == "tasks"
            else ""
        )
        raise SystemExit(
            f"runwright: {origin} shadows Runwright's module {name!r}; rename your "
            f"{name!r} or take its folder off the import path (see README, 'Module names')" + hint
        )


def require_runwright_app(app: str, *, installed: bool) -> None:
    """Exit with one line if ``celery -A <app>`` loaded a ``tasks`` module that
    is not Runwright's and whose app did not install Runwright: in a folder with
    a ``tasks.py`` of its own, ``celery -A tasks worker`` would otherwise start
    that app in place of Runwright's, and say nothing (runner/celery_plugin.py)."""
    if installed or app.partition(":")[0].split(".")[0] != "tasks":
        return
    origin = _origin("tasks")
    if origin is None or _ours("tasks", origin):
        return
    raise SystemExit(
        f"runwright: `celery -A {app}` started {origin}, an app of your own that shadows "
        "Runwright's module 'tasks' and does not run Runwright; rename it to start "
        "Runwright's app here, or call runner.celery.install(app) in it (docs/celery.md)"
    )
