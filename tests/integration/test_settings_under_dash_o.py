"""The settings' checks hold under python -O, in a fresh interpreter (the rest
of the settings: tests/unit/test_settings.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.services import ROOT


def test_the_checks_hold_under_python_dash_o(tmp_path: Path) -> None:
    # `assert` disappears under -O; the configuration checks must not.
    code = (
        "from runner.core.engine.engine import Engine\n"
        "from store.errors import ConfigurationError\n"
        "try:\n"
        "    Engine.from_env(enqueue=None)\n"
        "except ConfigurationError as exc:\n"
        "    print('refused:', exc)\n"
    )
    env = {
        "PYTHONPATH": str(ROOT),
        "RUNWRIGHT_DATABASE_URL": "postgresql://nowhere/db",
        "RUNWRIGHT_HOME": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-O", "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert "refused: RUNWRIGHT_REDIS_URL is not set" in done.stdout, done.stderr
