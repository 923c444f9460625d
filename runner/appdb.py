"""``runner.appdb``, a public path of the core's ``runner/core/appdb.py``: the application's
database connections around its code (docs/django.md)."""

from runner.core.appdb import *  # noqa: F403
