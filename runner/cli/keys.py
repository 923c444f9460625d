"""``runwright keys``: the keys of encryption at rest (docs/security.md,
"Encryption at rest"). ``status`` counts the payload values each key seals
and those in clear; ``rotate`` seals every value under the first key of
``RUNWRIGHT_ENCRYPTION_KEYS``, a batch at a time, while workers run. After
a rotation that ends with nothing left under an older key, that key can be
removed from the ring."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from runner.cli.as_json import dumps
from runner.cli.audit import cli_source, login_name
from runner.cli.terminal import Group, fail, inert, say

if TYPE_CHECKING:
    from store.pg.keys import KeyCount
    from store.postgres import PostgresStore

# Passes over the tables before a rotation gives up on rows that workers kept
# locked (each pass takes what it can; a locked row waits for the next).
PASSES = 5
PASS_PAUSE_SECONDS = 1.0


def _store() -> PostgresStore:
    from runner.core.settings import Settings, open_store, resolve

    return open_store(resolve(Settings.from_env()))


def _not_current(counts: Sequence[KeyCount], current: str | None) -> int:
    return sum(c.values for c in counts if c.key != current or current is None)


@click.group("keys", cls=Group)
def keys() -> None:
    """The keys of encryption at rest (RUNWRIGHT_ENCRYPTION_KEYS)."""


@keys.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per table, column and key.")
def status(as_json: bool) -> None:
    """How many payload values each key seals, and how many are in clear, by
    table and column. An older key that seals nothing can be removed."""
    store = _store()
    try:
        counts = store.key_counts()
        cipher = store.sealing.cipher
    finally:
        store.close()
    if as_json:
        for c in counts:
            click.echo(
                dumps({"table": c.table, "column": c.column, "key": c.key, "values": c.values})
            )
        return
    ring = () if cipher is None else tuple(getattr(cipher, "order", (cipher.current,)))
    by_key: dict[str | None, int] = {}
    for c in counts:
        by_key[c.key] = by_key.get(c.key, 0) + c.values
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table("table", "column", "key", "values")
    for c in counts:
        key = "(clear)" if c.key is None else c.key
        table.add_row(*(Text(inert(str(cell))) for cell in (c.table, c.column, key, c.values)))
    Console(highlight=False).print(table)
    if cipher is None:
        say("RUNWRIGHT_ENCRYPTION_KEYS is not set: new values are written in clear")
    else:
        say(f"the ring holds {', '.join(ring)}; {ring[0]} seals new values")
    for found, values in sorted(
        by_key.items(), key=lambda item: (item[0] is not None, item[0] or "")
    ):
        name = "in clear" if found is None else f"under key {found}"
        note = "" if found is None or found in ring else " (not in the ring: they do not open)"
        say(f"{values} value(s) {name}{note}")


@keys.command("rotate")
@click.option(
    "--batch",
    default=500,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Rows a transaction takes.",
)
def rotate(batch: int) -> None:
    """Seal every payload value under the first key of the ring: values of
    an older key are opened and sealed again, values in clear are sealed.
    Safe while workers run, resumable and idempotent: run it again after a
    stop and it goes on where the work is. Exits 1 if values are left (a
    key missing from the ring, or rows workers held through every pass)."""
    from store.pg.keys import SEALED_TABLES

    store = _store()
    try:
        cipher = store.sealing.cipher
        if cipher is None:
            fail("RUNWRIGHT_ENCRYPTION_KEYS is not set: there is no key to seal with")
        current = cipher.current
        left = _not_current(store.key_counts(), current)
        sealed, unreadable = _passes(store, SEALED_TABLES, batch, left)
        left = _not_current(store.key_counts(), current)
        from runner.core.audit import AuditAction, record

        detail = {"key": current, "values": sealed, "left": left}
        record(store, AuditAction.ROTATED_KEYS, login_name(), source=cli_source(), detail=detail)
    finally:
        store.close()
    for reason in unreadable[:20]:
        say(f"not opened: {reason}")
    if left:
        fail(f"{sealed} value(s) sealed under {current}; {left} value(s) are not under it yet")
    say(f"{sealed} value(s) sealed under {current}; every value is under it")


def _passes(
    store: PostgresStore, tables: Sequence[str], batch: int, total: int
) -> tuple[int, list[str]]:
    """Batches over every table, pass after pass, until a pass seals nothing
    (or :data:`PASSES`); the values sealed and the reasons of those left."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    sealed = 0
    unreadable: list[str] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task("sealing", total=total or None)
        for number in range(PASSES):
            unreadable = []
            this_pass = 0
            for table in tables:
                after = None
                while True:
                    done = store.reseal(table, after, limit=batch)
                    this_pass += done.values
                    unreadable += done.unreadable
                    progress.update(task, advance=done.values, description=f"sealing {table}")
                    if done.after is None:
                        break
                    after = done.after
            sealed += this_pass
            left = _not_current(store.key_counts(), store.sealing.cipher.current)  # type: ignore[union-attr]
            if left <= len(unreadable) or (number and not this_pass):
                progress.update(task, description="sealed")
                break
            time.sleep(PASS_PAUSE_SECONDS)  # rows a worker held: the next pass
    return sealed, unreadable
