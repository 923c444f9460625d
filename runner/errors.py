"""``runner.errors``, a public path of the core's ``runner/core/errors.py``: the errors a caller
catches."""

from runner.core.errors import *  # noqa: F403
