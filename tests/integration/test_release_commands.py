"""The release's commands, run as a user runs them (issue 49, item 5):
`runwright --version`, the standalone console in a fresh interpreter, `make
dist` in `make help`. Subprocesses: the integration tier (the rest of the
release's checks are unit tests, tests/unit/test_release.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.services import ROOT

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _make(*args: str) -> str:
    env = {**os.environ, "MAKEFLAGS": ""}
    done = subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_runwright_dash_dash_version() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("runwright")), "--version"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"runwright, version {VERSION}\n"


def test_the_standalone_console_needs_no_web_framework() -> None:
    # What the `console` extra stands for: the standalone console and its
    # server are the standard library's wsgiref and the core.
    code = (
        "import sys\n"
        "import runner.cli.console, runner.console.server, runner.console.standalone\n"
        "frameworks = ('flask', 'django', 'werkzeug', 'gunicorn', 'waitress')\n"
        "print(sorted(name for name in frameworks if name in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_make_dist_builds_with_the_standard_frontend_and_is_listed_in_help() -> None:
    # -n: the commands make would run, none run.
    commands = _make("-n", "dist").splitlines()
    assert any(re.fullmatch(r"\S*/python -m build --no-isolation --outdir dist \.", line)
               for line in commands), commands  # fmt: skip
    assert re.search(r"^\s+\S*dist\S*\s+\S", _make("help"), flags=re.M)
