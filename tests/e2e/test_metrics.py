"""``/metrics`` of a real worker (issue 13, acceptance 2): scraped over HTTP
during and after 20 runs that end in different ways, it shows the runs by
status, steps by kind, tokens and call latencies that the test counts
independently from the store and the scripted models' journal; then the
approval backlog of a waiting run and the age of the last tick."""

from __future__ import annotations

import json
import math
import socket
import struct
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families

import tests.agents_metrics  # noqa: F401  (the agents the worker runs, known here too)
from runner.core.coordination.leases import LAST_TICK_KEY
from store.local import free_port
from store.models import RunStatus, StepKind, utcnow
from tests.e2e.cluster import Cluster, wait_until

AGENTS = "tests.agents,tests.agents_metrics"
# The runs: agent -> how many, and what each ends as.
PLAN = {
    "five": (10, RunStatus.COMPLETED),
    "metrics-budget": (4, RunStatus.FAILED),
    "metrics-refused": (4, RunStatus.FAILED),
    "metrics-flaky": (2, RunStatus.COMPLETED),
}
MODELS = {agent: f"scripted/{agent}" for agent in PLAN}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int, host: str = "127.0.0.1") -> Samples:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        body = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def get(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 for a series the worker never wrote."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over the series that have ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def scrape_until(
    port: int, ready: Callable[[Samples], bool], what: str, timeout: float = 30
) -> Samples:
    """The first scrape for which ``ready`` holds."""
    found: list[Samples] = []

    def check() -> bool:
        found[:] = [scrape(port)]
        return ready(found[0])

    wait_until(check, timeout, what, interval=0.02)
    return found[0]


def settles(samples: Samples) -> float:
    """Executions that left a run completed or failed."""
    return total(samples, "runwright_runs_settled_total", status="completed") + total(
        samples, "runwright_runs_settled_total", status="failed"
    )


