"""``runner.retry``, a public path of the core's ``runner/core/retry.py``: retry policies
(``RetryPolicy``)."""

from runner.core.retry import *  # noqa: F403
