"""A rolling deploy with runs waiting on approvals (docs/deploying.md), on real
``celery worker`` processes: two workers run version a of an agent module, a
third starts with version b (a tool renamed, another with a new required
parameter, the instructions changed), and the version-a workers stop. Each
agent's ``on_new_version`` decides what its runs do; no effect runs twice."""

from __future__ import annotations

import importlib.util
import json
import signal
import textwrap
from pathlib import Path
from typing import Any

from runner import Engine
from runner.core import versions
from store.events import EventType
from store.models import RunStatus
from tests.agents import read_effect_log
from tests.e2e.clirun import rw
from tests.e2e.cluster import Cluster, Proc, wait_until
from tests.services import ROOT

# One agent module, as a team deploys it: VERSION "a", then "b".
MODULE = '''
from runner import Agent, effect, tool
from runner.testing import ScriptedModel, call, text, tools
from tests.agents import log_effect

VERSION = {version!r}


@effect
def refund(order: str, idempotency_key: str) -> str:
    """Refund an order."""
    log_effect("refund", key=idempotency_key, version=VERSION)
    return f"refunded {{order}}"


@tool
def {lookup}(order: str) -> str:
    """Look an order up."""
    return f"{{order}}: shipped"


@tool
def notify(order: str{channel}) -> str:
    """Tell the customer."""
    return "told"


def script(request):
    if request.step == 1:
        return tools(call("refund", {{"order": "A-1"}}))
    return text(f"done on {{VERSION}}")


for name, policy in (
    ("deploy-continue", "continue"),
    ("deploy-pin", "pin"),
    ("deploy-pin-moved", "pin"),
    ("deploy-fail", "fail"),
):
    Agent(
        name=name,
        model=ScriptedModel(name, script).model,
        instructions={instructions!r},
        tools=[refund, {lookup}, notify],
        approvals={{"refund": True}},
        on_new_version=policy,
        version=VERSION,
    )
'''

AGENTS = ("deploy-continue", "deploy-pin", "deploy-pin-moved", "deploy-fail")
RUNS_EACH = 2


def _module(workdir: Path, version: str) -> Path:
    folder = workdir / f"version-{version}"
    folder.mkdir()
    b = version == "b"
    (folder / "deploy_agents.py").write_text(
        textwrap.dedent(
            MODULE.format(
                version=version,
                lookup="find_order" if b else "lookup",
                channel=", channel: str" if b else "",
                instructions="Refund, then tell the customer." if b else "Refund.",
            )
        )
    )
    return folder


