"""Set-up that fails loudly, with real ``celery`` processes (issue 10)."""

from __future__ import annotations

from tests.e2e.cluster import Cluster


def test_a_prefork_worker_refuses_to_start_with_one_line(cluster: Cluster) -> None:
    worker = cluster.worker("prefork", wait=False, RUNWRIGHT_WORKER_POOL="prefork")
    code = worker.wait(90)
    assert code != 0
    log = worker.log()
    assert "the prefork pool cannot drain running agents" in log, log[-2000:]
    assert "Traceback" not in log, log[-2000:]
