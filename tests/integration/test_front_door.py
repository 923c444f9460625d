"""Hostile triggers at the front door: ``Engine.start`` and ``create_run``
answer each with one clear InvalidInput and write nothing."""

from __future__ import annotations

from typing import Any

import pytest

import tests.agents  # noqa: F401  (registers the agents started below)
from runner import Engine
from runner.core.settings import Settings
from store.errors import InvalidInput, PayloadTooLarge
from store.models import NewRun, RunStatus, TriggerEnvelope
from store.postgres import PostgresStore
from store.validate import MAX_AGENT_CHARS, MAX_DEPTH, MAX_ID_CHARS
from tests.helpers import snapshot

LIMIT = 4096


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"a": [value]} if depth % 2 else [value]
    return value


def cycle() -> Any:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def shared(levels: int) -> Any:
    # 2**levels paths through 2*levels objects: small in memory, huge as JSON.
    value: Any = "x"
    for _ in range(levels):
        value = [value, value]
    return value


# (label, Engine.start keyword arguments, the message it must give)
HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("nul in payload", {"payload": {"note": "a\x00b"}}, "NUL"),
    ("nul in payload key", {"payload": {"a\x00": 1}}, "NUL"),
    ("nul in trigger id", {"id": "evt\x00"}, "trigger id contains a NUL"),
    ("nul in thread", {"thread": "t\x00"}, "thread contains a NUL"),
    ("nul in source", {"source": "web\x00"}, "source contains a NUL"),
    ("nul in trigger name", {"trigger": "push\x00"}, "trigger name contains a NUL"),
    ("nul in a key name", {"keys": {"k\x00": "v"}}, "NUL"),
    ("nul in a key value", {"keys": {"k": "v\x00"}}, "NUL"),
    ("surrogate in payload", {"payload": ["ok", "\ud800"]}, "UTF-8"),
    ("surrogate in payload key", {"payload": {"\udfff": 1}}, "UTF-8"),
    ("surrogate in trigger id", {"id": "evt-\ud83d"}, "UTF-8"),
    ("surrogate in thread", {"thread": "\udc80"}, "UTF-8"),
    ("surrogate in source", {"source": "\ud800"}, "UTF-8"),
    ("surrogate in trigger name", {"trigger": "\ud800"}, "UTF-8"),
    ("surrogate in a key", {"keys": {"\ud800": "v"}}, "UTF-8"),
    ("surrogate in a key value", {"keys": {"k": "\ud800"}}, "UTF-8"),
    ("bytes payload", {"payload": b"\xff\xfe"}, "bytes"),
    ("bytes in payload", {"payload": {"blob": b"\x80"}}, "bytes"),
    ("non-text key in payload", {"payload": {1: "one"}}, "keys are text"),
    ("nan in payload", {"payload": {"x": float("nan")}}, "not JSON"),
    ("too deep", {"payload": nested(MAX_DEPTH + 1)}, f"deeper than {MAX_DEPTH}"),
    ("far too deep", {"payload": nested(50_000)}, f"deeper than {MAX_DEPTH}"),
    ("circular", {"payload": cycle()}, f"deeper than {MAX_DEPTH}"),
    ("shared many times", {"payload": shared(40)}, "larger than"),
    ("long trigger id", {"id": "e" * 20_000}, f"the limit is {MAX_ID_CHARS}"),
    ("long thread", {"thread": "t" * (MAX_ID_CHARS + 1)}, f"the limit is {MAX_ID_CHARS}"),
    ("huge source", {"source": "s" * (LIMIT + 1)}, "the limit is 4096"),
    ("huge trigger name", {"trigger": "n" * (LIMIT + 1)}, "the limit is 4096"),
    ("huge keys", {"keys": {f"k{i}": "v" * 100 for i in range(50)}}, "the limit is 4096"),
    ("huge payload", {"payload": {"blob": "x" * LIMIT}}, "the limit is 4096"),
]


def envelope(**fields: Any) -> TriggerEnvelope:
    """An envelope as a caller of the store might build it, pydantic bypassed."""
    defaults = TriggerEnvelope().model_dump()
    return TriggerEnvelope.model_construct(**{**defaults, **fields})


@pytest.fixture
def engine(pg_store: PostgresStore) -> Engine:
    pg_store.max_payload_bytes = LIMIT
    return Engine(
        pg_store, settings=Settings(secret_key="test:test-secret-for-runwright-tests-only")
    )