def _load_here(folder: Path) -> None:
    """Load the module in this process, as the web app that starts runs does."""
    spec = importlib.util.spec_from_file_location("deploy_agents", folder / "deploy_agents.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _worker(cluster: Cluster, name: str, folder: Path) -> Proc:
    return cluster.worker(
        name,
        concurrency=4,
        PYTHONPATH=f"{folder}:{ROOT}",
        RUNWRIGHT_AGENTS="tests.agents,deploy_agents",
    )


def _line(cluster: Cluster, agent: str, label: str) -> dict[str, Any]:
    """Version ``label`` of ``agent`` as ``runwright versions --json`` lists it."""
    done = rw(cluster.env(), "versions", "--agent", agent, "--json")
    [found] = [v for v in json.loads(done.stdout)["versions"] if v["label"] == label]
    return dict(found)


def _ended(engine: Engine, run_ids: list[str], what: str, timeout: float = 90) -> None:
    wait_until(lambda: all(engine.get_run(r).status.ended for r in run_ids), timeout, what)


def test_a_rolling_deploy_with_waiting_runs_follows_each_agents_version_policy(
    cluster: Cluster,
) -> None:
    folder_a, folder_b = _module(cluster.workdir, "a"), _module(cluster.workdir, "b")
    old = [_worker(cluster, "w1", folder_a), _worker(cluster, "w2", folder_a)]
    cluster.beat()
    engine = cluster.engine()
    _load_here(folder_a)  # the web app that starts the runs runs version a too
    runs = {agent: [engine.start(agent, {"n": i}).id for i in range(RUNS_EACH)] for agent in AGENTS}
    every = [run_id for ids in runs.values() for run_id in ids]
    wait_until(
        lambda: all(engine.get_run(r).status is RunStatus.WAITING for r in every),
        60,
        "every run to wait for its approval on version a",
    )
    version_a = {agent: engine.get_run(runs[agent][0]).version for agent in AGENTS}
    line = _line(cluster, "deploy-pin", "a")
    assert (line["waiting"], line["running"], line["parked"]) == (RUNS_EACH, 0, 0)
    assert sorted(w.split("@")[0] for w in line["workers"]) == ["w1", "w2"]

    # The deploy: version b starts, the version-a workers stop.
    new = _worker(cluster, "w3", folder_b)
    for proc in old:
        proc.signal(signal.SIGTERM)
    for proc in old:
        assert proc.wait(30) == 0
    for agent in AGENTS:  # a person approves every waiting refund
        for run_id in runs[agent]:
            [approval] = [a for a in engine.approvals(run_id) if a.pending]
            engine.decide(approval.approval_id, True, "ok", trusted=True, by="ana")

    # continue: on b, the move recorded with what changed.
    _ended(engine, runs["deploy-continue"], "the continue runs to end on b")
    for run_id in runs["deploy-continue"]:
        run = engine.get_run(run_id)
        assert run.status is RunStatus.COMPLETED and run.output == "done on b"
        assert run.started_version == version_a["deploy-continue"] != run.version
        [moved] = [e.data for e in engine.store.events(run_id) if e.type is EventType.VERSION]
        assert moved["from"] == version_a["deploy-continue"] and moved["to"] == run.version
        assert {
            "label: a → b",
            "instructions changed",
            "tool lookup renamed to find_order",
            "tool notify: parameter channel added (required)",
        } <= set(moved["changes"])

    # fail: ended version_changed; a retry runs it on b.
    _ended(engine, runs["deploy-fail"], "the fail runs to fail")
    for run_id in runs["deploy-fail"]:
        failed = engine.get_run(run_id)
        assert failed.status is RunStatus.FAILED
        assert failed.error is not None and failed.error.code == "version_changed"
        engine.retry(run_id)
    _ended(engine, runs["deploy-fail"], "the retried runs to end on b")
    assert {engine.get_run(r).output for r in runs["deploy-fail"]} == {"done on b"}

    # pin: they wait for a worker of version a, never failed for it.
    pinned = runs["deploy-pin"] + runs["deploy-pin-moved"]
    wait_until(
        lambda: all(versions.waiting_for(engine.get_run(r).parked_key) is not None for r in pinned),
        60,
        "the pinned runs to wait for a worker of version a",
    )
    line = _line(cluster, "deploy-pin", "a")
    assert line["parked"] == RUNS_EACH and line["workers"] == []
    assert _line(cluster, "deploy-pin", "b")["current"]
    assert all(engine.get_run(r).status is RunStatus.QUEUED for r in pinned)

    # An operator moves one agent's pinned runs to b: one event each; they run on b.
    done = rw(
        cluster.env(),
        "runs", "upgrade", "--agent", "deploy-pin-moved", "--from", "a", "--to", "b",
        "--by", "ops", "--json",
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert sorted(report["moved"]) == sorted(runs["deploy-pin-moved"])
    assert report["refused"] == []
    _ended(engine, runs["deploy-pin-moved"], "the moved runs to end on b")
    for run_id in runs["deploy-pin-moved"]:
        run = engine.get_run(run_id)
        assert run.status is RunStatus.COMPLETED and run.output == "done on b"
        [moved] = [e.data for e in engine.store.events(run_id) if e.type is EventType.VERSION]
        assert moved["by"] == "ops"

    # A version-a worker starts again: the other pinned runs complete on it.
    _worker(cluster, "w4", folder_a)
    workers = engine.workers() or {}
    [w4] = [w for name, w in workers.items() if name.startswith("w4@")]
    assert versions.queue_for(cluster.queue, version_a["deploy-pin"]) in w4.queues
    assert versions.queue_for(cluster.queue, version_a["deploy-continue"]) not in w4.queues
    _ended(engine, runs["deploy-pin"], "the pinned runs to end on a worker of version a")
    for run_id in runs["deploy-pin"]:
        run = engine.get_run(run_id)
        assert run.status is RunStatus.COMPLETED and run.output == "done on a"
        assert run.version == version_a["deploy-pin"]
    line = _line(cluster, "deploy-pin", "a")
    counts = [line[k] for k in ("running", "queued", "parked", "waiting")]
    assert counts == [0, 0, 0, 0] and [w.split("@")[0] for w in line["workers"]] == ["w4"]

    # No effect ran twice: one refund per run, each under its own key.
    refunds = [
        e for e in read_effect_log(str(cluster.workdir / "effects.jsonl")) if e["tool"] == "refund"
    ]
    assert sorted(e["key"].split(":")[0] for e in refunds) == sorted(every)
    assert new.popen.poll() is None
