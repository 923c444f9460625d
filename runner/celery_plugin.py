"""Runwright's plugin to the ``celery`` command, registered in the
``celery.commands`` entry-point group (pyproject.toml).

Celery's command line loads its plugins as it starts, before it loads the app
that ``-A`` names. In a folder with a ``tasks.py`` of its own, ``celery -A tasks
worker`` would start that app in place of Runwright's, and Runwright's code
would never run to say so. Loading this module connects a check to the signal
a worker's or beat's loader sends first of all, with the app loaded:
``runner.core.layout.require_runwright_app`` stops the process in one line unless
the app is Runwright's or installed Runwright (``runner.celery.install``).
The plugin's command, ``celery -A <app> runwright``, says which it is.
"""

from __future__ import annotations

import sys
from typing import Any

import click
from celery import signals

from runner.core.layout import require_runwright_app
from runner.core.settings import Settings


def _installed(app: Any) -> bool:
    # An app that installed Runwright imported runner.celery to do it; this
    # module does not import it (the engine) into every celery command.
    module = sys.modules.get("runner.celery")
    return module is not None and bool(module.installed(app))


def _check_app(sender: Any = None, **_: Any) -> None:
    context = click.get_current_context(silent=True)
    named = context.find_root().params.get("app") if context is not None else None
    if isinstance(named, str):
        require_runwright_app(named, installed=_installed(sender))


signals.import_modules.connect(_check_app, weak=False, dispatch_uid="runwright.check_app")


@click.command("runwright", hidden=True)
@click.pass_context
def command(context: click.Context) -> None:
    """Say whether the app (-A) runs Runwright's tasks."""
    app = context.obj.app
    if not _installed(app):
        raise click.ClickException(
            f"{app.main}: Runwright is not installed on this app; call "
            "runner.celery.install(app) where it is created (docs/celery.md)"
        )
    queue = Settings.from_env().queue
    click.echo(f"{app.main}: Runwright is installed; its tasks go to the queue {queue!r}")
