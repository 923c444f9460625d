"""Deprecated (``runner.engine.rerun``): ``runner.core.engine.retry_fork``
(docs/concepts.md, Glossary).

Importing this module warns; its names are ``retry_fork``'s. It goes in the
next release (CHANGELOG.md).
"""

from __future__ import annotations

from runner.core.deprecation import retired
from runner.core.engine.retry_fork import fork, retry

retired("the module runner.engine.rerun", "runner.core.engine.retry_fork", stacklevel=2)

__all__ = ["fork", "retry"]
