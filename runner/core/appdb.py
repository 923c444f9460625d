"""The application's own database connections, around the application's code
that Runwright calls in threads of its own (docs/django.md).

A sync tool and a notifier run in the tool pool of the worker's runtime
(runner/core/runtime.py), and a schedule's concurrency key in ``tick()``:
no web request and no Celery task begins or ends there, so nothing closes
what the application's ORM opened in those threads. A connection that the
database dropped (a restart, ``pg_terminate_backend``, an idle timeout)
then stays in its thread, and every later call there fails on it. So each
such call is one unit of work, as Django asks of code outside a request:

- **Django**, once installed and set up (settings configured, apps ready):
  before and after the call, each connection of the thread that is not in a
  transaction is closed if it is obsolete or broken, by the rule of
  ``django.db.close_old_connections``: past ``CONN_MAX_AGE`` (0, the
  default: after every call), after an error that left it unusable, or with
  autocommit not restored; before the call, ``CONN_HEALTH_CHECKS`` makes the
  first query check the connection and open another if it is dead.
- **Flask-SQLAlchemy**, once registered (:func:`register_flask_sqlalchemy`):
  the call runs in an app context of the registered app, and ``db.session``
  is removed after it (its transaction rolled back if left open, its
  connection back in the pool).

Neither costs anything when it is not there: Django is looked for in
``sys.modules`` (never imported, never configured here) until it is found
set up, once; Flask-SQLAlchemy only if registered. An async tool runs on the
event loop, where Django refuses the ORM's sync calls; nothing is done for it.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from runner.core.errors import ConfigurationError

T = TypeVar("T")
log = logging.getLogger(__name__)

# django.db.connections, once Django is set up in this process.
_django_connections: Any = None
# The Flask app and its Flask-SQLAlchemy extension, once registered.
_flask: tuple[Any, Any] | None = None


def call(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` as one unit of work on the application's
    databases, in the calling thread. What ``fn`` returns or raises is the
    call's: closing a connection or removing a session never changes it."""
    flask = _flask
    if flask is None:
        return _around_django(fn, args, kwargs)
    app, db = flask
    context = app.app_context()
    context.push()
    try:
        return _around_django(fn, args, kwargs)
    finally:
        _quietly(db.session.remove, "removing the Flask-SQLAlchemy session")
        _quietly(context.pop, "ending the Flask app context")


def register_flask_sqlalchemy(app: Any, db: Any) -> None:
    """Run each of the application's calls that Runwright makes in a thread of
    its own (a sync tool, a notifier, a schedule's concurrency key) in an app
    context of ``app``, and remove ``db.session`` after it (docs/django.md).

    Call it once where the worker loads the app, after ``db.init_app(app)``:
    in a module of ``RUNWRIGHT_AGENTS``, or one they import."""
    global _flask
    extensions = getattr(app, "extensions", None)
    if not isinstance(extensions, dict) or extensions.get("sqlalchemy") is not db:
        raise ConfigurationError(
            "register_flask_sqlalchemy(app, db) takes a Flask app and the Flask-SQLAlchemy "
            "extension it was initialised with (db.init_app(app), or SQLAlchemy(app))"
        )
    if _flask is not None and (_flask[0] is not app or _flask[1] is not db):
        raise ConfigurationError(
            "register_flask_sqlalchemy: another Flask app is registered in this process already"
        )
    _flask = (app, db)


def _around_django(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    _close_old_django_connections()
    try:
        return fn(*args, **kwargs)
    finally:
        # Looked for again: the call may have been the one that set Django up.
        _close_old_django_connections()


def _close_old_django_connections() -> None:
    connections = _django_connections if _django_connections is not None else _django()
    if connections is None:
        return
    for conn in connections.all(initialized_only=True):
        # A connection in an atomic block holds a caller's transaction (a
        # test's that calls tick(), say), which closing it would end under
        # the caller. Runwright's own threads hold none between calls.
        if conn.in_atomic_block:
            continue
        _quietly(conn.close_if_unusable_or_obsolete, f"closing connection {conn.alias}")


def _django() -> Any:
    """``django.db.connections`` if Django is set up in this process, else
    None; found once, and never importing Django until it is."""
    global _django_connections
    registry = sys.modules.get("django.apps")
    if registry is None or not registry.apps.ready:
        return None
    _django_connections = importlib.import_module("django.db").connections
    return _django_connections


def _quietly(fn: Callable[[], object], doing: str) -> None:
    """After the call, what went wrong in closing is logged, never raised: the
    call's own outcome (an effect's, recorded in its journal) stands."""
    try:
        fn()
    except Exception as exc:
        log.warning("%s failed: %s: %s", doing, type(exc).__name__, exc)
