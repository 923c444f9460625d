"""``runwright limits``: a line per key (the patterns in force, declared in
code or in RUNWRIGHT_MODEL_LIMITS, and the keys runs are parked on) with its
limit, what is in use now in Redis, and the parked runs by tenant; the same
as JSON; one line and exit 1 when Redis is down. The real command, on the
test's own Postgres and Redis; runs parked through the store as an execution
parks them."""

from __future__ import annotations

import json

from runner.core.coordination.leases import Leases
from runner.core.limits import Grant, Limiter, ModelLimit
from store.local import free_port
from store.postgres import PostgresStore
from tests.e2e.clirun import refused, rw
from tests.helpers import parked_run

LIMITS = {
    "openai/gpt-a": {"rpm": 10, "tpm": 10_000, "max_concurrent": 4},
    "anthropic/*": {"max_concurrent": 2},
}


def _env(cli_env: dict[str, str]) -> dict[str, str]:
    return {
        **cli_env,
        "RUNWRIGHT_AGENTS": "tests.agents,tests.agents_limits",
        "RUNWRIGHT_MODEL_LIMITS": json.dumps(LIMITS),
    }


def test_each_key_with_its_limit_use_and_parked_runs(
    cli_env: dict[str, str], pg_store: PostgresStore, leases: Leases
) -> None:
    for tenant in ("acme", "acme", None):
        parked_run(pg_store, "openai/gpt-a", tenant=tenant)
    parked_run(pg_store, "anthropic/claude-x", tenant="zeta")
    parked_run(pg_store, "nolimit/model")
    grant = Limiter(leases.redis).acquire(
        "openai/gpt-a", ModelLimit(**LIMITS["openai/gpt-a"]), 500, "holder-1"
    )
    assert isinstance(grant, Grant)

    out = rw(_env(cli_env), "limits").stdout
    lines = {line.split("  ", 1)[0]: line for line in out.strip().splitlines()}
    assert sorted(lines) == [
        "anthropic/*",
        "anthropic/claude-x",
        "mistral/*",
        "nolimit/model",
        "openai/gpt-a",
    ], out
    gpt = lines["openai/gpt-a"]
    # The environment's declaration replaces the code's (rpm 1).
    assert "limit: rpm 10, tpm 10000, max_concurrent 4 (RUNWRIGHT_MODEL_LIMITS)" in gpt, gpt
    assert "in use: 1 request(s), 500 token(s) this minute, 1 call(s) in flight" in gpt, gpt
    assert "parked: 3 run(s) (acme 2, no tenant 1), the first may go at " in gpt, gpt
    assert "limit: tpm 50000 (code)" in lines["mistral/*"]
    assert "in flight" not in lines["nolimit/model"]
    assert "in use: per model" in lines["mistral/*"] and "parked: none" in lines["mistral/*"]
    claude = lines["anthropic/claude-x"]
    assert "limit: max_concurrent 2 (RUNWRIGHT_MODEL_LIMITS under 'anthropic/*')" in claude
    assert "in use: 0 request(s), 0 token(s) this minute, 0 call(s) in flight" in claude
    assert "parked: 1 run(s) (zeta 1)" in claude
    assert "limit: none in force" in lines["nolimit/model"]

    document = json.loads(rw(_env(cli_env), "limits", "--json").stdout)
    by_key = {entry["key"]: entry for entry in document["limits"]}
    entry = by_key["openai/gpt-a"]
    assert entry["limit"] == {"rpm": 10, "tpm": 10_000, "max_concurrent": 4}
    assert entry["source"] == "RUNWRIGHT_MODEL_LIMITS" and entry["pattern"] == "openai/gpt-a"
    assert entry["in_use"]["requests"] == 1 and entry["in_use"]["tokens"] == 500
    assert entry["in_use"]["holders"] == ["holder-1"] and entry["in_use"]["share"] == 1
    assert entry["parked"]["runs"] == 3
    assert entry["parked"]["tenants"] == [
        {"tenant": "acme", "runs": 2},
        {"tenant": None, "runs": 1},
    ]
    assert entry["parked"]["next_at"].endswith("+00:00")
    assert by_key["mistral/*"]["in_use"] is None and by_key["mistral/*"]["parked"] is None
    assert by_key["nolimit/model"]["limit"] is None


def test_a_limit_lowered_by_the_provider_says_so(cli_env: dict[str, str], leases: Leases) -> None:
    Limiter(leases.redis).learn("openai/gpt-a", retry_after=30)
    out = rw(_env(cli_env), "limits").stdout
    gpt = next(line for line in out.splitlines() if line.startswith("openai/gpt-a  "))
    assert "blocked until " in gpt, gpt


def test_nothing_in_force_says_so(cli_env: dict[str, str]) -> None:
    out = rw(cli_env, "limits").stdout
    assert out.startswith("no model limit is in force and no run is parked"), out
    assert json.loads(rw(cli_env, "limits", "--json").stdout) == {"limits": []}


def test_redis_down_is_one_line_and_exit_1(cli_env: dict[str, str]) -> None:
    env = {**_env(cli_env), "RUNWRIGHT_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    line = refused(env, "limits")
    assert line.startswith("error: Redis is unavailable"), line
    assert refused(env, "limits", "--json") == line
