"""Encryption at rest (docs/security.md, "Encryption at rest"), on real
Postgres: with a key ring no payload is in clear anywhere in the database,
a ciphertext moved to another row or column does not open, a missing key is
one clear error that changes nothing, a database that turns encryption on
keeps its old rows readable, and ``runwright keys rotate`` moves every value
to the first key so that the old one can go. Rotation while workers run is
tests/e2e/test_encryption_workers.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from runner import Agent, Engine
from runner.cli import main
from runner.core.coordination.leases import Leases
from runner.core.keyring import CannotDecrypt, KeyRing, new_key
from runner.core.settings import Settings
from runner.testing import ScriptedModel, text
from store.db import make_engine
from store.models import RunStatus
from store.postgres import PostgresStore
from store.sealing import key_of
from tests.marked_runs import completed_run, everything, found, unique

OLD, NEW = new_key(), new_key()


def store_with(url: str, keys: str | None) -> PostgresStore:
    return PostgresStore(
        make_engine(url, pool_size=3), cipher=None if keys is None else KeyRing.parse(keys)
    )


@pytest.fixture
def stores(database_url: str) -> Iterator[dict[str, PostgresStore]]:
    """The same database through four rings: none, the old key, the new key
    first with the old one, the new key alone."""
    made = {
        "clear": store_with(database_url, None),
        "old": store_with(database_url, f"old:{OLD}"),
        "both": store_with(database_url, f"new:{NEW},old:{OLD}"),
        "new": store_with(database_url, f"new:{NEW}"),
    }
    yield made
    for store in made.values():
        store.close()


@pytest.fixture
def engines(
    stores: dict[str, PostgresStore], leases: Leases, settings: Settings
) -> Iterator[dict[str, Engine]]:
    made = {name: Engine(store, leases=leases, settings=settings) for name, store in stores.items()}
    yield made
    for engine in made.values():
        engine.close()


def raw(store: PostgresStore, sql: str, **params: Any) -> Any:
    """One statement's first value (None for one that returns no rows)."""
    with store.engine.begin() as conn:
        result = conn.execute(sa.text(sql), params)
        return result.scalar() if result.returns_rows else None


def test_with_keys_no_payload_is_in_clear_and_every_reader_gets_it_back(
    engines: dict[str, Engine], stores: dict[str, PostgresStore]
) -> None:
    marker = unique("MARKER")
    run_id = completed_run(engines["old"], marker)
    engines["old"].schedules.create(
        "nightly", engines["old"].get_run(run_id).agent, every=3600, payload={"customer": marker}
    )

    assert found(stores["old"], marker) == []
    sealed = raw(stores["old"], "SELECT output #>> '{}' FROM runs WHERE id = :id", id=run_id)
    assert key_of(sealed) == "old"
    state = everything(engines["old"], run_id)
    assert marker in json.dumps(state)
    assert state["output"] == f"done with {marker}"
    assert state["trigger"] == {"customer": marker}
    assert any(marker in json.dumps(a) for a in state["approvals"])
    assert any("edited" in json.dumps(e) for e in state["events"])
    [schedule] = engines["old"].schedules.list()
    assert schedule.payload == {"customer": marker}
    # Ids, statuses, usage and names stay in clear, for operators' queries.
    assert raw(stores["old"], "SELECT status FROM runs WHERE id = :id", id=run_id) == "completed"
    assert raw(stores["old"], "SELECT trigger -> 'keys' ->> 'customer' FROM runs") == "42"


def test_a_ciphertext_moved_to_another_row_or_column_does_not_open(
    engines: dict[str, Engine], stores: dict[str, PostgresStore]
) -> None:
    engine, store = engines["old"], stores["old"]
    first = completed_run(engine, unique("FIRST"))
    second = completed_run(engine, unique("SECOND"))
    raw(
        store,
        "UPDATE runs SET output = (SELECT output FROM runs WHERE id = :a) WHERE id = :b",
        a=first,
        b=second,
    )
    with pytest.raises(CannotDecrypt) as moved:
        engine.get_run(second)
    assert "runs.output" in moved.value.message and "'old'" in moved.value.message
    assert "another row or column" in moved.value.message
    # Another column of the same row: the state's ciphertext as its output.
    raw(store, "UPDATE runs SET state = output WHERE id = :a", a=first)
    raw(store, "UPDATE runs SET output = state, state = NULL WHERE id = :a", a=first)
    engine.get_run(first)  # its own output back in its place opens
    raw(
        store,
        "UPDATE messages SET body = (SELECT body FROM messages WHERE run_id = :a AND seq = 0)"
        " WHERE run_id = :a AND seq = 1",
        a=first,
    )
    with pytest.raises(CannotDecrypt, match=r"messages\.body"):
        engine.checkpoint(first)


def test_a_missing_key_is_one_error_naming_its_id_and_changes_nothing(
    engines: dict[str, Engine], stores: dict[str, PostgresStore]
) -> None:
    run_id = completed_run(engines["old"], unique("MARKER"))
    before = raw(stores["old"], "SELECT CAST(output AS text) FROM runs WHERE id = :id", id=run_id)
    for ring in ("new", "clear"):
        with pytest.raises(CannotDecrypt) as missing:
            engines[ring].get_run(run_id)
        assert "'old'" in missing.value.message
        assert OLD not in missing.value.message and NEW not in missing.value.message
        with pytest.raises(CannotDecrypt):
            engines[ring].retry(run_id)
    after = raw(stores["old"], "SELECT CAST(output AS text) FROM runs WHERE id = :id", id=run_id)
    assert after == before
    # A list that shows no payload opens none: it lists without the key.
    [listed] = engines["new"].list_runs(payloads=False)
    assert (listed.id, listed.status, listed.output) == (run_id, RunStatus.COMPLETED, None)
    assert listed.trigger.payload is None and listed.trigger.keys == {"customer": "42"}
    assert engines["old"].get_run(run_id).status is RunStatus.COMPLETED


