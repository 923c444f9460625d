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
