"""Crash recovery: a real process is killed at each fault point, then a new
process resumes the run. Model calls are counted through the scripted model's
journal and tool executions through the tools' own log, across processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner import Engine
from store.models import EffectStatus, RunStatus, StepKind, Usage, utcnow
from tests.agents import read_effect_log
from tests.helpers import journaled_effect


def execute_in_process(
    run_id: str, env: dict[str, str], faults: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.proc", run_id],
        env={**env, "RUNWRIGHT_TEST_FAULTS": faults},
        capture_output=True,
        text=True,
        timeout=120,
    )


def wait_until_claim_lapses(engine: Engine, run_id: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = engine.get_run(run_id)
        assert engine.leases is not None
        if (run.claim is None or run.claim.expires_at < utcnow()) and engine.leases.holder(
            run_id
        ) is None:
            return
        time.sleep(0.05)
    raise AssertionError("the dead process's claim did not lapse")


def crash_then_resume(
    engine: Engine, env: dict[str, str], faults: str
) -> tuple[str, list[dict[str, Any]]]:
    run = engine.start("crash", {"ticket": faults})
    killed = execute_in_process(run.id, env, faults)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert f"RUNWRIGHT_FAULT {faults.split('=')[0].split('@')[0]}" in killed.stderr
    before = read_effect_log(env["RUNWRIGHT_TEST_EFFECT_LOG"])
    wait_until_claim_lapses(engine, run.id)
    resumed = execute_in_process(run.id, env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "RESULT completed" in resumed.stdout
    return run.id, before


def journal(env: dict[str, str]) -> list[dict[str, Any]]:
    return read_effect_log(env["RUNWRIGHT_SCRIPTED_JOURNAL"])


def effects_of(env: dict[str, str], tool: str) -> list[dict[str, Any]]:
    return [e for e in read_effect_log(env["RUNWRIGHT_TEST_EFFECT_LOG"]) if e["tool"] == tool]


def llm_calls(engine: Engine, run_id: str, index: int) -> list[dict[str, Any]]:
    step = next(s for s in engine.steps(run_id) if s.kind is StepKind.LLM and s.index == index)
    return list(step.output["message"]["tool_calls"])


def test_kill_after_w1_does_not_call_the_model_again(
    engine: Engine, proc_env: dict[str, str]
) -> None:
    run_id, before = crash_then_resume(engine, proc_env, "after_journal=kill")
    assert before == []  # killed before any tool ran
    steps_called = [entry["step"] for entry in journal(proc_env)]
    assert steps_called == [1, 2, 3]  # step 1 was paid for once
    run = engine.get_run(run_id)
    assert run.status is RunStatus.COMPLETED and run.usage == Usage(30, 15)
    checkpoint = engine.checkpoint(run_id)
    assert checkpoint is not None
    assert checkpoint.messages[1]["tool_calls"] == llm_calls(engine, run_id, 1)  # ids unchanged
    assert len(effects_of(proc_env, "lookup")) == 1
    assert len(effects_of(proc_env, "charge")) == 1


def test_unsaved_plain_tool_reruns_and_completed_effect_is_reused(
    engine: Engine, proc_env: dict[str, str]
) -> None:
    run_id, before = crash_then_resume(engine, proc_env, "after_effect_complete=kill")
    assert [e["tool"] for e in before] == ["lookup", "charge"]
    assert len(effects_of(proc_env, "lookup")) == 2  # its step was not saved: it ran again
    charges = effects_of(proc_env, "charge")
    assert len(charges) == 1  # completed effect: never again
    charge_call = llm_calls(engine, run_id, 1)[1]
    assert charges[0]["key"] == f"{run_id}:{charge_call['id']}"
    checkpoint = engine.checkpoint(run_id)
    assert checkpoint is not None
    result = next(m for m in checkpoint.messages if m.get("tool_call_id") == charge_call["id"])
    assert '"charged": 5' in result["content"]  # the recorded result, reused
    assert [entry["step"] for entry in journal(proc_env)] == [1, 2, 3]


def test_started_effect_is_not_rerun_by_default(engine: Engine, proc_env: dict[str, str]) -> None:
    run_id, _before = crash_then_resume(engine, proc_env, "after_effect_start=kill")
    assert effects_of(proc_env, "charge") == []  # started, then the process died
    charge_call = llm_calls(engine, run_id, 1)[1]
    effect = journaled_effect(engine.store, run_id, f"{run_id}:{charge_call['id']}")
    # The execution that found it started marked it of unknown outcome, for a person.
    assert effect is not None and effect.status is EffectStatus.UNKNOWN and effect.unresolved
    checkpoint = engine.checkpoint(run_id)
    assert checkpoint is not None
    result = next(m for m in checkpoint.messages if m.get("tool_call_id") == charge_call["id"])
    assert "outcome unknown" in result["content"]
    done = engine.get_run(run_id)
    assert done.status is RunStatus.COMPLETED and done.needs_attention


def test_started_at_least_once_effect_reruns_with_the_same_key(
    engine: Engine, proc_env: dict[str, str]
) -> None:
    run_id, before = crash_then_resume(engine, proc_env, "after_effect_start@2=kill")
    assert [e["tool"] for e in before] == ["lookup", "charge"]
    refunds = effects_of(proc_env, "refund")
    assert len(refunds) == 1
    refund_call = llm_calls(engine, run_id, 2)[0]
    key = f"{run_id}:{refund_call['id']}"
    assert refunds[0]["key"] == key
    effect = journaled_effect(engine.store, run_id, key)
    assert effect is not None and effect.status is EffectStatus.COMPLETED and effect.attempts == 2
    assert len(effects_of(proc_env, "charge")) == 1


def test_kill_after_w2_repeats_nothing_of_that_step(
    engine: Engine, proc_env: dict[str, str]
) -> None:
    run_id, before = crash_then_resume(engine, proc_env, "after_commit=kill")
    assert [e["tool"] for e in before] == ["lookup", "charge"]
    assert len(effects_of(proc_env, "lookup")) == 1
    assert len(effects_of(proc_env, "charge")) == 1
    assert [entry["step"] for entry in journal(proc_env)] == [1, 2, 3]
    steps = engine.steps(run_id)
    assert [(s.kind, s.index) for s in steps] == [
        (StepKind.LLM, 1),
        (StepKind.TOOL, 1),
        (StepKind.TOOL, 1),
        (StepKind.LLM, 2),
        (StepKind.TOOL, 2),
        (StepKind.LLM, 3),
    ]


@pytest.fixture(autouse=True)
def _fresh_logs(proc_env: dict[str, str]) -> None:
    for key in ("RUNWRIGHT_SCRIPTED_JOURNAL", "RUNWRIGHT_TEST_EFFECT_LOG"):
        Path(proc_env[key]).unlink(missing_ok=True)
