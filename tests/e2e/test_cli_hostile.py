"""Hostile input at the CLI (issue 9, item 15): each is one line on stderr, exit
status 1, no traceback, and nothing written.

A str argument holding lone surrogates reaches ``runwright`` as the raw bytes
they escape: bytes that are not UTF-8, as a shell would pass them.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from runner import Engine, RunStatus
from runner.core.settings import Settings
from store.postgres import PostgresStore
from tests.e2e.clirun import make_cli_env, refused, rw
from tests.helpers import snapshot

NOT_UTF8 = "\udcff\udcfe"  # the bytes b"\xff\xfe" on the command line
DEEP = 500  # parses, but is nested past any documented trigger limit
TOO_DEEP = 50_000  # past what the JSON parser itself can take
LIMIT = 4096  # RUNWRIGHT_MAX_PAYLOAD_BYTES for these tests; argv cannot carry 256 KiB


@pytest.fixture
def cli_env(
    database_url: str, redis_url: str, tmp_path: Path, settings: Settings
) -> dict[str, str]:
    env = make_cli_env(database_url, redis_url, tmp_path, settings)
    env["RUNWRIGHT_MAX_PAYLOAD_BYTES"] = str(LIMIT)
    return env


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["fleet", "--payload", '{"m": "' + NOT_UTF8 + '"}'], id="payload-not-utf8"),
        pytest.param(["fleet", "--id", "evt" + NOT_UTF8], id="id-not-utf8"),
        pytest.param(["fleet", "--thread", "t" + NOT_UTF8], id="thread-not-utf8"),
        pytest.param(["fleet", "--source", "s" + NOT_UTF8], id="source-not-utf8"),
        pytest.param(["fleet", "--key", "k" + NOT_UTF8 + "=v"], id="key-name-not-utf8"),
        pytest.param(["fleet", "--key", "k=v" + NOT_UTF8], id="key-value-not-utf8"),
        pytest.param(["fleet" + NOT_UTF8], id="agent-not-utf8"),
        pytest.param(["fleet", "--payload", '{"m": NaN}'], id="payload-nan"),
        pytest.param(["fleet", "--payload", '{"m": -Infinity}'], id="payload-infinity"),
        pytest.param(["fleet", "--payload", nested(TOO_DEEP)], id="payload-too-deep-to-parse"),
        pytest.param(["fleet", "--payload", '{"m": ' + "1" * 5000 + "}"], id="payload-huge-int"),
        pytest.param(["fleet", "--payload", '{"m": 1e400}'], id="payload-float-overflow"),
    ],
)
def test_start_refuses_what_the_cli_cannot_read(
    cli_env: dict[str, str], pg_store: PostgresStore, args: list[str]
) -> None:
    before = snapshot(pg_store)
    line = refused(cli_env, "start", *args)
    assert any(word in line for word in ("UTF-8", "JSON", "nested", "number")), line
    assert snapshot(pg_store) == before


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--payload", json.dumps({"m": "a\u0000b"})], id="payload-nul"),
        pytest.param(["--payload", json.dumps({"m\u0000": 1})], id="payload-key-nul"),
        pytest.param(["--payload", json.dumps({"m": "\ud800"})], id="payload-lone-surrogate"),
        pytest.param(["--payload", json.dumps({"m": json.loads(nested(DEEP))})], id="deep"),
        pytest.param(["--payload", json.dumps({"m": "x" * (LIMIT + 1)})], id="payload-large"),
        pytest.param(["--id", "e" * 20_000], id="id-20kb"),
        pytest.param(["--thread", "t" * 20_000], id="thread-20kb"),
        pytest.param(["--source", "s" * (LIMIT + 1)], id="source-large"),
        pytest.param(["--key", "k=" + "v" * (LIMIT + 1)], id="key-large"),
        pytest.param(["--key", "k" * (LIMIT + 1) + "=v"], id="key-name-large"),
        pytest.param(
            [arg for i in range(LIMIT // 64 + 1) for arg in ("--key", f"k{i}=" + "v" * 64)],
            id="keys-large-together",
        ),
    ],
)
def test_start_refuses_hostile_triggers(
    cli_env: dict[str, str], pg_store: PostgresStore, args: list[str]
) -> None:
    """The engine's checks (trigger validation in the store), answered as one line."""
    before = snapshot(pg_store)
    line = refused(cli_env, "start", "fleet", *args)
    assert "unavailable" not in line.lower(), line  # a refusal, not a driver error
    assert snapshot(pg_store) == before


