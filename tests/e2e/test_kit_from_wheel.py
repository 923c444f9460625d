"""The testing kit as a new project meets it (issue 25's acceptance): a fresh
virtualenv outside the repository, Runwright installed from a wheel built from
this checkout (its dependencies from requirements.lock, hash-checked), pytest
finding the kit's plugin through its entry point, and a test file written only
from docs/testing-your-agents.md for an agent with a read tool, an
approval-gated effect and a structured output. A second file calls a real
provider without opting in, and must fail with the line that says how to."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.services import ROOT, Services

# The module's virtualenv is made once, in its first test's setup: installing
# the lock into a new venv takes a minute or two (more on a busy machine).
pytestmark = pytest.mark.timeout(900)

AGENTS = '''
from datetime import timedelta

import pydantic

from runner import Agent, ApprovalPolicy, effect, tool

REFUNDS: list[str] = []


class Refund(pydantic.BaseModel):
    order: str
    refunded: bool


@tool
def lookup(order: str) -> dict:
    """Look an order up."""
    return {"order": order, "paid": 30}


@effect
def refund(order: str, idempotency_key: str) -> str:
    """Refund an order."""
    REFUNDS.append(order)
    return f"refunded {order}"


billing = Agent(
    name="billing",
    model="openai/gpt-4o-mini",
    tools=[lookup, refund],
    approvals={"refund": ApprovalPolicy(expires_in=timedelta(hours=1))},
    output=Refund,
)

# The same agent without a person in the loop, for the crash test.
billing_unattended = Agent(
    name="billing-unattended",
    model="openai/gpt-4o-mini",
    tools=[lookup, refund],
    output=Refund,
)
'''

TESTS = """
from datetime import timedelta

import pytest

from runner.testing import (
    ScriptedModel, UnexpectedModelCall, call, output, rate_limited, tools,
)

import agents
from agents import Refund, billing, billing_unattended


@pytest.fixture(autouse=True)
def no_refunds_yet():
    agents.REFUNDS.clear()


def script(name):
    return ScriptedModel(name, [
        tools(call("lookup", {"order": "A1"})),
        tools(call("refund", {"order": "A1"})),
        output(Refund(order="A1", refunded=True)),
    ])


def test_happy_path(runwright_engine):
    model = script("happy")
    with billing.override(model=model):
        run = runwright_engine.run(billing, {"order": "A1"})
        assert run.status == "waiting"
        run = runwright_engine.approve(run.id, "refund")
    assert run.status == "completed"
    assert run.output_as(Refund) == Refund(order="A1", refunded=True)
    assert agents.REFUNDS == ["A1"]
    assert [c.name for c in runwright_engine.tool_calls(run.id)] == [
        "lookup", "refund", "final_result"]
    model.assert_complete()


def test_a_denied_refund_is_not_made(runwright_engine):
    model = script("denied")
    with billing.override(model=model):
        run = runwright_engine.run(billing)
        run = runwright_engine.deny(run.id, "refund", reason="not eligible")
    assert run.status == "completed" and agents.REFUNDS == []
    assert "not eligible" in model.calls[-1].tool_results()[-1]["content"]


def test_a_429_then_success(runwright_engine):
    model = ScriptedModel("limited", [
        rate_limited(retry_after=2), output(Refund(order="A1", refunded=False))])
    with billing_unattended.override(model=model):
        run = runwright_engine.run(billing_unattended)
    assert run.status == "completed"
    assert run.output_as(Refund) == Refund(order="A1", refunded=False)
    assert len(model.calls) == 2
    model.assert_complete()


def test_a_crash_after_the_effect_ran(runwright_engine):
    model = ScriptedModel("crash", [
        tools(call("refund", {"order": "A1"})), output(Refund(order="A1", refunded=True))])
    with billing_unattended.override(model=model):
        run = runwright_engine.start(billing_unattended)
        runwright_engine.crash(run.id, at="after_effect_call")
        run = runwright_engine.recover(run.id)
    runwright_engine.assert_recovered(run.id)
    assert run.status == "completed"
    assert agents.REFUNDS == ["A1"]
    assert runwright_engine.invocations("refund", run.id) == 1


def test_an_unanswered_refund_expires(runwright_engine):
    model = ScriptedModel("expiry", [
        tools(call("refund", {"order": "A1"})), output(Refund(order="A1", refunded=False))])
    with billing.override(model=model):
        run = runwright_engine.run(billing)
        runwright_engine.advance(timedelta(hours=2))
    assert runwright_engine.get_run(run.id).status == "completed"
    assert agents.REFUNDS == []
    assert "expired" in model.calls[-1].tool_results()[-1]["content"]


