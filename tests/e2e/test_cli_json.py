"""``--json`` on the commands a script drives (issue 26, item 12), through the
real entry point: each prints one JSON document and nothing else on stdout,
with stable names, statuses as their enum's values, times in UTC and costs as
numbers or null; an error is still one line on stderr and exit status 1; and
hostile stored text arrives escaped, never as a raw control character."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import tests.agents_terminal as hostile
from runner import Agent, Engine, tool
from runner.core.costs import run_cost
from runner.core.settings import Settings
from runner.testing import ScriptedModel, TestEngine, call, text, tools
from store.models import RunStatus
from tests.e2e.clirun import make_cli_env, refused, rw
from tests.integration.test_unknown_effects import Refunds, crashed_mid_refund
from tests.unpriced import leave_unpriced

# What every run document holds (runner/cli/as_json.py ``run_json``).
RUN_FIELDS = {
    "id",
    "parent_id",
    "parent_call_id",
    "detached",
    "agent",
    "status",
    "concurrency_key",
    "thread",
    "created_at",
    "updated_at",
    "enqueued_at",
    "started_at",
    "finished_at",
    "steps_used",
    "extra_steps",
    "input_tokens",
    "output_tokens",
    "usage_estimated",
    "cost_usd",
    "priced_usd",
    "error",
    "output",
    "state",
    "erased",
    "waiting",
    "claim",
    "takeovers",
    "cancel_requested",
    "cancelled_by",
    "needs_attention",
    "interrupted_reason",
    "interrupted_by",
    "retry",
    "retry_attempts",
    "retry_at",
    "model",
    "version",
    "started_version",
    "parked_key",
    "forked_from",
    "forked_at_step",
    "trigger",
}
# A row of ``runs --json``: the run's fields a listing reads, under the same names.
LISTED_FIELDS = {
    "id",
    "agent",
    "status",
    "concurrency_key",
    "created_at",
    "updated_at",
    "finished_at",
    "steps_used",
    "input_tokens",
    "output_tokens",
    "usage_estimated",
    "cost_usd",
    "priced_usd",
    "error",
    "needs_attention",
    "interrupted_reason",
    "retry_attempts",
    "retry_at",
    "version",
    "parked_key",
}
STEP_FIELDS = {
    "kind",
    "index",
    "name",
    "tool_call_id",
    "input",
    "output",
    "error",
    "input_tokens",
    "output_tokens",
    "usage_estimated",
    "cost_usd",
    "started_at",
    "finished_at",
}


@tool
def weigh(parcel: str) -> str:
    """Weigh a parcel."""
    return f"{parcel}: 2 kg"


USAGE = (1000, 500)
priced = ScriptedModel(
    "cli-json-priced",
    [tools(call("weigh", {"parcel": "p1"}), usage=USAGE), text("2 kg", usage=(300, 40))],
    price=(0.000_01, 0.000_02),
)
Agent(name="cli-json-priced", model=priced.model, tools=[weigh])
free = ScriptedModel("cli-json-free", [text("nothing to pay", usage=USAGE)])
Agent(name="cli-json-free", model=free.model)
unpriced = ScriptedModel("cli-json-unpriced", [text("who knows", usage=USAGE)])
Agent(name="cli-json-unpriced", model=unpriced.model)


@pytest.fixture
def env(cli_env: dict[str, str]) -> dict[str, str]:
    """The CLI's environment, in a Postgres session whose zone is not UTC:
    times still come out in UTC."""
    return {**cli_env, "PGTZ": "America/New_York"}


def document(env: dict[str, str], *args: str, code: int = 0) -> Any:
    """What ``runwright ARGS --json`` printed: one line of printable ASCII on
    stdout (no control character, however hostile the stored text), parsed."""
    done = rw(env, *args, "--json", ok=False)
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stdout.endswith("\n") and done.stdout.count("\n") == 1, done.stdout
    line = done.stdout[:-1]
    assert all(" " <= char <= "~" for char in line), [c for c in line if not " " <= c <= "~"]
    return json.loads(line)


def utc(value: str) -> datetime:
    """An ISO 8601 time in UTC, parsed."""
    parsed = datetime.fromisoformat(value)
    assert parsed.utcoffset() == timedelta(0), value
    return parsed


def test_start_runs_show_approve_deny_as_json(env: dict[str, str], engine: Engine) -> None:
    started = document(
        env, "start", "fleet", "--payload", '{"amount": 150}', "--key", "a=b", "--id", "evt-j"
    )
    assert set(started) == {"run"}
    run = started["run"]
    assert set(run) == RUN_FIELDS, set(run) ^ RUN_FIELDS
    assert (run["agent"], run["status"], run["steps_used"]) == ("fleet", "queued", 0)
    assert run["trigger"]["payload"] == {"amount": 150} and run["trigger"]["keys"] == {"a": "b"}
    assert run["trigger"]["id"] == "evt-j" and run["trigger"]["source"] == "cli"
    stored = engine.get_run(run["id"])
    assert utc(run["created_at"]) == stored.created_at
    assert run["cost_usd"] == 0 and run["error"] is None and run["waiting"] is None

    listed = document(env, "runs")
    assert set(listed) == {"runs"}
    [row] = listed["runs"]
    # What a listing adds to a run's fields: the approval a waiting run waits on.
    assert row.pop("waiting_on") is None and row.pop("waiting_kind") is None
    assert set(row) == LISTED_FIELDS, set(row) ^ LISTED_FIELDS
    assert {key: row[key] for key in LISTED_FIELDS} == {key: run[key] for key in LISTED_FIELDS}
    assert document(env, "runs", "--status", "completed") == {"runs": []}

    waiting = engine.execute(run["id"])
    assert waiting is not None and waiting.waiting is not None
    approval_id = waiting.waiting.approval_id
    shown = document(env, "show", run["id"])
    assert set(shown) == {
        "run",
        "children",
        "approvals",
        "standing_approvals",
        "steps",
        "attempts",
        "unknown_effects",
        "checkpoint",
        "messages",
        "version_events",
        "version_titles",
    }
    assert shown["children"] == [] and shown["standing_approvals"] == []
    [pending] = shown["approvals"]
    assert (pending["approval_id"], pending["kind"], pending["tool_name"]) == (
        approval_id,
        "approval",
        "refund",
    )
    assert pending["decision"] is None and pending["edited"] is False
    assert pending["input"] == {"amount": 150} and pending["arguments"] is None
    utc(pending["expires_at"])
    assert shown["run"]["status"] == "waiting" and shown["run"]["steps_used"] == 3
    assert shown["run"]["why"].startswith(f"waiting for a decision on approval {approval_id}")
    assert shown["run"]["waiting"]["approval_id"] == approval_id
    assert shown["run"]["waiting"]["tool_name"] == "refund"
    assert shown["run"]["waiting"]["input"] == {"amount": 150}
    assert utc(shown["run"]["waiting"]["expires_at"]) == waiting.waiting.expires_at
    assert shown["run"]["claim"] is None and shown["run"]["needs_attention"] is False
    assert [(s["index"], s["kind"], s["name"]) for s in shown["steps"]][:4] == [
        (1, "llm", "scripted/fleet"),
        (1, "tool", "lookup"),
        (2, "llm", "scripted/fleet"),
        (2, "tool", "charge"),
    ]
    assert all(set(step) == STEP_FIELDS for step in shown["steps"])
    assert shown["attempts"] == [] and shown["unknown_effects"] == []
    assert shown["checkpoint"]["step_index"] == 3
    assert len(shown["messages"]) == shown["checkpoint"]["message_count"] > 0
    assert shown["messages"][0]["role"] in ("system", "user")
    assert document(env, "show", run["id"], "--no-messages")["messages"] is None

    approved = document(env, "approve", approval_id, "--token", engine.token(approval_id))
    assert approved["decision"] == "approved" and approved["approval_id"] == approval_id
    assert approved["run"]["id"] == run["id"] and approved["run"]["status"] == "queued"
    assert approved["approval"]["decision"] == "approved" and approved["also"] == []
    assert approved["approval"]["decided_by"] and approved["approval"]["for_run"] is False

    other = engine.start("fleet", {"amount": 500})
    asked = engine.execute(other.id)
    assert asked is not None and asked.waiting is not None
    denied = document(
        env, "deny", asked.waiting.approval_id, "--token", engine.token(asked.waiting.approval_id)
    )
    assert denied["decision"] == "denied" and denied["run"]["id"] == other.id


def test_cancel_retry_fork_resolve_as_json(
    env: dict[str, str], engine: Engine, database_url: str, redis_url: str, tmp_path: Path
) -> None:
    queued = engine.start("fleet", {"amount": 1})
    cancelled = document(env, "cancel", queued.id, "--by", "ops-ana")
    assert cancelled["action"] == "cancelled" and cancelled["by"] == "ops-ana"
    assert cancelled["run"]["status"] == "cancelled"
    assert cancelled["run"]["cancelled_by"] == "ops-ana"
    assert cancelled["run"]["error"]["code"] == "cancelled"
    utc(cancelled["run"]["finished_at"])
    again = document(env, "cancel", queued.id)
    assert again["action"] == "settled" and again["run"]["status"] == "cancelled"

    retried = document(env, "retry", queued.id, "--extra-steps", "2")
    assert (retried["retried"], retried["attempt"], retried["extra_steps"]) == (True, 2, 2)
    assert retried["run"]["status"] == "queued" and retried["run"]["extra_steps"] == 2
    [earlier] = document(env, "show", queued.id)["attempts"]
    assert earlier["attempt"] == 1 and earlier["status"] == "cancelled"
    assert earlier["error"]["code"] == "cancelled"
    not_again = document(env, "retry", queued.id)
    assert (not_again["retried"], not_again["attempt"]) == (False, None)

    done = engine.start("fleet", {"amount": 5})
    assert engine.execute(done.id) is not None
    assert engine.get_run(done.id).status is RunStatus.COMPLETED
    forked = document(env, "fork", done.id, "--at-step", "1", "--rerun-effects")
    assert forked["forked_from"] == done.id and forked["at_step"] == 1
    assert forked["run"]["forked_from"] == done.id and forked["run"]["forked_at_step"] == 1
    assert forked["run"]["status"] == "queued" and forked["run"]["id"] != done.id

    settings = Settings(secret_key="test:test-secret-for-runwright-tests-only")
    with TestEngine(database_url, settings=settings) as kit:
        run_id = crashed_mid_refund(kit, Refunds())
    own = {**make_cli_env(database_url, redis_url, tmp_path, settings), "PGTZ": env["PGTZ"]}
    shown = document(own, "show", run_id)
    assert shown["run"]["needs_attention"] is True
    [unknown] = shown["unknown_effects"]
    assert (unknown["call_id"], unknown["tool"], unknown["status"]) == (
        "call_refund",
        "refund",
        "unknown",
    )
    assert unknown["input"] == {"order": "A1"} and unknown["resolved_outcome"] is None
    [row] = document(own, "runs", "--needs-attention")["runs"]
    assert row["id"] == run_id and row["needs_attention"] is True
    resolved = document(own, "resolve", run_id, "call_refund", "done", "--by", "ana")
    assert resolved["effect"]["resolved_outcome"] == "done"
    assert resolved["effect"]["resolved_by"] == "ana"
    assert resolved["run"]["needs_attention"] is False


def test_costs_are_numbers_or_null_when_unknown(
    env: dict[str, str], engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    leave_unpriced(monkeypatch, {"cli-json-unpriced"})
    runs = {}
    for agent in ("cli-json-priced", "cli-json-free", "cli-json-unpriced"):
        run = engine.start(agent)
        assert engine.execute(run.id) is not None
        runs[agent] = engine.get_run(run.id)
        assert runs[agent].status is RunStatus.COMPLETED
    paid = runs["cli-json-priced"]
    listed = {row["agent"]: row for row in document(env, "runs")["runs"]}

    shown = document(env, "show", paid.id)
    assert shown["run"]["cost_usd"] == pytest.approx(0.0238) == shown["run"]["priced_usd"]
    assert [s["cost_usd"] for s in shown["steps"] if s["kind"] == "llm"] == [
        pytest.approx(0.02),
        pytest.approx(0.0038),
    ]
    assert shown["run"]["input_tokens"] == 1300 and shown["run"]["output_tokens"] == 540
    assert listed["cli-json-priced"]["cost_usd"] == pytest.approx(0.0238)

    # A free model costs 0, in a listing too: it reads the run's mark that a
    # step had no price (runner/core/costs.py), not a guess from a 0 total.
    assert document(env, "show", runs["cli-json-free"].id)["run"]["cost_usd"] == 0
    assert listed["cli-json-free"]["cost_usd"] == 0

    unknown = document(env, "show", runs["cli-json-unpriced"].id)
    assert unknown["run"]["cost_usd"] is None and unknown["run"]["priced_usd"] == 0
    assert [s["cost_usd"] for s in unknown["steps"]] == [None]
    assert not run_cost(0.0, engine.store.steps(runs["cli-json-unpriced"].id)).complete
    assert listed["cli-json-unpriced"]["cost_usd"] is None


def test_hostile_stored_text_is_escaped_by_json(env: dict[str, str], engine: Engine) -> None:
    run = engine.start(hostile.AGENT, {"note": hostile.HOSTILE}, source="cli")
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.waiting is not None

    # document() refuses any character outside printable ASCII; what was
    # stored comes back exactly, once parsed.
    shown = document(env, "show", run.id)
    assert shown["run"]["agent"] == hostile.AGENT
    assert shown["run"]["trigger"]["payload"] == {"note": hostile.HOSTILE}
    assert shown["run"]["waiting"]["input"] == {"text": hostile.HOSTILE}
    [echoed] = [s for s in shown["steps"] if s["name"] == "echo"]
    assert echoed["output"] == {"echo": hostile.HOSTILE, "raw": hostile.HOSTILE}
    assert any(m.get("content") == hostile.HOSTILE for m in shown["messages"])
    assert any(s["name"] == "tool" + hostile.HOSTILE for s in shown["steps"])
    raw = rw(env, "show", run.id, "--json").stdout
    for escape in ("\\u001b]0;pwned\\u0007", "\\u009b31m", "\\u202egnp.exe", "\\u2028", "\\r"):
        assert escape in raw, escape
    assert "\\u007f" in raw and "\x7f" not in raw

    [row] = document(env, "runs")["runs"]
    assert row["agent"] == hostile.AGENT

    crashed = engine.start(hostile.CRASHING, {})
    assert engine.execute(crashed.id) is not None
    error = document(env, "show", crashed.id)["run"]["error"]
    assert error["code"] == "internal_error" and hostile.HOSTILE[:10] in error["message"]


def test_errors_stay_one_line_on_stderr_with_nothing_on_stdout(env: dict[str, str]) -> None:
    unknown = "01a22a21-0000-7000-8000-000000000000"
    for args in (
        ["show", unknown],
        ["show", "\x1b]0;pwned\x07"],
        ["cancel", unknown],
        ["retry", unknown],
        ["fork", unknown, "--at-step", "1"],
        ["approve", unknown, "--token", "t"],
        ["approve", unknown, "--arguments", "[1]"],
        ["answer", unknown, "yes"],
        ["start", "nope"],
        ["runs", "--status", "bogus"],
    ):
        done = rw(env, *args, "--json", ok=False)
        assert done.returncode == 1 and done.stdout == "", (args, done.stdout)
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, done.stderr[-2000:])
        assert lines[0].isprintable(), lines  # a hostile id is quoted inert, as without --json
    assert "no run with id" in refused(env, "show", unknown, "--json")


def test_what_an_agent_module_prints_goes_to_stderr(env: dict[str, str]) -> None:
    noisy = {**env, "RUNWRIGHT_AGENTS": "tests.agents,tests.agents_noisy"}
    done = rw(noisy, "start", "noisy", "--json")
    assert json.loads(done.stdout)["run"]["agent"] == "noisy"
    assert "agents_noisy: imported" in done.stderr
    assert "agents_noisy: imported" in rw(noisy, "start", "noisy").stdout  # as it always was

    checked = rw(noisy, "doctor", "--json", ok=False)
    assert checked.stdout.count("\n") == 1 and json.loads(checked.stdout)["checks"]
    assert "agents_noisy: imported" in checked.stderr


def test_doctor_as_json_has_every_check_and_the_same_exit_status(env: dict[str, str]) -> None:
    """No beat has ticked and no worker runs here: those two checks fail."""
    lines = rw(env, "doctor", ok=False)
    report = document(env, "doctor", code=lines.returncode)
    assert lines.returncode == 1 and report["healthy"] is False
    human = {}
    for line in lines.stdout.strip().splitlines()[:-1]:
        name, rest = line[:14].strip(), line[15:]
        human[name] = re.split(r"\s+", rest, maxsplit=1)
    assert [check["name"] for check in report["checks"]] == list(human)
    states = {check["name"]: check["state"] for check in report["checks"]}
    assert states["postgres"] == "ok" and states["schema"] == "ok"
    assert states["beat"] == "FAIL" and states["workers"] == "FAIL"
    assert set(states.values()) <= {"ok", "FAIL", "skipped"}
    for check in report["checks"]:
        shown = "skipped:" if check["state"] == "skipped" else check["state"]
        assert human[check["name"]] == [shown, check["detail"]], check

    broken = {**env, "RUNWRIGHT_LEASE_TTL_SECONDS": "fast"}  # the configuration fails
    report = document(broken, "doctor", code=1)
    states = {check["name"]: check["state"] for check in report["checks"]}
    assert states["configuration"] == "FAIL" and set(states.values()) == {"FAIL", "skipped"}