@pytest.mark.parametrize(("label", "fields", "message"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_start_refuses_hostile_triggers_and_writes_nothing(
    engine: Engine, label: str, fields: dict[str, Any], message: str
) -> None:
    engine.start("five", {"fine": True})  # the store is not empty
    before = snapshot(engine.store)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=message):
        engine.start("five", **({"payload": {}} | fields))
    assert snapshot(engine.store) == before  # type: ignore[arg-type]


@pytest.mark.parametrize(("label", "fields", "message"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_create_run_refuses_hostile_triggers_and_writes_nothing(
    pg_store: PostgresStore, label: str, fields: dict[str, Any], message: str
) -> None:
    pg_store.max_payload_bytes = LIMIT
    before = snapshot(pg_store)
    with pytest.raises(InvalidInput, match=message):
        pg_store.create_run(NewRun(agent="five", trigger=envelope(**fields)))
    assert snapshot(pg_store) == before


@pytest.mark.parametrize(
    "fields",
    [
        {"source": b"\xff\xfe"},
        {"trigger": bytearray(b"push")},
        {"id": b"evt-1"},
        {"thread": b"\x80"},
        {"keys": {"k": b"\xff"}},
        {"keys": {b"k": "v"}},
    ],
    ids=["source", "trigger", "id", "thread", "key value", "key name"],
)
def test_create_run_refuses_bytes_in_text_fields(
    pg_store: PostgresStore, fields: dict[str, Any]
) -> None:
    before = snapshot(pg_store)
    with pytest.raises(InvalidInput, match="bytes"):
        pg_store.create_run(NewRun(agent="five", trigger=envelope(**fields)))
    assert snapshot(pg_store) == before


def test_start_refuses_non_utf8_bytes_in_text_fields(engine: Engine) -> None:
    before = snapshot(engine.store)  # type: ignore[arg-type]
    for fields in ({"source": b"\xff\xfe"}, {"keys": {"k": b"\xff"}}, {"thread": b"\x80"}):
        with pytest.raises(InvalidInput):
            engine.start("five", {}, **fields)
    assert snapshot(engine.store) == before  # type: ignore[arg-type]


def test_refusals_name_no_driver_and_concurrency_keys_are_bounded(pg_store: PostgresStore) -> None:
    long_key = "k" * 20_000
    with pytest.raises(InvalidInput, match="concurrency key is 20000 characters"):
        pg_store.create_run(NewRun(agent="five", trigger=envelope(), concurrency_key=long_key))
    with pytest.raises(InvalidInput, match="agent name"):
        pg_store.create_run(NewRun(agent="a" * (MAX_AGENT_CHARS + 1), trigger=envelope()))
    with pytest.raises(InvalidInput, match="agent name contains a NUL"):
        pg_store.create_run(NewRun(agent="fi\x00ve", trigger=envelope()))


def test_the_largest_accepted_values_are_stored(pg_store: PostgresStore) -> None:
    """At every limit, with four-byte characters, Postgres stores and indexes the run."""
    wide = "\U0001f600"
    thread = wide * MAX_ID_CHARS
    run, created = pg_store.create_run(
        NewRun(
            agent=wide * MAX_AGENT_CHARS,
            trigger=TriggerEnvelope(
                id=wide * MAX_ID_CHARS, thread=thread, payload=nested(MAX_DEPTH)
            ),
            concurrency_key=f"thread:{thread}",
        )
    )
    assert created and run.status is RunStatus.QUEUED
    stored = pg_store.get_run(run.id)
    assert stored.trigger.payload == nested(MAX_DEPTH) and stored.thread == thread


@pytest.mark.parametrize(
    "fields",
    [
        {"source": "s" * (LIMIT + 1)},
        {"keys": {f"k{i}": "v" * 100 for i in range(50)}},
        {"id": "i" * 400, "thread": "t" * 400, "trigger": "n" * (LIMIT - 700)},
        {"payload": shared(40)},
    ],
    ids=["source", "keys", "together", "shared payload"],
)
def test_oversized_parts_are_payload_too_large(
    pg_store: PostgresStore, fields: dict[str, Any]
) -> None:
    pg_store.max_payload_bytes = LIMIT
    before = snapshot(pg_store)
    with pytest.raises(PayloadTooLarge):
        pg_store.create_run(NewRun(agent="five", trigger=envelope(**fields)))
    assert snapshot(pg_store) == before
