"""Encryption at rest, as the store applies it (docs/security.md).

With a key ring (``RUNWRIGHT_ENCRYPTION_KEYS``, ``runner/core/keyring.py``)
every payload value is sealed before it is written: the store's JSON of the
value, encrypted, stands in its column as one JSON string,
``rw1:<key id>:<base64>``. Each value is bound to its table, its column and
its row (:data:`BOUND`), so a ciphertext copied to another row or column
does not open.

Sealed, per table: the trigger's payload (inside ``runs.trigger``, whose id,
source, keys and time stay in clear), a run's output and state; messages;
steps' input (an ``llm`` step's is the MCP listing: tool names, in clear),
output and error; effects' input and output; approvals' input, edited
arguments, answer and the reason a person gave (a text column: the value
sealed is the JSON of the text), and the approval events that carry them;
schedules' payload; a dataset's cases and an evaluation's case results
(store/pg/evals.py). Ids, statuses, times, usage, costs, names, keys, error
codes and the error messages of runs and effects (clipped, for operators to
diagnose) stay in clear, so operators can query and the console can list.

A value not sealed reads as it is: a database that turns encryption on keeps
its old rows readable, and ``runwright keys rotate`` seals them. A sealed
value read without its key is one clear error, :class:`CannotDecrypt`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from store.db import dumps
from store.errors import InvalidInput, RunwrightError

PREFIX = "rw1"
_MARK = f"{PREFIX}:"
KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")


class CannotDecrypt(RunwrightError):
    """A sealed value that does not open: its key is not in the ring, or the
    value was altered, or it belongs to another row or column."""


class Cipher(Protocol):
    """What seals and opens one value (:class:`runner.core.keyring.KeyRing`)."""

    @property
    def current(self) -> str: ...

    def seal(self, plaintext: bytes, associated: bytes) -> str: ...

    def open(self, value: str, associated: bytes) -> bytes: ...


def key_of(value: object) -> str | None:
    """The id of the key a sealed value needs; None for anything else."""
    if value.__class__ is not str or not value.startswith(_MARK):
        return None
    parts = value.split(":", 2)
    return parts[1] if len(parts) == 3 and KEY_ID.fullmatch(parts[1]) else None


def binding(table: str, column: str, *row: object) -> bytes:
    """The associated data of a value: its table, column and row's key parts."""
    if "|" in table or "|" in column:
        raise InvalidInput("a table or column name has no '|'")
    return "|".join(["runwright", table, column, *(str(part) for part in row)]).encode()


# The sealed columns, and the columns of their rows that bind a value to its
# row (in this order). ``runwright keys`` walks these.
BOUND: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("runs", "trigger"): ("id",),
    ("runs", "output"): ("id",),
    ("runs", "state"): ("id",),
    ("messages", "body"): ("run_id", "seq"),
    ("steps", "input"): ("run_id", "index", "kind", "tool_call_id"),
    ("steps", "output"): ("run_id", "index", "kind", "tool_call_id"),
    ("steps", "error"): ("run_id", "index", "kind", "tool_call_id"),
    ("effects", "input"): ("run_id", "key"),
    ("effects", "output"): ("run_id", "key"),
    ("approvals", "input"): ("approval_id",),
    ("approvals", "arguments"): ("approval_id",),
    ("approvals", "answer"): ("approval_id",),
    ("approvals", "reason"): ("approval_id",),
    ("schedules", "payload"): ("name",),
    ("dataset_cases", "data"): ("name", "version", "position"),
    ("evaluation_cases", "result"): ("evaluation_id", "position"),
}

# An llm step's input is the MCP listing (runner/core/mcp/listing.py): names
# and digests, read in SQL (``mcp_listing``); it stays in clear.
CLEAR_STEP_INPUT = "llm"
_STEP_COLUMNS = ("input", "output", "error")


