"""The warning an old name gives: a name the glossary retired (docs/concepts.md,
"Glossary") keeps working for a release, listed in CHANGELOG.md."""

from __future__ import annotations

import warnings


def retired(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated for ``new``. The default ``stacklevel``
    names the caller of the function that calls this one: the code to change."""
    warnings.warn(
        f"{old} is deprecated; use {new} (docs/concepts.md, Glossary)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
