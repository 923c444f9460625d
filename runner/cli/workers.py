"""``runwright workers``: the live workers and what each serves, from the
records their watchdogs keep in Redis (store/workers.py)."""

from __future__ import annotations

import time

import click

from runner.cli.as_json import Document, json_option, workers_json
from runner.cli.terminal import inert


@click.command("workers")
@json_option
def workers(as_json: bool) -> Document | None:
    """List the live workers: their agents, version, pool and concurrency."""
    from runner.core.coordination.leases import Leases
    from runner.core.settings import Settings, resolve

    settings = resolve(Settings.from_env())
    assert settings.redis_url is not None
    leases = Leases.from_url(settings.redis_url)
    try:
        live = sorted(leases.workers().values(), key=lambda w: w.name)
    finally:
        leases.redis.close()
    if as_json:
        return workers_json(live)
    if not live:
        click.echo("no live worker: start one with `celery -A tasks worker`")
        return None
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    now = time.time()
    table = Table("worker", "agents", "version", "pool", "concurrency", "queues", "up", "seen")
    for info in live:
        cells = (
            info.name,
            "(not said)" if info.agents is None else ", ".join(info.agents) or "none",
            info.version or "-",
            info.pool or "-",
            "-" if info.concurrency is None else str(info.concurrency),
            ", ".join(info.queues) or "-",
            "-" if info.started_at is None else _ago(now - info.started_at),
            _ago(now - info.seen_at) + " ago",
        )
        # Text, not str: a record is written by anything that reaches Redis.
        table.add_row(*(Text(inert(cell)) for cell in cells))
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=200)
    console.print(table)
    return None


def _ago(seconds: float) -> str:
    from runner.core.engine.watchdog import age_text

    return age_text(seconds)
