"""MCP tools on real ``celery worker``s (issue 27's acceptance): a worker
SIGKILLed while an effect's call is in flight leaves the server with one
call at most and the journal saying unknown; the HTTP server restarted, and
the stdio server's process killed, while a run waits for an approval: the run
completes on new sessions; an HTTP server down when a run starts: the run
waits in ``queued`` and completes once it is back. Real Postgres, Redis and
workers; the MCP test server of tests/mcp_servers.py."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import tests.agents_mcp  # noqa: F401  (this process starts the runs by name)
from store.models import EffectStatus, RunStatus, StepKind
from tests.e2e.cluster import Cluster, wait_until
from tests.mcp_http import HttpServer, calls

AGENTS = "tests.agents,tests.agents_mcp"


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path)
    try:
        yield server
    finally:
        server.stop()


def stdio_servers(cluster: Cluster) -> list[psutil.Process]:
    """The stdio MCP servers this cluster's workers started: their
    descendants, not the servers of other tests running on the machine."""
    found = []
    for started in cluster.procs:
        try:
            descendants = psutil.Process(started.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for proc in descendants:
            try:
                cmdline = proc.cmdline()
            except psutil.NoSuchProcess:
                continue
            if "tests.mcp_servers" in cmdline and "http" not in cmdline:
                found.append(proc)
    return found


def settled(cluster: Cluster, run_id: str, status: RunStatus, timeout: float = 90) -> Any:
    engine = cluster.engine()
    return wait_until(
        lambda: (r := engine.get_run(run_id)).status is status and r,
        timeout,
        f"run {run_id} to be {status.value}",
        interval=0.2,
    )


def test_a_worker_killed_during_an_effects_call_leaves_one_call_and_an_unknown_outcome(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    env = {"RUNWRIGHT_AGENTS": AGENTS, "RUNWRIGHT_TEST_MCP_LOG": str(log)}
    first = cluster.worker("w1", **env)
    engine = cluster.engine()
    run = engine.start("mcp_slow_refund")
    wait_until(lambda: calls(log), 60, "the server to get the refund call", interval=0.1)
    first.signal(signal.SIGKILL)  # the call is in flight: the server answers in 4 s
    first.wait(10)
    cluster.worker("w2", **env)
    cluster.beat()
    done = settled(cluster, run.id, RunStatus.COMPLETED)
    assert [c["tool"] for c in calls(log)] == ["slow_refund"]  # never called again
    [journaled] = engine.effects(run.id)
    assert (journaled.tool, journaled.status) == ("tracker_slow_refund", EffectStatus.UNKNOWN)
    assert done.needs_attention
    assert calls(log)[0]["key"] == journaled.key == f"{run.id}:call_refund"


@pytest.mark.parametrize(
    "relisting",
    [{"RUNWRIGHT_TEST_MCP_BLOCK": "slow_refund"}, {"RUNWRIGHT_TEST_MCP_PLAIN": "slow_refund"}],
    ids=["gone", "read_only"],
)
def test_a_worker_killed_mid_effect_then_a_listing_without_it_leaves_one_call_and_unknown(
    cluster: Cluster, tmp_path: Path, relisting: dict[str, str]
) -> None:
    # The worker that recovers the run is offered the server's tools as a
    # deploy changed them: the refund is gone, or a plain tool. The journal
    # decides, not the listing (issue 48, item 3).
    log = tmp_path / "calls.jsonl"
    env = {"RUNWRIGHT_AGENTS": AGENTS, "RUNWRIGHT_TEST_MCP_LOG": str(log)}
    first = cluster.worker("w1", **env)
    engine = cluster.engine()
    run = engine.start("mcp_relisted_refund")
    wait_until(lambda: calls(log), 60, "the server to get the refund call", interval=0.1)
    first.signal(signal.SIGKILL)  # the call is in flight: the server answers in 4 s
    first.wait(10)
    cluster.worker("w2", **env, **relisting)
    cluster.beat()
    done = settled(cluster, run.id, RunStatus.COMPLETED)
    time.sleep(4.5)  # past the server's answer time: a second call would be logged
    assert [c["tool"] for c in calls(log)] == ["slow_refund"]  # never called again
    [journaled] = engine.effects(run.id)
    assert journaled.status is EffectStatus.UNKNOWN
    assert done.needs_attention


def test_the_http_server_restarted_while_a_run_waits_and_the_run_completes(
    cluster: Cluster, http_server: HttpServer
) -> None:
    http_server.start()
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, RUNWRIGHT_TEST_MCP_URL=http_server.url)
    engine = cluster.engine()
    run = engine.start("mcp_gated_http")
    waiting = settled(cluster, run.id, RunStatus.WAITING)
    assert [c["tool"] for c in calls(http_server.log)] == ["lookup"]
    http_server.stop()
    http_server.start()  # a new process: the worker's session is gone with the old one
    [pending] = [a for a in engine.approvals(waiting.id) if a.pending]
    engine.decide(pending.approval_id, True, trusted=True, by="ops")
    settled(cluster, run.id, RunStatus.COMPLETED)
    assert [c["tool"] for c in calls(http_server.log)] == ["lookup", "create_issue", "lookup"]


def test_the_stdio_servers_process_killed_while_a_run_waits_and_the_run_completes(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, RUNWRIGHT_TEST_MCP_LOG=str(log))
    engine = cluster.engine()
    run = engine.start("mcp_gated_stdio")
    waiting = settled(cluster, run.id, RunStatus.WAITING)
    [server] = stdio_servers(cluster)
    server.kill()
    server.wait(10)
    [pending] = [a for a in engine.approvals(waiting.id) if a.pending]
    engine.decide(pending.approval_id, True, trusted=True, by="ops")
    settled(cluster, run.id, RunStatus.COMPLETED)
    assert [c["tool"] for c in calls(log)] == ["lookup", "create_issue", "lookup"]
    assert [p.pid for p in stdio_servers(cluster)] != [server.pid]  # a new process served the rest


def test_a_server_down_when_the_run_starts_is_waited_for_in_queued(
    cluster: Cluster, http_server: HttpServer
) -> None:
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, RUNWRIGHT_TEST_MCP_URL=http_server.url)
    cluster.beat()
    engine = cluster.engine()
    run = engine.start("mcp_gated_http")  # the server is not up
    retrying = wait_until(
        lambda: (r := engine.get_run(run.id)).retry is not None and r, 60, "a retry"
    )
    assert retrying.status in (RunStatus.QUEUED, RunStatus.RUNNING)
    assert "MCP server 'tracker' cannot be reached" in (
        retrying.retry.error if retrying.retry else ""
    )
    time.sleep(20)  # down for 20 s in all
    assert engine.get_run(run.id).status is not RunStatus.FAILED
    http_server.start()
    settled(cluster, run.id, RunStatus.WAITING, timeout=60)  # it ran on, to its approval


def test_a_call_that_hangs_on_a_worker_is_cut_off_by_cancel(
    cluster: Cluster, tmp_path: Path
) -> None:
    log = tmp_path / "c"
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, RUNWRIGHT_TEST_MCP_LOG=str(log))
    engine = cluster.engine()
    run = engine.start("mcp_hang")
    wait_until(
        lambda: [c["tool"] for c in calls(log)] == ["slow"],
        60,
        "the server to get the call (it answers in a minute)",
        interval=0.1,
    )
    assert engine.get_run(run.id).status is RunStatus.RUNNING
    engine.cancel(run.id)
    settled(cluster, run.id, RunStatus.CANCELLED)
    # Cut off before the server answered: the call has no result.
    assert not [s for s in engine.steps(run.id) if s.kind is StepKind.TOOL]


def test_refused_credentials_fail_a_run_on_a_worker_mcp_auth_at_its_first_attempt(
    cluster: Cluster, http_server: HttpServer
) -> None:
    http_server.refuse()
    http_server.start()
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, RUNWRIGHT_TEST_MCP_URL=http_server.url)
    engine = cluster.engine()
    run = engine.start("mcp_lookup_http")
    failed = settled(cluster, run.id, RunStatus.FAILED)
    assert failed.error is not None and failed.error.code == "mcp_auth", failed.error
    assert "MCP server 'tracker' refused the credentials (HTTP 401)" in failed.error.message
    # The first attempt failed it: no retry was scheduled.
    assert failed.retry is not None and (failed.retry.attempts, failed.retry.at) == (1, None)
    assert calls(http_server.log) == []
