"""The audit log (docs/security.md): every action of a person on runs' data,
appended to one hash chain.

A row's ``hash`` is the SHA-256 of the row before's hash and the row's own
fields (:func:`chain_hash`); appends take one lock, so the chain is one
line. :meth:`PgAudit.verify_audit` walks it and names the first row whose
hash does not follow: one deleted or altered with SQL is found, unless it
was the newest (nothing follows it to tell).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from store.db import dumps
from store.pg.base import PgBase
from store.statements import Statement

# The hash the first row follows.
GENESIS = "0" * 64

# One appender at a time (a transaction-scoped lock), so each row follows the last.
LOCK_AUDIT = Statement("lock_audit", "SELECT pg_advisory_xact_lock(7204917731)")

LAST_HASH = Statement("last_audit_hash", "SELECT hash FROM audit ORDER BY id DESC LIMIT 1")

APPEND_AUDIT = Statement(
    "append_audit",
    """
    INSERT INTO audit (at, actor, source, action, run_id, detail, prev_hash, hash)
    VALUES (CAST(:at AS timestamptz), CAST(:actor AS text), CAST(:source AS text),
            CAST(:action AS text), CAST(:run_id AS uuid), CAST(:detail AS jsonb),
            CAST(:prev_hash AS text), CAST(:hash AS text))
    RETURNING id
    """,
)

# The log in order, from ``after`` on, of one run if given.
AUDIT_ROWS = Statement(
    "audit_rows",
    """
    SELECT * FROM audit
     WHERE id > CAST(:after AS bigint)
       AND (CAST(:run_id AS uuid) IS NULL OR run_id = CAST(:run_id AS uuid))
     ORDER BY id
     LIMIT CAST(:limit AS int)
    """,
)


@dataclass(frozen=True)
class AuditEntry:
    """One row of the audit log."""

    id: int
    at: datetime
    actor: str
    action: str
    source: str | None
    run_id: str | None
    detail: Mapping[str, Any] | None
    prev_hash: str
    hash: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "action": self.action,
            "source": self.source,
            "run_id": self.run_id,
            "detail": None if self.detail is None else dict(self.detail),
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }


@dataclass(frozen=True)
class AuditCheck:
    """What :meth:`PgAudit.verify_audit` found: how many rows it read, and
    the first that does not follow the one before (None: the chain holds)."""

    rows: int
    broken_at: int | None = None
    why: str | None = None

    @property
    def ok(self) -> bool:
        return self.broken_at is None


def chain_hash(
    prev_hash: str,
    at: datetime,
    actor: str,
    source: str | None,
    action: str,
    run_id: str | None,
    detail: Mapping[str, Any] | None,
) -> str:
    """The hash of a row: the row before's, then its fields as canonical JSON."""
    fields = {
        "at": at.astimezone(UTC).isoformat(timespec="microseconds"),
        "actor": actor,
        "source": source,
        "action": action,
        "run_id": run_id,
        "detail": detail,
    }
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{prev_hash}\n{text}".encode()).hexdigest()


def _entry(row: Any) -> AuditEntry:
    return AuditEntry(
        id=int(row["id"]),
        at=row["at"],
        actor=row["actor"],
        action=row["action"],
        source=row["source"],
        run_id=None if row["run_id"] is None else str(row["run_id"]),
        detail=row["detail"],
        prev_hash=row["prev_hash"],
        hash=row["hash"],
    )


class PgAudit(PgBase):
    def append_audit(
        self,
        actor: str,
        action: str,
        *,
        run_id: str | None = None,
        source: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> int:
        """Append one action to the log; its id."""
        # JSON as it will read back, so that the hash is the stored row's.
        plain = None if detail is None else json.loads(dumps(detail))
        at = datetime.now(UTC)
        with self.db.tx() as tx:
            tx.execute(LOCK_AUDIT, {})
            last = tx.first(LAST_HASH, {})
            prev = GENESIS if last is None else str(last["hash"])
            digest = chain_hash(prev, at, actor, source, action, run_id, plain)
            row = tx.first(
                APPEND_AUDIT,
                {
                    "at": at,
                    "actor": actor,
                    "source": source,
                    "action": action,
                    "run_id": run_id,
                    "detail": None if plain is None else dumps(plain),
                    "prev_hash": prev,
                    "hash": digest,
                },
            )
        assert row is not None
        return int(row["id"])

    def audit_entries(
        self, *, run_id: str | None = None, after: int = 0, limit: int = 1000
    ) -> list[AuditEntry]:
        """The log in order, after the id ``after``, of ``run_id`` if given."""
        rows = self.db.rows(AUDIT_ROWS, {"after": after, "run_id": run_id, "limit": limit})
        return [_entry(row) for row in rows]

    def _all_entries(self, batch: int = 5000) -> Iterator[AuditEntry]:
        after = 0
        while True:
            found = self.audit_entries(after=after, limit=batch)
            yield from found
            if len(found) < batch:
                return
            after = found[-1].id

    def verify_audit(self) -> AuditCheck:
        """Walk the chain from its first row: the first row whose hash does
        not follow (a row before it deleted, or it or one before altered)."""
        prev, count = GENESIS, 0
        for entry in self._all_entries():
            count += 1
            if entry.prev_hash != prev:
                return AuditCheck(count, entry.id, "the row before it is missing or was altered")
            expected = chain_hash(
                prev, entry.at, entry.actor, entry.source, entry.action, entry.run_id, entry.detail
            )
            if entry.hash != expected:
                return AuditCheck(count, entry.id, "its fields were altered after it was written")
            prev = entry.hash
        return AuditCheck(count)