@pytest.fixture
def approval(cli_env: dict[str, str], engine: Engine) -> tuple[str, str, str]:
    """A run waiting for an approval: the run id, the approval id, its token."""
    run = engine.start("fleet", {"amount": 150})
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.waiting is not None
    approval_id = waiting.waiting.approval_id
    return run.id, approval_id, engine.token(approval_id)


def still_decidable(
    cli_env: dict[str, str], engine: Engine, approval: tuple[str, str, str]
) -> None:
    """The control: the real id and token still decide the approval."""
    run_id, approval_id, token = approval
    assert "approved" in rw(cli_env, "approve", approval_id, "--token", token).stdout
    assert engine.get_run(run_id).status is RunStatus.QUEUED


def test_approve_and_deny_refuse_bad_ids(
    cli_env: dict[str, str],
    engine: Engine,
    pg_store: PostgresStore,
    approval: tuple[str, str, str],
) -> None:
    _, _, token = approval
    other = str(uuid.uuid4())
    before = snapshot(pg_store)
    # Spellings Python's UUID parser takes (of an id no approval has, so the
    # answer is a refusal whether the engine refuses or normalizes them), 20 KB,
    # non-ASCII, bytes that are not UTF-8.
    for bad in (f"urn:uuid:{other}", "{" + other + "}", "a" * 20_000, "äpprövål", NOT_UTF8):
        for verb in ("approve", "deny"):
            line = refused(cli_env, verb, bad, "--token", token)
            assert len(line) < 400, line  # one readable line, even for a 20 KB id
    assert snapshot(pg_store) == before
    still_decidable(cli_env, engine, approval)


def test_approve_and_deny_refuse_bad_tokens(
    cli_env: dict[str, str],
    engine: Engine,
    pg_store: PostgresStore,
    approval: tuple[str, str, str],
) -> None:
    _, approval_id, token = approval
    before = snapshot(pg_store)
    for bad in ("tökén", token + "é", token[:-1] + NOT_UTF8, "t" * 20_000):
        for verb in ("approve", "deny"):
            refused(cli_env, verb, approval_id, "--token", bad)
    assert snapshot(pg_store) == before
    still_decidable(cli_env, engine, approval)


def test_approve_and_deny_refuse_a_reason_that_is_not_utf8(
    cli_env: dict[str, str],
    engine: Engine,
    pg_store: PostgresStore,
    approval: tuple[str, str, str],
) -> None:
    _, approval_id, token = approval
    before = snapshot(pg_store)
    for verb in ("approve", "deny"):
        line = refused(cli_env, verb, approval_id, "--token", token, "--reason", "no" + NOT_UTF8)
        assert "--reason is not valid UTF-8" in line
    assert snapshot(pg_store) == before
    still_decidable(cli_env, engine, approval)


def test_run_commands_refuse_bad_ids(cli_env: dict[str, str], pg_store: PostgresStore) -> None:
    before = snapshot(pg_store)
    for bad in ("a" * 20_000, "rün-ïd", NOT_UTF8, "{" + str(uuid.uuid4()) + "}"):
        for command in ("show", "watch", "cancel"):
            line = refused(cli_env, command, bad)
            assert "no run with id" in line or "UTF-8" in line, line
    assert snapshot(pg_store) == before


def test_watch_refuses_absurd_timeouts(cli_env: dict[str, str], engine: Engine) -> None:
    run = engine.start("fleet", {"amount": 1})  # queued: watch would follow it forever
    for value in ("nan", "-5", "inf", "1e400"):
        line = refused(cli_env, "watch", run.id, "--timeout", value)
        assert "--timeout must be a number of seconds" in line, line
    line = refused(cli_env, "watch", run.id, "--timeout", "0.3")
    assert "is still queued after 0.3 s" in line