@pytest.fixture
def env(database_url: str, redis_url: str) -> dict[str, str]:
    """The command line's environment, without a key ring."""
    return {
        "RUNWRIGHT_DATABASE_URL": database_url,
        "RUNWRIGHT_REDIS_URL": redis_url,
        "RUNWRIGHT_SECRET_KEY": "test:test-secret-for-runwright-tests-only",
    }


def rotate(env: dict[str, str], keys: str, *args: str) -> Any:
    """``runwright keys ARGS`` with ``keys`` for its ring."""
    with_keys = {**env, "RUNWRIGHT_ENCRYPTION_KEYS": keys}
    return CliRunner().invoke(main, ["keys", *args], env=with_keys, catch_exceptions=False)


def status(env: dict[str, str], keys: str) -> dict[str | None, int]:
    done = rotate(env, keys, "status", "--json")
    assert done.exit_code == 0, done.output
    counts: dict[str | None, int] = {}
    for line in done.output.splitlines():
        entry = json.loads(line)
        counts[entry["key"]] = counts.get(entry["key"], 0) + entry["values"]
    return counts


def test_turning_encryption_on_keeps_old_rows_and_rotate_seals_them(
    engines: dict[str, Engine], stores: dict[str, PostgresStore], env: dict[str, str]
) -> None:
    marker = unique("MARKER")
    clear_run = completed_run(engines["clear"], marker)
    before = everything(engines["clear"], clear_run)
    assert "runs.trigger" in found(stores["clear"], marker)

    # Keys set: the old rows read as they were; new writes are sealed at once.
    assert everything(engines["old"], clear_run) == before
    later = unique("LATER")
    completed_run(engines["old"], later)
    assert found(stores["old"], later) == []
    counts = status(env, f"old:{OLD}")
    assert counts[None] > 0 and counts["old"] > 0

    done = rotate(env, f"old:{OLD}", "rotate", "--batch", "3")
    assert done.exit_code == 0, done.output
    assert "every value is under it" in done.output
    assert found(stores["old"], marker) == []
    assert set(status(env, f"old:{OLD}")) == {"old"}
    assert everything(engines["old"], clear_run) == before
    # Again: nothing to do, nothing changed.
    again = rotate(env, f"old:{OLD}", "rotate")
    assert again.exit_code == 0 and "0 value(s) sealed" in again.output
    [entry, *_] = [e for e in engines["old"].audit_log() if e.action == "rotated_keys"]
    assert entry.detail is not None and entry.detail["key"] == "old"


def test_rotation_moves_every_value_to_the_first_key_and_the_old_one_can_go(
    engines: dict[str, Engine], stores: dict[str, PostgresStore], env: dict[str, str]
) -> None:
    runs = [completed_run(engines["old"], unique("MARKER")) for _ in range(3)]
    name = unique("waits")
    Agent(name=name, model=ScriptedModel(name, lambda r: text("done")).model)
    queued = engines["old"].start(name, {"left": "queued"}).id
    before = {run_id: everything(engines["old"], run_id) for run_id in [*runs, queued]}

    refused = rotate(env, f"old:{OLD}", "rotate")
    assert refused.exit_code == 0  # under the first key already: nothing to do
    done = rotate(env, f"new:{NEW},old:{OLD}", "rotate", "--batch", "7")
    assert done.exit_code == 0, done.output
    assert set(status(env, f"new:{NEW}")) == {"new"}

    # The old key removed: every reader gets every run back as it was.
    after = {run_id: everything(engines["new"], run_id) for run_id in before}
    assert after == before
    with pytest.raises(CannotDecrypt, match="'new'"):
        engines["old"].get_run(runs[0])
    # A run queued before the rotation runs on after it.
    assert engines["new"].execute(queued) is not None
    assert engines["new"].get_run(queued).output == "done"


def test_rotate_without_keys_is_one_clear_error(env: dict[str, str]) -> None:
    done = CliRunner().invoke(main, ["keys", "rotate"], env=env)
    assert done.exit_code == 1
    assert "RUNWRIGHT_ENCRYPTION_KEYS is not set" in done.output
    malformed = rotate(env, "old:not-base64!", "rotate")
    assert malformed.exit_code != 0
    assert "RUNWRIGHT_ENCRYPTION_KEYS" in malformed.output


def test_erasure_with_keys_leaves_the_skeleton_and_no_ciphertext(
    engines: dict[str, Engine], stores: dict[str, PostgresStore]
) -> None:
    marker = unique("MARKER")
    run_id = completed_run(engines["old"], marker)
    was = engines["old"].get_run(run_id)
    engines["old"].erase([run_id], by="dpo", source="test")
    run = engines["old"].get_run(run_id)
    assert (run.status, run.usage, run.erased_by) == (was.status, was.usage, "dpo")
    assert run.output is None and run.trigger.payload == {}
    # Nothing sealed is left of it: erased means gone, not encrypted.
    counts = {(c.table, c.column): c.values for c in stores["old"].key_counts() if c.key}
    assert counts == {}
