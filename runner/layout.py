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
HOME = Path(__file__).resolve().parent.parent


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


def require_own_modules(*names: str) -> None:
    """Exit with one line if one of ``names`` is not Runwright's own module."""
    for name in names:
        origin = _origin(name)
        if origin is None:
            continue
        ours = (HOME / name, HOME / f"{name}.py")
        if origin == ours[1] or ours[0] in origin.parents:
            continue
        raise SystemExit(
            f"runwright: {origin} shadows Runwright's module {name!r}; rename your "
            f"{name!r} or take its folder off the import path (see README, 'Module names')"
        )
