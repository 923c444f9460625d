"""The audit log's hash chain (store/pg/audit.py): appended in one line, and
a row deleted or altered with SQL is found by the walk."""

from __future__ import annotations

import sqlalchemy as sa

from store.pg.audit import GENESIS
from store.postgres import PostgresStore


def test_appended_rows_follow_each_other_and_the_chain_holds(pg_store: PostgresStore) -> None:
    ids = [
        pg_store.append_audit("ana", "viewed_payloads", run_id=None, source="console 10.0.0.1"),
        pg_store.append_audit("bo", "decided", detail={"approved": True, "reason": "ok ✓"}),
        pg_store.append_audit("cli@host", "erased", detail={"runs": 3}),
    ]
    entries = pg_store.audit_entries()
    assert [e.id for e in entries] == ids
    assert entries[0].prev_hash == GENESIS
    assert [e.prev_hash for e in entries[1:]] == [e.hash for e in entries[:-1]]
    check = pg_store.verify_audit()
    assert check.ok and check.rows == 3


def test_a_row_deleted_or_altered_with_sql_breaks_the_chain(pg_store: PostgresStore) -> None:
    ids = [pg_store.append_audit(f"p{i}", "decided", detail={"n": i}) for i in range(4)]
    with pg_store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE audit SET actor = 'mallory' WHERE id = :id"), {"id": ids[2]})
    check = pg_store.verify_audit()
    assert not check.ok and check.broken_at == ids[2] and "altered" in (check.why or "")
    with pg_store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM audit WHERE id = :id"), {"id": ids[1]})
    check = pg_store.verify_audit()
    assert not check.ok and check.broken_at == ids[2] and "missing" in (check.why or "")
