"""A named SQL statement, the unit :class:`store.db.Executor` runs.

Each statement is defined beside the code that runs it (``store/pg/``, and
``store/summary.py`` for the command line's light listing), written with
``:name`` parameters and run either as a server-side prepared statement or as a
plain one (behind PgBouncer in transaction mode, see ``RUNWRIGHT_DB_PREPARED``).
This module imports neither SQLAlchemy nor pydantic (``runwright runs`` uses it).
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
