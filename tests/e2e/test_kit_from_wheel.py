"""Runwright as people install it: a wheel and an sdist built from this
checkout as ``make dist`` builds them (``python -m build``), installed with the
``django`` extra into a fresh virtualenv outside the repository, its
dependencies from requirements.lock, hash-checked (issue 49, item 5).

What the wheel holds and declares; a smoke test of the installed release
(``import runner``, ``runwright --version``, ``runwright migrate`` and
``runwright doctor`` against the test's services with a live worker started
from the virtualenv, one run on a scripted model); and the testing kit as a new
project meets it (issue 25's acceptance): pytest finding the kit's plugin
through its entry point, and a test file written only from
docs/testing-your-agents.md for an agent with a read tool, an approval-gated
effect and a structured output. A second file calls a real provider without
opting in, and must fail with the line that says how to."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from store.local import LocalRedis, free_port
from store.revision import HEAD
from tests.e2e.cluster import Proc
from tests.services import ROOT, Services, outside_env

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
        run = runwright_engine.take_over(run.id)
    runwright_engine.assert_taken_over(run.id)
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
               ".mypy_cache", ".ruff_cache", ".pytest_cache", "results",
               "node_modules")  # fmt: skip
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]
# The top-level modules the wheel installs (README, "Module names").
PACKAGES = ("runner", "store", "tasks")


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


@dataclass
class Built:
    source: Path  # the copy of the checkout it was built from
    wheel: Path
    sdist: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The wheel and the sdist, built as ``make dist`` builds them: the standard
    frontend, with the lock's setuptools (no isolation), the wheel from the sdist."""
    root = tmp_path_factory.mktemp("dist")
    # Built from a copy: building the sdist writes its egg-info into the source.
    source = root / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    dist = root / "dist"
    _run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
        root, outside_env(), 300,
    )  # fmt: skip
    (wheel,) = dist.glob("runwright-*.whl")
    (sdist,) = dist.glob("runwright-*.tar.gz")
    return Built(source, wheel, sdist)


