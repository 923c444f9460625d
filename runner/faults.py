"""``runner.faults``, a public path of the core's ``runner/core/faults.py``: the named fault points
that tests arm."""

from runner.core.faults import *  # noqa: F403
