"""``make demo`` wraps ``runwright demo``: run it from a fresh clone, with no
database or Redis in the environment, and read what it shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.services import ROOT

RUNWRIGHT = str(Path(sys.executable).with_name("runwright"))


def test_demo_from_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=60)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RUNWRIGHT_") and k not in ("PYTHONPATH",)
    }
    env["PYTHONPATH"] = str(clone)  # the clone's code, with this venv's packages
    try:
        done = subprocess.run(
            [RUNWRIGHT, "demo"], cwd=clone, env=env, capture_output=True, text=True, timeout=400
        )
        out = done.stdout
        assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
        assert "Starting the local stack" in out
        assert (clone / ".runwright" / "postgres" / "data" / "PG_VERSION").exists()
        assert '"title": "App crashes on start"' in out
        # The glossary's word for it (docs/concepts.md), not a word of the demo's own.
        assert "its trigger message, the first the model reads:" in out
        assert "-> waiting" in out
        assert "the notifier asked for approval of file_ticket" in out
        assert "$ runwright approve" in out and "is queued again" in out
        assert "tool  file_ticket" in out and "tickets filed by this run: 1" in out
        assert "killing worker A (SIGKILL) after" in out
        assert "completed by worker B" in out
        assert "each once" in out and "none repeated" in out
        assert "Left running: the local stack (started by the demo" in out
        assert "stop it with `runwright local down`" in out
        assert out.rstrip().endswith("Demo complete.")
        # The approval token went to the inbox, never to a log or the terminal.
        home = clone / ".runwright"
        tokens = [
            json.loads(line)["token"]
            for line in (home / "demo-inbox.jsonl").read_text().splitlines()
        ]
        assert tokens
        logs = "".join(p.read_text(errors="replace") for p in home.glob("demo-*.log"))
        assert "approval needed: runwright approve" in logs
        for token in tokens:
            assert token not in logs and token not in out
    finally:
        subprocess.run(
            [RUNWRIGHT, "local", "down"], cwd=clone, env=env, capture_output=True, timeout=60
        )
