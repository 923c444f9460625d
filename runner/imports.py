"""Objects named in settings (``RUNWRIGHT_ENQUEUE``, ...), imported by name."""

from __future__ import annotations

import importlib
from typing import Any

from runner.errors import InvalidInput


def import_string(path: str) -> Any:
    """``"package.module:attribute"`` (or dotted) to the object it names."""
    module, sep, attribute = path.partition(":")
    if not sep:
        module, _, attribute = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise InvalidInput(f"cannot import {path!r}: {exc}") from exc
