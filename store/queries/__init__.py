"""Every SQL statement the store runs, by name, in one package.

Statements are written with ``:name`` parameters and run by
:class:`store.db.Executor`, either as server-side prepared statements or as
plain statements (behind PgBouncer in transaction mode, see
``RUNWRIGHT_DB_PREPARED``). A statement that may be prepared gives every
parameter an explicit ``CAST`` so that Postgres can type it at ``PREPARE``.

Status literals are rendered from :mod:`store.status`, never spelled here.
This package imports neither SQLAlchemy nor pydantic (``runwright runs`` uses it).
"""

from __future__ import annotations

import re

_PARAM = re.compile(r"(?<!:):(\w+)")


class Statement:
    """One named SQL statement."""

    # Statements every pooled connection prepares when it connects (prepared mode).
    prepared: dict[str, Statement] = {}

    def __init__(self, name: str, sql: str, *, prepare: bool = False) -> None:
        self.name = name
        self.sql = sql
        self.params: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match.group(1) not in self.params:
                self.params.append(match.group(1))
            return f"${self.params.index(match.group(1)) + 1}"

        # $n for PREPARE; %(name)s for psycopg2, which then needs a literal % doubled.
        self.numbered = _PARAM.sub(number, sql)
        self.pyformat = _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))
        self.execute_sql = f"EXECUTE {name} ({', '.join(['%s'] * len(self.params))})"
        if prepare:
            Statement.prepared[name] = self

    def args(self, params: dict[str, object]) -> list[object]:
        return [params[name] for name in self.params]

    def __repr__(self) -> str:
        return f"Statement({self.name!r})"
