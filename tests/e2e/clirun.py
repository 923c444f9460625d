"""Running the real ``runwright`` entry point from tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from runner.core.settings import Settings
from tests.services import ROOT

RUNWRIGHT = str(Path(sys.executable).with_name("runwright"))


def make_cli_env(
    database_url: str, redis_url: str, tmp_path: Path, settings: Settings
) -> dict[str, str]:
    """The environment of a ``runwright`` process that works on this test's
    services, signing with the test engine's key (``settings``)."""
    assert settings.secret_key
    broker_db = int(redis_url.rsplit("/", 1)[1])
    return {
        **os.environ,
        "RUNWRIGHT_DATABASE_URL": database_url,
        "RUNWRIGHT_REDIS_URL": redis_url,
        # Messages the commands enqueue land in a database nothing consumes.
        "RUNWRIGHT_BROKER_URL": redis_url.rsplit("/", 1)[0] + f"/{broker_db}",
        "RUNWRIGHT_AGENTS": "tests.agents",
        "RUNWRIGHT_SECRET_KEY": settings.secret_key,
        "RUNWRIGHT_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(ROOT),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }


def rw(env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``runwright ARGS``. A str argument with lone surrogates reaches the
    process as the raw bytes they escape (``os.fsencode``), as a shell would
    pass bytes that are not UTF-8."""
    done = subprocess.run(
        [RUNWRIGHT, *args], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def refused(env: dict[str, str], *args: str) -> str:
    """The one line a refused command prints (it exits 1, without a traceback)."""
    done = rw(env, *args, ok=False)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    return lines[0]


def started_id(output: str) -> str:
    match = re.match(r"run (\S+) \((\w+)\) is (\w+)", output.strip())
    assert match, output
    return match.group(1)
