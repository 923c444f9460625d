"""Runwright's version, written once in pyproject.toml and read from the
installed distribution's metadata. A foundation: the listeners (the trace
exporter) and the façade (``runner.version``, ``runner.__version__``) read it."""

from __future__ import annotations

import functools


@functools.cache
def version() -> str | None:
    """Runwright's installed version (None when run from a source tree).

    It is written once, in pyproject.toml, and read here from the installed
    distribution's metadata; ``runner.__version__`` is the same, or
    ``"0+unknown"`` from a source tree.
    """
    from importlib import metadata

    try:
        return metadata.version("runwright")
    except metadata.PackageNotFoundError:
        return None
