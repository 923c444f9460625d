"""A process SIGKILLed after an effect ran and before its outcome was written
(issue 26, items 1 and 2, with real processes): a real worker recovers the run
(beat's tick finds the lapsed lease), finds the effect of unknown outcome,
logs the ERROR line and flags the run; `runwright resolve` clears the flag and
records who said what."""

from __future__ import annotations

import subprocess
import sys

from store.models import EffectOutcome, EffectStatus, RunStatus
from tests.e2e.cluster import Cluster, wait_until


def test_a_worker_killed_mid_effect_leaves_a_run_flagged_until_resolved(
    cluster: Cluster,
) -> None:
    engine = cluster.engine()
    run = engine.start("crash", {"ticket": "unknown outcome"})
    killed = subprocess.run(
        [sys.executable, "-m", "tests.proc", run.id],
        env={**cluster.env(), "RUNWRIGHT_TEST_FAULTS": "after_effect_call=kill"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]  # died right after the charge ran

    worker = cluster.worker("w1")
    cluster.beat()
    done = wait_until(
        lambda: (r := engine.get_run(run.id)).status is RunStatus.COMPLETED and r,
        60,
        "a worker to recover and finish the run",
    )
    assert done.needs_attention
    (unknown,) = engine.unknown_effects(run.id)
    assert (unknown.tool, unknown.status, unknown.input) == (
        "charge",
        EffectStatus.UNKNOWN,
        {"amount": 5},
    )
    errors = [line for line in worker.log().splitlines() if "ERROR" in line and run.id in line]
    assert len(errors) == 1 and "charge" in errors[0] and "needs a person" in errors[0], errors

    env = cluster.env()
    listed = subprocess.run(
        [sys.executable, "-m", "runner.cli", "runs", "--needs-attention"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.id in listed.stdout, listed.stderr[-2000:]
    resolved = subprocess.run(
        [sys.executable, "-m", "runner.cli", "resolve", run.id, unknown.call_id, "done",
         "--note", "the charge is in the ledger", "--by", "ops-ana"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr[-2000:]
    after = engine.get_run(run.id)
    assert not after.needs_attention
    (effect,) = engine.unknown_effects(run.id)
    assert (effect.resolved_outcome, effect.resolved_by) == (EffectOutcome.DONE, "ops-ana")
    assert effect.resolved_note == "the charge is in the ledger"


def test_an_effect_that_reconciles_itself_needs_nobody(cluster: Cluster) -> None:
    engine = cluster.engine()
    run = engine.start("reconciled", {"ticket": "reconcile"})
    killed = subprocess.run(
        [sys.executable, "-m", "tests.proc", run.id],
        env={**cluster.env(), "RUNWRIGHT_TEST_FAULTS": "after_effect_call=kill"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    cluster.worker("w1")
    cluster.beat()
    done = wait_until(
        lambda: (r := engine.get_run(run.id)).status is RunStatus.COMPLETED and r,
        60,
        "a worker to recover and finish the run",
    )
    assert not done.needs_attention and engine.unknown_effects(run.id) == []
    (effect,) = engine.effects(run.id)
    assert effect.status is EffectStatus.COMPLETED and effect.output["found"] is True
    tool_step = next(s for s in engine.steps(run.id) if s.name == "charge_checked")
    assert tool_step.output["found"] is True  # the model was told what really happened