def test_drift_is_caught(runwright_engine):
    model = ScriptedModel("drift", [tools(call("lookup", {"order": "A1"}))])
    with billing_unattended.override(model=model):
        run = runwright_engine.run(billing_unattended)
    assert run.status == "failed"
    with pytest.raises(UnexpectedModelCall):
        model.assert_complete()
"""

REAL_CALL = """
from agents import billing_unattended


def test_calls_the_real_provider(runwright_engine):
    runwright_engine.run(billing_unattended)
"""


# What a checkout holds besides its source.
_NOT_SOURCE = (".git", ".venv", ".runwright", "*.egg-info", "build", "dist", "__pycache__",
               ".mypy_cache", ".ruff_cache", ".pytest_cache", "results")  # fmt: skip


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with Runwright installed from a wheel of this checkout."""
    root = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNWRIGHT_", "VIRTUAL_ENV"))}
    # Built from a copy: a build writes its egg-info and build/ into the source.
    source = root / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    dist = root / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(dist), str(source)],
        root, env, 300,
    )  # fmt: skip
    (wheel,) = dist.glob("runwright-*.whl")
    target = root / "venv"
    _run([sys.executable, "-m", "venv", str(target)], root, env, 120)
    pip = [str(target / "bin" / "python"), "-m", "pip", "install", "-q"]
    _run(
        [*pip, "--require-hashes", "--no-deps", "-r", str(ROOT / "requirements.lock")],
        root,
        env,
        900,
    )
    _run([*pip, "--no-deps", str(wheel)], root, env, 300)
    return target


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "shop"
    project.mkdir()
    (project / "agents.py").write_text(AGENTS)
    (project / "test_billing.py").write_text(TESTS)
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\naddopts = "-p no:cacheprovider"\n'
    )
    return project


def _pytest(
    venv: Path, project: Path, services: Services | None, *files: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    """pytest in the project; on the suite's Postgres server, or with
    ``services=None`` on none (the kit then starts the local stack's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNWRIGHT_", "PYTHON"))}
    if services is not None:
        env["RUNWRIGHT_TEST_DATABASE_URL"] = services.database_url("postgres")
    env.update(extra)
    # A provider an allowed call would reach: none (no key, a closed port).
    env.pop("OPENAI_API_KEY", None)
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-rA", *files],
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_new_project_tests_its_agent_from_the_docs_alone(
    venv: Path, services: Services, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import runner; print(runner.__file__)"],
        cwd=project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert str(venv) in where.stdout and str(ROOT) not in where.stdout, where  # the wheel's
    began = time.monotonic()
    done = _pytest(venv, project, services, "test_billing.py")
    took = time.monotonic() - began
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]
    assert re.search(r"\b6 passed\b", out), out[-3000:]
    # What the file cost, for the note (a benchmark's business, not an assertion's).
    summary = out.strip().splitlines()[-1]
    print(f"the kit's test file: 6 tests in {took:.1f} s (pytest's own figure: {summary})")


def test_a_real_provider_call_without_opting_in_fails_with_how_to_allow_it(
    venv: Path, services: Services, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    (project / "test_real.py").write_text(REAL_CALL)
    done = _pytest(venv, project, services, "test_real.py")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "1 failed" in out, out[-3000:]
    line = next(ln for ln in out.splitlines() if "ModelRequestsBlocked:" in ln)
    assert "'openai/gpt-4o-mini'" in line and "@pytest.mark.runwright_allow_model_requests" in line

    marked = "import pytest\n" + REAL_CALL.replace(
        "def test_", "@pytest.mark.runwright_allow_model_requests\ndef test_"
    )
    (project / "test_real.py").write_text(marked)
    done = _pytest(venv, project, services, "test_real.py")
    out = done.stdout + done.stderr
    # Allowed, the call goes out (and fails for want of a key and a network),
    # so the run fails on the provider, not on the block.
    assert "ModelRequestsBlocked" not in out, out[-3000:]

    (project / "test_real.py").write_text(REAL_CALL)
    done = _pytest(venv, project, services, "test_real.py", RUNWRIGHT_ALLOW_MODEL_REQUESTS="1")
    assert "ModelRequestsBlocked" not in done.stdout + done.stderr, done.stdout[-3000:]


def test_without_a_database_url_the_kit_starts_the_embedded_postgres_and_stops_it(
    venv: Path, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    home = project / ".runwright"
    began = time.monotonic()
    done = _pytest(venv, project, None, "test_billing.py")
    took = time.monotonic() - began
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]
    assert re.search(r"\b6 passed\b", out), out[-3000:]
    assert (home / "postgres").is_dir()  # the project's own stack, under .runwright/
    left = [
        proc.info["cmdline"]
        for proc in psutil.process_iter(["cmdline"])
        if str(home) in " ".join(proc.info["cmdline"] or ())
    ]
    assert left == []  # the session that started it stopped it
    print(f"the kit's test file on a first start of the embedded Postgres: {took:.1f} s")
