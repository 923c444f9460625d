"""The ``runwright`` command line.

Commands that do not run a model never import litellm, so they start fast.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from store.config import Settings
from store.errors import RunwrightError


def fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


class Group(click.Group):
    """Turns Runwright's errors into one clear line and a non-zero exit."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RunwrightError as exc:
            fail(exc.message)


@click.group(cls=Group)
@click.version_option(package_name="runwright")
def main() -> None:
    """Durable AI agents on Celery."""


@main.command()
def migrate() -> None:
    """Create or upgrade the database schema."""
    from store.migrate import upgrade

    settings = Settings.from_env().resolved()
    assert settings.database_url is not None
    upgrade(settings.database_url)
    click.echo("schema is up to date")


@main.group()
def local() -> None:
    """The local stack: embedded Postgres and Redis under ./.runwright/."""


@local.command("up")
def local_up() -> None:
    """Start the local stack (idempotent) and migrate its database."""
    from store.local import LocalStack

    urls = LocalStack(Settings.from_env().home).up()
    click.echo(f"postgres  {urls.database_url}")
    click.echo(f"redis     {urls.redis_url}")


@local.command("down")
def local_down() -> None:
    """Stop the local stack (its data stays)."""
    from store.local import LocalStack

    LocalStack(Settings.from_env().home).down()
    click.echo("local stack stopped")


@local.command("status")
def local_status() -> None:
    """Show whether the local stack is running."""
    from store.local import LocalStack

    for key, value in LocalStack(Settings.from_env().home).status().items():
        click.echo(f"{key:<13} {value}")


def _engine() -> Any:
    """The engine from the environment. Deciding approvals needs no model, so
    litellm is not imported."""
    from runner.engine import Engine

    return Engine.from_env()


def _decide(approval_id: str, approve: bool, token: str | None, reason: str | None) -> None:
    run = _engine().respond(approval_id, approve, reason, token=token)
    verb = "approved" if approve else "denied"
    after = "queued again" if run.status.value == "queued" else f"still {run.status.value}"
    click.echo(f"{verb} {approval_id}; run {run.id} is {after}")


@main.command()
@click.argument("approval_id")
@click.option("--token", required=True, help="The token from the notification.")
@click.option("--reason", default=None, help="Why (the model sees it).")
def approve(approval_id: str, token: str, reason: str | None) -> None:
    """Approve a pending tool call."""
    _decide(approval_id, True, token, reason)


@main.command()
@click.argument("approval_id")
@click.option("--token", required=True, help="The token from the notification.")
@click.option("--reason", default=None, help="Why (the model sees it).")
def deny(approval_id: str, token: str, reason: str | None) -> None:
    """Deny a pending tool call."""
    _decide(approval_id, False, token, reason)