@pytest.fixture(scope="module")
def venv(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv outside the repository with Runwright installed from
    the wheel, with the ``django`` extra; every dependency from the lock."""
    root = tmp_path_factory.mktemp("wheel")
    env = outside_env()
    target = root / "venv"
    _run([sys.executable, "-m", "venv", str(target)], root, env, 120)
    pip = [str(target / "bin" / "python"), "-m", "pip", "install", "-q"]
    _run(
        [*pip, "--require-hashes", "--no-deps", "-r", str(ROOT / "requirements.lock")],
        root,
        env,
        900,
    )
    # --no-deps: what the extra asks for comes from the lock, checked below.
    _run([*pip, "--no-deps", f"{built.wheel}[django]"], root, env, 300)
    return target


def test_the_wheel_holds_the_source_its_data_and_no_tests(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(f"runwright-{VERSION}.dist-info/METADATA").decode()
        entry_points = wheel.read(f"runwright-{VERSION}.dist-info/entry_points.txt").decode()
    source = {
        str(path.relative_to(built.source))
        for package in PACKAGES
        for path in (built.source / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    # Every file of the packages: the migrations (Alembic's and the Django
    # app's), the console's assets (runner/console/assets.py, inlined in its
    # pages), the py.typed markers; and nothing else but celeryconfig.py.
    dist_info = {name for name in names if name.startswith(f"runwright-{VERSION}.dist-info/")}
    assert set(names) == source | dist_info | {"celeryconfig.py"}
    assert f"runwright-{VERSION}.dist-info/licenses/LICENSE" in dist_info  # the licence's text
    migrations = {name for name in names if name.startswith("store/migrations/")}
    assert {"store/migrations/env.py", "store/migrations/script.py.mako"} <= migrations
    assert any(re.fullmatch(r"store/migrations/versions/0001_\w+\.py", n) for n in migrations)
    assert {"runner/py.typed", "store/py.typed", "tasks/py.typed"} <= set(names)
    assert "runner/console/assets.py" in names
    assert not [n for n in names if n.split("/", 1)[0] in ("tests", "bench", "examples", "docs")]

    headers, _, description = metadata.partition("\n\n")
    fields = [tuple(line.split(": ", 1)) for line in headers.splitlines() if ": " in line]
    one = dict(fields)
    assert one["Name"] == "runwright" and one["Version"] == VERSION
    assert one["Summary"] == PROJECT["description"]
    assert one["License-Expression"] == "Apache-2.0"
    assert one["Requires-Python"] == ">=3.11"
    assert one["Description-Content-Type"] == "text/markdown"
    assert description.strip() == (ROOT / "README.md").read_text().strip()
    classifiers = [value for key, value in fields if key == "Classifier"]
    assert classifiers == PROJECT["classifiers"]
    extras = {value for key, value in fields if key == "Provides-Extra"}
    assert {"django", "flask", "mcp", "otel", "metrics", "console"} <= extras
    requires = [value for key, value in fields if key == "Requires-Dist"]
    assert 'django>=5.0; extra == "django"' in requires
    assert not [r for r in requires if r.endswith('extra == "console"')]  # the core suffices
    assert "runwright = runner.cli:main" in entry_points  # [console_scripts]
    assert "runwright = runner.testing.plugin" in entry_points  # [pytest11]
    print(f"the wheel: {len(names)} files, {len(migrations)} under store/migrations/")


def test_the_sdist_holds_what_the_wheel_is_built_from(built: Built) -> None:
    top = f"runwright-{VERSION}/"
    with tarfile.open(built.sdist) as sdist:
        names = {name.removeprefix(top) for name in sdist.getnames()}
    assert {"pyproject.toml", "README.md", "PKG-INFO", "celeryconfig.py"} <= names
    assert "store/migrations/script.py.mako" in names and "runner/py.typed" in names
    assert not [n for n in names if n.split("/", 1)[0] in ("tests", "bench", "examples")]


SMOKE_AGENTS = """
from runner import Agent, tool
from runner.testing import ScriptedModel, call, text, tools


@tool
def lookup(order: str) -> dict:
    \"\"\"Look an order up.\"\"\"
    return {"order": order, "status": "shipped"}


model = ScriptedModel("smoke", [tools(call("lookup", {"order": "A1"})), text("A1 has shipped.")])
Agent(name="smoke", model=model.model, tools=[lookup])
"""

# Run with the virtualenv's Python: are the requirements the installed
# runwright declares, with the django extra, met (their own extras included)?
REQUIREMENTS = """
import json
from importlib import metadata

import django  # the extra's package, importable
from packaging.requirements import Requirement
from packaging.version import Version


def unmet(name, extras, seen):
    found = []
    for line in metadata.requires(name) or ():
        req = Requirement(line)
        wanted = req.marker is None or any(
            req.marker.evaluate({"extra": extra}) for extra in ("", *extras)
        )
        if not wanted or (req.name, frozenset(req.extras)) in seen:
            continue
        seen.add((req.name, frozenset(req.extras)))
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            found.append(f"{req} (not installed)")
            continue
        if not req.specifier.contains(Version(version), prereleases=True):
            found.append(f"{req} (installed: {version})")
        found += unmet(req.name, req.extras, seen)
    return found


def only_with(extra, line):
    marker = Requirement(line).marker
    return marker is not None and marker.evaluate({"extra": extra}) and not marker.evaluate(
        {"extra": ""}
    )


print(json.dumps({
    "unmet": unmet("runwright", {"django"}, set()),
    "django_extra": [line for line in metadata.requires("runwright") if only_with("django", line)],
    "django": django.__version__,
}))
"""


@pytest.fixture
def smoke_services(services: Services, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of the installed release's commands: an empty database
    of this test's own, a Redis of its own (leases in db 0, the broker in db 1),
    and agents in the project folder they start in."""
    redis = LocalRedis(tmp_path / "redis", free_port())
    redis.start()
    name = services.new_database(empty=True)
    try:
        yield {
            **outside_env(),
            "RUNWRIGHT_DATABASE_URL": services.database_url(name),
            "RUNWRIGHT_REDIS_URL": redis.url(0),
            "RUNWRIGHT_BROKER_URL": redis.url(1),
            "RUNWRIGHT_SECRET_KEY": "smoke:" + "s" * 40,
            "RUNWRIGHT_AGENTS": "smoke_agents",
            "RUNWRIGHT_HOME": str(tmp_path / "home"),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
    finally:
        redis.kill()
        services.drop_database(name)


def test_the_installed_release_sets_up_checks_itself_and_runs_an_agent(
    venv: Path, smoke_services: dict[str, str], tmp_path: Path
) -> None:
    began = time.monotonic()
    project = tmp_path / "shop"
    project.mkdir()
    (project / "smoke_agents.py").write_text(SMOKE_AGENTS)
    env = {**smoke_services, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    python, runwright = str(venv / "bin" / "python"), str(venv / "bin" / "runwright")

    where = _run([python, "-c", "import runner; print(runner.__version__, runner.__file__)"],
                 project, env, 60).split()  # fmt: skip
    assert where[0] == VERSION, where
    assert where[1].startswith(str(venv)) and str(ROOT) not in where[1], where  # the wheel's
    assert _run([runwright, "--version"], project, env, 60) == f"runwright, version {VERSION}\n"

    # The requirements the wheel declares, with the django extra, are met.
    _run([python, "-m", "pip", "check"], project, env, 120)
    checked = json.loads(_run([python, "-c", REQUIREMENTS], project, env, 60))
    assert checked["unmet"] == [], checked
    assert checked["django_extra"] == ['django>=5.0; extra == "django"'], checked

    # The README's two commands: the schema, then a worker (from the virtualenv).
    migrated = _run([runwright, "migrate"], project, env, 120)
    assert migrated.startswith(f"created the schema at {HEAD}"), migrated
    worker = Proc(
        "smoke-worker",
        [str(venv / "bin" / "celery"), "-A", "tasks", "worker", "-l", "INFO", "-n", "smoke@%h",
         "-c", "4", "--without-gossip", "--without-mingle"],
        env, tmp_path, cwd=project,
    )  # fmt: skip
    try:
        worker.wait_for(" ready.", timeout=90)
        _run([runwright, "tick"], project, env, 60)  # what beat would have done
        done = subprocess.run(
            [runwright, "doctor"], cwd=project, env=env, capture_output=True, text=True, timeout=120
        )
        report = done.stdout
        assert done.returncode == 0 and "FAIL" not in report, report + done.stderr[-2000:]
        for check in ("postgres", "schema", "redis", "broker", "beat", "workers", "agents"):
            assert re.search(rf"^{check}\s+ok\b", report, flags=re.M), (check, report)
        assert re.search(r"^workers\s+ok\s+1 seen: smoke@", report, flags=re.M), report
        assert re.search(r"^agents\s+ok\b.*smoke_agents", report, flags=re.M), report

        started = _run([runwright, "start", "smoke", "--payload", '{"order": "A1"}'],
                       project, env, 60)  # fmt: skip
        found = re.match(r"run (\S+) \(smoke\) is ", started)
        assert found, started
        run_id = found.group(1)
        _run([runwright, "watch", run_id, "--timeout", "60"], project, env, 90)
        shown = json.loads(_run([runwright, "show", run_id, "--json"], project, env, 60))
    finally:
        worker.stop()
    assert shown["run"]["status"] == "completed", shown["run"]
    assert shown["run"]["output"] == "A1 has shipped.", shown["run"]
    print(f"the installed release's smoke test: {time.monotonic() - began:.1f} s")


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
    env = outside_env()
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
