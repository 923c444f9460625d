"""Set-up that fails loudly, with real ``celery`` processes (issue 10)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.e2e.cluster import Cluster, Proc, wait_until


def test_a_prefork_worker_refuses_to_start_with_one_line(cluster: Cluster) -> None:
    worker = cluster.worker("prefork", wait=False, RUNWRIGHT_WORKER_POOL="prefork")
    code = worker.wait(90)
    assert code != 0
    log = worker.log()
    assert "the prefork pool cannot drain running agents" in log, log[-2000:]
    assert "Traceback" not in log, log[-2000:]


def test_beat_starts_in_a_fresh_directory_with_external_services(
    cluster: Cluster, tmp_path: Path
) -> None:
    home = tmp_path / "fresh" / "never-created"
    beat = Proc(
        "beat-fresh",
        [sys.executable, "-m", "celery", "-A", "tasks", "beat", "-l", "INFO"],
        cluster.env(RUNWRIGHT_HOME=str(home)),
        cluster.workdir,
    )
    cluster.procs.append(beat)
    beat.wait_for("beat: Starting", timeout=60)
    wait_until(
        lambda: (home / "celerybeat-schedule").exists() or any(home.glob("celerybeat-schedule*")),
        30,
        "the schedule file",
    )
    time.sleep(1.5)  # a tick or two
    assert beat.popen.poll() is None, beat.log()[-2000:]
    assert "FileNotFoundError" not in beat.log()
