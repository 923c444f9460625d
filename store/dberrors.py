"""Driver-error translation, once for every path that talks to Postgres.

psycopg2 only (no SQLAlchemy), so that ``store/summary.py`` shares it.
A driver error never reaches a caller: a lost server is
:class:`StoreUnavailable`, a refused statement :class:`StoreRefused`, and
neither quotes the statement or its parameters (which may hold anything: a
tool's output, a secret in a payload).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg2

from store.errors import ConstraintViolation, StoreRefused, StoreUnavailable

LOST = (psycopg2.OperationalError, psycopg2.InterfaceError)
# ValueError: psycopg2 refuses NUL characters in parameters.
REFUSED = (psycopg2.DataError, psycopg2.ProgrammingError, psycopg2.IntegrityError, ValueError)


def unavailable(exc: BaseException | None) -> StoreUnavailable:
    # The driver's first line says what happened; the rest is advice ("Is the
    # server running on that host...") that would split one log line in two.
    lines = str(exc or "").strip().splitlines()
    return StoreUnavailable(f"Postgres is unavailable: {lines[0] if lines else ''}".strip())


def refused(exc: BaseException) -> StoreRefused:
    """The driver's reason without the statement or its parameters."""
    orig = getattr(exc, "orig", None) or exc
    text = (getattr(orig, "pgerror", None) or str(orig)).strip()
    reason = text.splitlines()[0] if text else type(orig).__name__
    if isinstance(orig, psycopg2.IntegrityError):
        constraint = getattr(getattr(orig, "diag", None), "constraint_name", None)
        return ConstraintViolation(f"Postgres refused the statement: {reason}", constraint)
    return StoreRefused(f"Postgres refused the statement: {reason}")


@contextmanager
def translated() -> Iterator[None]:
    """Raise the store's errors in place of the driver's."""
    try:
        yield
    except LOST as exc:
        raise unavailable(exc) from exc
    except REFUSED as exc:
        raise refused(exc) from exc