class Sealing:
    """Seals and opens the store's payload values with a :class:`Cipher`;
    without one, writes in clear and refuses to read a sealed value."""

    def __init__(self, cipher: Cipher | None = None) -> None:
        self.cipher = cipher

    @property
    def on(self) -> bool:
        return self.cipher is not None

    def seal(self, value: Any, table: str, column: str, *row: object) -> Any:
        """``value`` as its column stores it: sealed, if there is a key."""
        if self.cipher is None or value is None:
            return value
        return self.cipher.seal(dumps(value).encode(), binding(table, column, *row))

    def open(self, value: Any, table: str, column: str, *row: object) -> Any:
        """A stored value as it was written: opened, if it is sealed."""
        key_id = key_of(value)
        if key_id is None:
            return value
        if self.cipher is None:
            raise CannotDecrypt(
                f"a {table}.{column} value is sealed under key {key_id!r}, and "
                "RUNWRIGHT_ENCRYPTION_KEYS is not set (docs/security.md)"
            )
        try:
            plain = self.cipher.open(value, binding(table, column, *row))
        except CannotDecrypt as exc:
            raise CannotDecrypt(f"{table}.{column} of {_row_name(row)}: {exc}") from None
        return json.loads(plain)

    def reseal(self, value: Any, table: str, column: str, *row: object) -> Any:
        """``value`` sealed under the current key: as it is if it already is,
        opened and sealed again if another key sealed it, sealed if it was
        written in clear (``runwright keys rotate``)."""
        if self.cipher is None:
            raise CannotDecrypt(
                "RUNWRIGHT_ENCRYPTION_KEYS is not set: there is no key to seal with"
            )
        key_id = key_of(value)
        if value is None or key_id == self.cipher.current:
            return value
        if key_id is None:
            return self.seal(value, table, column, *row)
        associated = binding(table, column, *row)
        try:
            plain = self.cipher.open(value, associated)
        except CannotDecrypt as exc:
            raise CannotDecrypt(f"{table}.{column} of {_row_name(row)}: {exc}") from None
        return self.cipher.seal(plain, associated)

    # ------------------------------------------------------ a row's payloads

    def trigger(self, trigger: Mapping[str, Any], run_id: str, *, opening: bool = False) -> Any:
        """A run's trigger with its payload sealed (or opened)."""
        payload = trigger.get("payload")
        done = (self.open if opening else self.seal)(payload, "runs", "trigger", run_id)
        if done is payload:
            return trigger
        return {**trigger, "payload": done}

    def step(self, step: Mapping[str, Any], run_id: str, *, opening: bool = False) -> Any:
        """A steps row (or its JSON) with its input, output and error sealed
        (or opened)."""
        if opening and all(key_of(step.get(c)) is None for c in _STEP_COLUMNS):
            return step  # nothing sealed (the common case without keys)
        if not opening and self.cipher is None:
            return step
        kind = step["kind"]
        row = (run_id, step["index"], kind, step.get("tool_call_id"))
        work = self.open if opening else self.seal
        changed = dict(step)
        for column in _STEP_COLUMNS:
            if column == "input" and kind == CLEAR_STEP_INPUT and not opening:
                continue
            changed[column] = work(step.get(column), "steps", column, *row)
        return changed

    def messages(self, bodies: Iterable[Any], run_id: str, first_seq: int) -> list[Any]:
        """Messages from ``first_seq`` on, sealed."""
        return [
            self.seal(body, "messages", "body", run_id, seq)
            for seq, body in enumerate(bodies, start=first_seq)
        ]

    def opened_messages(self, bodies: Iterable[Any], run_id: str) -> list[Any]:
        """A checkpoint's messages (seq 0 on), opened."""
        return [self.open(body, "messages", "body", run_id, seq) for seq, body in enumerate(bodies)]


def _row_name(row: tuple[object, ...]) -> str:
    return "row " + "/".join("-" if part is None else str(part) for part in row)


# The store's sealing when no key ring is given.
PLAIN = Sealing()
