"""What ``runwright doctor`` says of what it finds in the store (issue 49):
with a dozen agents that no live worker has, the one whose runs wait is named
first and the others are counted, never cut off; a tool that failed most of
its calls lately is named with its counts and window; and the output says
which Runwright it is. Runs made by an engine in this process, on the test's
own database; doctor is the real command."""

from __future__ import annotations

import json
import time
from importlib.metadata import version

import pytest

from runner import Agent, Engine, tool
from runner.core.coordination.leases import Leases
from runner.testing import ScriptedModel, call, text, tools
from store.models import RunStatus
from store.workers import WorkerInfo
from tests.e2e.clirun import rw
from tests.helpers import unique


def doctor_lines(env: dict[str, str]) -> tuple[int, dict[str, str], str]:
    done = rw(env, "doctor", ok=False)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    found = {}
    for line in done.stdout.strip().splitlines()[:-1]:
        found[line[:14].strip()] = line[15:].strip()
    return done.returncode, found, done.stdout


def a_live_worker(leases: Leases) -> None:
    """A worker's record in Redis, as its watchdog writes it: it has none of
    the test's agents."""
    leases.mark_worker(WorkerInfo("elsewhere@host", seen_at=time.time(), agents=("other",)), 60)


def test_with_a_dozen_agents_unserved_the_one_whose_runs_wait_is_named_first(
    engine: Engine, leases: Leases, cli_env: dict[str, str]
) -> None:
    """Eleven agents whose recent runs completed, and one, last by name, with
    two runs queued: the old doctor listed them by name and cut the line at
    300 characters, before the one that mattered."""
    settled = [unique("a-recently-busy-agent-with-a-long-name") for _ in range(11)]
    for name in settled:
        Agent(name=name, model=ScriptedModel(name, [text("done")]).model)
        run = engine.start(name)
        engine.execute(run.id)
        assert engine.get_run(run.id).status is RunStatus.COMPLETED
    waiting = unique("zz-the-agent-whose-runs-wait")
    Agent(name=waiting, model=ScriptedModel(waiting, [text("never run")]).model)
    engine.start(waiting)
    engine.start(waiting)
    a_live_worker(leases)

    code, lines, _ = doctor_lines(cli_env)
    assert code == 1
    served = lines["agents served"]
    assert served.startswith(
        f"FAIL  no live worker has agent {waiting!r} (2 run(s) wait for one)"
    ), served
    assert "nor 11 other agent(s) with open or recent runs" in served, served
    assert not served.endswith("..."), served


@tool
def flaky(n: int) -> str:
    """Looks up item n, and mostly cannot."""
    if n % 6:
        raise ConnectionError(f"the lookup service refused item {n}")
    return f"item {n}"


@tool
def steady(q: str) -> str:
    """Always answers."""
    return f"found {q}"


@tool
def seldom(n: int) -> str:
    """Fails, but too seldom called to judge."""
    if n:
        raise ValueError("bad")
    return "fine"


def test_a_tool_failing_most_of_its_calls_is_reported_with_its_counts(
    engine: Engine, leases: Leases, cli_env: dict[str, str]
) -> None:
    """``flaky`` failed 5 of its 6 calls; ``steady`` none of its 6; ``seldom``
    2 of 3, fewer calls than doctor judges a tool by."""
    name = unique("tooling")
    calls = [call("flaky", {"n": n}) for n in range(6)]
    calls += [call("steady", {"q": str(n)}) for n in range(6)]
    calls += [call("seldom", {"n": n}) for n in range(3)]
    model = ScriptedModel(name, [tools(*calls), text("done")])
    Agent(name=name, model=model.model, tools=[flaky, steady, seldom])
    run = engine.start(name)
    engine.execute(run.id)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    a_live_worker(leases)

    code, lines, out = doctor_lines(cli_env)
    assert code == 1
    assert "tools" in lines, out
    line = lines["tools"]
    assert line.startswith(
        f"FAIL  tool 'flaky' of agent {name!r} failed 5 of its 6 calls in the last hour"
    ), line
    assert "the lookup service refused item 5" in line, line  # its last error
    assert "steady" not in line and "seldom" not in line


def test_a_quiet_store_passes_the_tools_line(cli_env: dict[str, str]) -> None:
    _, lines, out = doctor_lines(cli_env)
    assert lines["tools"] == (
        "ok    no tool failed more than half of its 5 or more calls in the last hour"
    ), out


@pytest.mark.parametrize("as_json", [False, True])
def test_doctor_says_which_runwright_it_is(cli_env: dict[str, str], as_json: bool) -> None:
    done = rw(cli_env, "doctor", *(["--json"] if as_json else []), ok=False)
    if as_json:
        assert json.loads(done.stdout)["version"] == version("runwright")
    else:
        assert f"runwright {version('runwright')}" in done.stdout.strip().splitlines()[-1]


def test_a_model_answered_429_without_a_limit_is_named_with_the_variable_to_set(
    leases: Leases, cli_env: dict[str, str]
) -> None:
    from runner.core.limits.admission import note_throttled

    note_throttled(leases.redis, "openai/gpt-busy")
    code, lines, out = doctor_lines(cli_env)
    assert code == 1
    line = lines["model limits"]
    assert line.startswith(
        "FAIL  model 'openai/gpt-busy' was answered 429 in the last day (last at "
    ), out
    assert "has no limit in force: set RUNWRIGHT_MODEL_LIMITS" in line, line

    # A limit in force for it (here by a pattern) is what the line asks for.
    limited = {**cli_env, "RUNWRIGHT_MODEL_LIMITS": '{"openai/*": {"rpm": 100}}'}
    _, lines, out = doctor_lines(limited)
    assert lines["model limits"] == (
        "ok    the 1 model(s) answered 429 in the last day each have a limit in force"
    ), out


def test_no_429s_pass_the_model_limits_line(cli_env: dict[str, str]) -> None:
    _, lines, out = doctor_lines(cli_env)
    assert lines["model limits"] == "ok    no provider answered 429 in the last day", out