def journal(workdir: Path) -> list[dict[str, Any]]:
    path = workdir / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_a_workers_metrics_match_its_runs(cluster: Cluster) -> None:
    port = free_port()
    cluster.worker(
        "metrics",
        concurrency=8,
        RUNWRIGHT_AGENTS=AGENTS,
        RUNWRIGHT_METRICS_PORT=str(port),
        RUNWRIGHT_TEST_MODEL_LATENCY="0.3",
    )
    engine = cluster.engine()
    before = scrape(port)
    assert total(before, "runwright_runs_settled_total") == 0
    assert get(before, "runwright_last_tick_age_seconds") == math.inf  # no tick ever
    assert get(before, "runwright_metrics_source_up", source="store") == 1

    runs = [
        engine.start(agent, {"n": f"{agent}-{i}"})
        for agent, (count, _) in PLAN.items()
        for i in range(count)
    ]
    assert len(runs) == 20

    # During: executions in flight, at most one per worker thread.
    during = scrape_until(
        port, lambda s: total(s, "runwright_executions_in_flight") > 0, "an execution", 60
    )
    assert total(during, "runwright_executions_in_flight") <= 8
    assert settles(during) < 20

    wait_until(
        lambda: all(engine.get_run(r.id).status.ended for r in runs), 180, "20 runs to settle"
    )
    after = scrape_until(port, lambda s: settles(s) == 20, "the metrics of the 20 settles")
    assert total(after, "runwright_executions_in_flight") == 0

    # Independently: the store's runs and steps, the scripted models' journal.
    done = [engine.get_run(r.id) for r in runs]
    assert Counter((r.agent, r.status) for r in done) == Counter(
        {(agent, status): count for agent, (count, status) in PLAN.items()}
    )
    calls = Counter(entry["model"] for entry in journal(cluster.workdir))
    failed_calls = Counter(e["model"] for e in journal(cluster.workdir) if e["error"])
    for agent in PLAN:
        mine = [r for r in done if r.agent == agent]
        steps = [s for r in mine for s in engine.steps(r.id)]
        llm = sum(s.kind is StepKind.LLM for s in steps)
        tool = sum(s.kind is StepKind.TOOL for s in steps)
        model = MODELS[agent]
        for status in (RunStatus.COMPLETED, RunStatus.FAILED):
            expected = sum(r.status is status for r in mine)
            settled = get(after, "runwright_runs_settled_total", agent=agent, status=status.value)
            assert settled == expected, (agent, status)
        assert get(after, "runwright_steps_total", agent=agent, kind="llm") == llm, agent
        assert get(after, "runwright_steps_total", agent=agent, kind="tool") == tool, agent
        tokens = {"agent": agent, "model": model}
        input_tokens = sum(r.usage.input_tokens for r in mine)
        output_tokens = sum(r.usage.output_tokens for r in mine)
        assert (input_tokens, output_tokens) == (10 * llm, 5 * llm)  # (10, 5) per call
        assert get(after, "runwright_tokens_total", **tokens, direction="input") == input_tokens
        assert get(after, "runwright_tokens_total", **tokens, direction="output") == output_tokens
        # Every model call is timed, the failed ones too; every tool call is.
        model_calls = get(after, "runwright_model_call_duration_seconds_count", **tokens)
        assert model_calls == calls[agent] == llm + failed_calls[agent], agent
        assert model_calls == get(
            after, "runwright_model_call_duration_seconds_bucket", **tokens, le="+Inf"
        )
        # Each reply waits 0.3 s: none is in the buckets below it.
        assert get(after, "runwright_model_call_duration_seconds_bucket", **tokens, le="0.25") == 0
        tool_calls = get(
            after,
            "runwright_tool_call_duration_seconds_count",
            agent=agent,
            tool="lookup",
            status="ok",
        )
        assert tool_calls == tool, agent
    flaky_failures = failed_calls["metrics-flaky"]
    assert flaky_failures == 2  # one failed first call per run, each retried durably
    assert get(after, "runwright_retries_scheduled_total", agent="metrics-flaky") == 2
    assert get(after, "runwright_runs_paused_total", agent="metrics-flaky", status="queued") == 2
    assert get(after, "runwright_runs_settled_total", agent="metrics-flaky", status="queued") == 0
    assert total(after, "runwright_retries_scheduled_total") == 2
    assert total(after, "runwright_takeovers_total") == 0
    assert total(after, "runwright_lease_losses_total") == 0
    assert {r.error.code for r in done if r.error is not None} == {
        "budget_exceeded",
        "model_error",
    }

    # A waiting run: the approval backlog, read from Postgres at scrape time.
    waiting = engine.start("approve", {"n": "approve-0"})
    wait_until(lambda: engine.get_run(waiting.id).status is RunStatus.WAITING, 60, "the approval")
    [approval] = engine.approvals(waiting.id)
    pending = scrape_until(
        port, lambda s: get(s, "runwright_approvals_pending") == 1, "the pending approval"
    )
    age = get(pending, "runwright_approval_oldest_pending_age_seconds")
    assert 0 <= age <= (utcnow() - approval.created_at).total_seconds() + 1
    engine.decide(approval.approval_id, True, token=engine.token(approval.approval_id))
    wait_until(
        lambda: engine.get_run(waiting.id).status is RunStatus.COMPLETED, 60, "the approved run"
    )
    cleared = scrape_until(
        port, lambda s: get(s, "runwright_approvals_pending") == 0, "the backlog to clear"
    )
    assert get(cleared, "runwright_approval_oldest_pending_age_seconds") == 0
    # A pause for a person is counted as a pause, not a settle.
    assert get(cleared, "runwright_runs_paused_total", agent="approve", status="waiting") == 1
    assert get(cleared, "runwright_runs_settled_total", agent="approve", status="waiting") == 0

    # A tick, run by the worker: timed, and its age read from Redis.
    client = Celery("metrics-test", broker=cluster.broker_url)
    client.send_task("runwright.tick", queue=cluster.queue)
    ticked = scrape_until(
        port, lambda s: get(s, "runwright_tick_duration_seconds_count") == 1, "the tick"
    )
    tick_age = get(ticked, "runwright_last_tick_age_seconds")
    assert 0 <= tick_age < 30
    assert engine.leases is not None and (last := engine.leases.last_tick()) is not None
    # No older than the mark is now (a second for the hosts' clocks).
    assert tick_age <= time.time() - last + 1
    # A Redis restart loses Redis's mark (here deleted from the cluster's own
    # Redis): the age is then read from the mark tick() keeps in Postgres.
    engine.leases.redis.delete(LAST_TICK_KEY)
    before = time.time()
    lost = scrape(port)
    after = time.time()
    # The mark's age as the scrape read it: between its age before the scrape
    # and after (a second either way for the hosts' clocks).
    lost_age = get(lost, "runwright_last_tick_age_seconds")
    assert before - last - 1 <= lost_age <= after - last + 1

    # No label anywhere holds a run id or a tool call id.
    everything = scrape(port)
    ids = {r.id for r in [*runs, waiting]}
    ids |= {s.tool_call_id for r in [*runs, waiting] for s in engine.steps(r.id) if s.tool_call_id}
    values = {v for _, labels in everything for _, v in labels}
    assert len(ids) > 20 and {"five", "approve", "lookup"} <= values
    assert [v for v in values if any(i in v for i in ids)] == []
    engine.close()


def listening(port: int) -> set[str]:
    """The IPv4 addresses a socket of this machine listens on at ``port``, read
    from the kernel's table (/proc/net/tcp: address and port in hex, the address
    a 32-bit number in host order; state 0A is LISTEN)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, _, hex_port = fields[1].partition(":")
        if fields[3] == "0A" and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(struct.pack("=I", int(address, 16))))
    return found


def outward_address() -> str | None:
    """This machine's address on its default route, if it has one that is not
    loopback (connecting a UDP socket sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_the_endpoint_listens_on_loopback_unless_told_otherwise(cluster: Cluster) -> None:
    """Issue 23: by default a worker's /metrics listens on 127.0.0.1 only;
    ``RUNWRIGHT_METRICS_HOST=0.0.0.0`` opens it to a scrape from another host."""
    local, everywhere = free_port(), free_port()
    cluster.worker("loopback", RUNWRIGHT_METRICS_PORT=str(local))
    cluster.worker(
        "everywhere", RUNWRIGHT_METRICS_PORT=str(everywhere), RUNWRIGHT_METRICS_HOST="0.0.0.0"
    )
    assert listening(local) == {"127.0.0.1"}
    assert listening(everywhere) == {"0.0.0.0"}
    assert get(scrape(local), "runwright_metrics_source_up", source="store") == 1
    assert get(scrape(everywhere), "runwright_metrics_source_up", source="store") == 1

    outward = outward_address()
    if outward is not None:  # a scrape from another host arrives on this address
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((outward, local), timeout=5).close()
        assert get(scrape(everywhere, outward), "runwright_metrics_source_up", source="store") == 1
