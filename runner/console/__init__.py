"""The web console: runs, a run's timeline, and the approvals inbox (docs/console.md).

Server-rendered HTML with one small inlined script; no template engine and no
build step. :class:`~runner.console.views.Console` holds every rule and is
framework-neutral; ``runner.console.flask`` mounts it as a Flask blueprint.
The console is a client of the public engine API, never of the store.
"""

from __future__ import annotations

from runner.console.views import CSRF_FIELD, ROUTES, Console, Request, Response, Route

__all__ = ["CSRF_FIELD", "ROUTES", "Console", "Request", "Response", "Route"]
