"""``runner.settings``, a public path of the core's ``runner/core/settings.py``: the settings from
the environment (docs/operations.md)."""

from runner.core.settings import *  # noqa: F403
