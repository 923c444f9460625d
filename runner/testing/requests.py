"""Keep a test from calling real models.

Inside :func:`block_model_requests`, a run (or any caller of
``runner.core.model.complete``) that calls a model other than a ``scripted/`` one
fails at once with :class:`runner.core.errors.ModelRequestsBlocked`, before a
request is sent: the run fails ``model_error``, its message one line naming
the model and how to opt in. :func:`allow_model_requests` opts back in for a
block of code, and the pytest marker ``runwright_allow_model_requests`` for a
whole test.

The setting is the process's, not the thread's or the task's: runs execute on
the runtime's own thread. Entering either context manager sets it, and
leaving restores what it was on entry, so they nest. Threads that enter and
leave them in crossing order restore each other's settings: keep them in the
test's thread. A worker subprocess is a process of its own, which a block in
the test's process does not reach.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from runner.core import model


@contextlib.contextmanager
def block_model_requests() -> Iterator[None]:
    """Refuse calls of real models (any not ``scripted/``) until the block ends."""
    previous = model.block_requests(True)
    try:
        yield
    finally:
        model.block_requests(previous)


@contextlib.contextmanager
def allow_model_requests() -> Iterator[None]:
    """Allow calls of real models until the block ends, even inside
    :func:`block_model_requests`."""
    previous = model.block_requests(False)
    try:
        yield
    finally:
        model.block_requests(previous)
