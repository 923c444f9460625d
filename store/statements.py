"""A named SQL statement, the unit :class:`store.db.Executor` runs.

Each statement is one whole literal, defined beside the code that runs it
(``store/pg/``, and ``store/summary.py`` for the command line's light
listing); none is assembled from pieces. It is written with ``:name``
parameters and run either as a server-side prepared statement or as a plain
one (behind PgBouncer in transaction mode, see ``RUNWRIGHT_DB_PREPARED``).
This module imports neither SQLAlchemy nor pydantic (``runwright runs`` uses it).
"""

from __future__ import annotations

import re
from collections.abc import Callable

_PARAM = re.compile(r"(?<!:):(\w+)")
# What SQL holds as text, where ``:name`` is no parameter: string literals
# ('it''s :this'), quoted identifiers, dollar-quoted bodies ($$...$$,
# $f$...$f$) and comments.
_QUOTED = re.compile(
    r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|\$(\w*)\$.*?\$\1\$|--[^\n]*|/\*.*?\*/""", re.DOTALL
)


def _params_sub(sql: str, replace: Callable[[re.Match[str]], str]) -> str:
    """``sql`` with each ``:name`` parameter replaced, those in text (a string
    literal, a quoted name, a comment) left as they are."""
    parts: list[str] = []
    end = 0
    for quoted in _QUOTED.finditer(sql):
        parts.append(_PARAM.sub(replace, sql[end : quoted.start()]))
        parts.append(quoted.group(0))
        end = quoted.end()
    parts.append(_PARAM.sub(replace, sql[end:]))
    return "".join(parts)


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
        self.numbered = _params_sub(sql, number)
        self.pyformat = _params_sub(sql.replace("%", "%%"), lambda m: f"%({m.group(1)})s")
        self.execute_sql = f"EXECUTE {name} ({', '.join(['%s'] * len(self.params))})"
        if prepare:
            Statement.prepared[name] = self

    def args(self, params: dict[str, object]) -> list[object]:
        return [params[name] for name in self.params]

    def __repr__(self) -> str:
        return f"Statement({self.name!r})"
