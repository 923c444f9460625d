"""Why a run is where it is (runner/core/engine/explain.py), and the workers'
records it reads (store/workers.py): each status that does not explain itself
gets one sentence, and a record written by anything that reaches Redis reads
as a record or as nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runner.core.engine.explain import explain
from store.models import Interruption, RetryWait, Run, RunStatus, TriggerEnvelope, Usage, WaitPoint
from store.workers import WorkerInfo, serving, unserved, worker_of

NOW = datetime(2026, 12, 1, 20, 0, 0, tzinfo=UTC)


def run(status: RunStatus, **fields: Any) -> Run:
    trigger: Any = TriggerEnvelope.model_construct()
    return Run("r1", "triage", status, trigger, Usage(), NOW, NOW, **fields)


TRIAGE = WorkerInfo("w1@h", seen_at=1.0, agents=("triage", "billing"))
OTHER = WorkerInfo("w2@h", seen_at=1.0, agents=("billing",))


def test_a_queued_run_says_whether_any_live_worker_has_its_agent() -> None:
    queued = run(RunStatus.QUEUED, enqueued_at=NOW)
    assert explain(queued, {"w2@h": OTHER}) == (
        "since 2026-12-01 20:00:00 UTC, waiting for a worker that has agent 'triage': "
        "none of the 1 live worker(s) has it"
    )
    assert explain(queued, {}) == (
        "since 2026-12-01 20:00:00 UTC, waiting for a worker that has agent 'triage': "
        "no worker is live"
    )
    assert explain(queued, {"w1@h": TRIAGE, "w2@h": OTHER}) == (
        "since 2026-12-01 20:00:00 UTC, waiting for a free worker "
        "(1 live worker(s) have agent 'triage')"
    )
    unknown = explain(queued, None)
    assert unknown is not None and "Redis is unreachable" in unknown


def test_a_pinned_run_says_which_version_s_worker_it_waits_for() -> None:
    until = NOW + timedelta(seconds=60)
    pinned = run(RunStatus.QUEUED, parked_key="version:triage:3f9a1c2b7d10", parked_until=until)
    assert explain(pinned, {"w1@h": TRIAGE}) == (
        "waiting for a worker of version 3f9a1c2b7d10 of 'triage' (the agent pins its runs): "
        "none of the 1 live worker(s) runs it; `runwright runs upgrade --agent triage --from "
        "3f9a1c2b7d10` moves it to the current one"
    )
    old = WorkerInfo(
        "w3@h", seen_at=1.0, agents=("triage",), agent_versions={"triage": "3f9a1c2b7d10"}
    )
    assert explain(pinned, {"w1@h": TRIAGE, "w3@h": old}) == (
        "waiting for a worker of version 3f9a1c2b7d10 of 'triage' (the agent pins its runs); "
        "sent to its queue, which 1 live worker(s) of that version take"
    )
    unknown = explain(pinned, None)
    assert unknown is not None and unknown.endswith("Redis is unreachable")
    # Parked on a limit, it still says the limit.
    limited = run(RunStatus.QUEUED, parked_key="openai/gpt-4o", parked_until=until)
    assert explain(limited, {}) is not None
    assert "rate_limit on 'openai/gpt-4o'" in str(explain(limited, {}))


def test_a_queued_run_waiting_to_retry_says_which_attempt_when_and_after_what() -> None:
    wait = RetryWait(2, NOW, "RateLimitError: slow down", at=NOW + timedelta(seconds=30))
    queued = replace(run(RunStatus.QUEUED), retry=wait)
    assert explain(queued, {"w1@h": TRIAGE}) == (
        "waiting to retry its model step: attempt 3 at 2026-12-01 20:00:30 UTC, "
        "after RateLimitError: slow down"
    )


def test_a_queued_run_behind_its_concurrency_key_says_so() -> None:
    keyed = run(RunStatus.QUEUED, concurrency_key="customer-7")
    said = explain(keyed, {"w1@h": TRIAGE})
    assert said is not None and said.endswith(
        "runs with key 'customer-7' run one at a time, oldest first"
    )


def test_an_interrupted_run_says_why_its_execution_gave_it_back() -> None:
    missing = run(
        RunStatus.INTERRUPTED,
        interrupted_reason=Interruption.AGENT_MISSING,
        interrupted_by="old@h:41:abc",
        agent_missing_since=NOW,
    )
    assert explain(missing, {"w2@h": OTHER}, grace_seconds=600) == (
        "a worker without agent 'triage' (old@h:41:abc) gave it back; it fails at "
        "2026-12-01 20:10:00 UTC unless a worker that has the agent takes it; waiting for a "
        "worker that has agent 'triage': none of the 1 live worker(s) has it"
    )
    drained = run(
        RunStatus.INTERRUPTED, interrupted_reason=Interruption.DRAIN, interrupted_by="w1@h:9:x"
    )
    assert explain(drained, {"w1@h": TRIAGE}) == (
        "its worker (w1@h:9:x) shut down mid-run (a drain) at 2026-12-01 20:00:00 UTC; "
        "waiting for a free worker (1 live worker(s) have agent 'triage')"
    )


def test_a_waiting_run_names_its_approval_and_when_it_expires() -> None:
    wait = WaitPoint("a1", "refund", {"amount": 5}, NOW + timedelta(hours=1), "k1")
    assert explain(run(RunStatus.WAITING, waiting=wait), None) == (
        "waiting for a decision on approval a1 (refund), which expires at 2026-12-01 21:00:00 UTC"
    )


def test_a_run_waiting_for_an_answer_names_the_question() -> None:
    asked = {"question": "Which order?"}
    wait = WaitPoint("q1", "ask_human", asked, NOW + timedelta(hours=1), "k1", kind="input")
    assert explain(run(RunStatus.WAITING, waiting=wait), None) == (
        "waiting for a person's answer to question q1: 'Which order?', which expires at "
        "2026-12-01 21:00:00 UTC"
    )


@pytest.mark.parametrize(
    "status", [RunStatus.RUNNING, RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED]
)
def test_statuses_that_explain_themselves_get_no_sentence(status: RunStatus) -> None:
    assert explain(run(status), {}) is None


def test_a_record_round_trips_and_an_earlier_versions_mark_reads_as_agents_unknown() -> None:
    full = WorkerInfo(
        "w1@h",
        seen_at=10.5,
        started_at=3.0,
        agents=("a", "b"),
        version="1.2.3",
        pool="thread",
        concurrency=16,
        queues=("runwright",),
        host="h",
        pid=41,
    )
    assert WorkerInfo.decode("w1@h", full.encode().encode()) == full
    old = WorkerInfo.decode("w0@h", b"1700000000.25")
    assert old == WorkerInfo("w0@h", seen_at=1700000000.25)
    assert old is not None and old.agents is None
    # A worker that did not say what it serves may serve anything: never "unserved".
    assert serving([old], "triage") == [old]


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"[1, 2]",
        b'{"agents": ["a"]}',  # no seen_at
        b'{"seen_at": true}',
        b"true",
        b'{"seen_at": 1, "agents": "' + b"x" * 70_000 + b'"}',
        b"\xff\xfe",
    ],
)
def test_a_record_nobody_could_have_written_reads_as_nothing(value: bytes) -> None:
    assert WorkerInfo.decode("w@h", value) is None


def test_fields_of_the_wrong_type_are_dropped_not_trusted() -> None:
    value = json.dumps({"seen_at": 5, "agents": ["a", 7, None], "pool": 3, "concurrency": "9"})
    info = WorkerInfo.decode("w@h", value)
    assert info == WorkerInfo("w@h", seen_at=5.0, agents=("a",))


def test_an_owner_is_named_by_the_live_worker_whose_process_it_is() -> None:
    mine = WorkerInfo("w1@h", seen_at=1.0, agents=("triage",), host="h", pid=41)
    assert worker_of("h:41:abc123", [OTHER, mine]) is mine
    assert worker_of("h:42:abc123", [OTHER, mine]) is None
    assert worker_of("other:41:abc123", [mine]) is None
    assert worker_of("garbage", [mine, WorkerInfo("w0@h")]) is None
    drained = run(
        RunStatus.INTERRUPTED, interrupted_reason=Interruption.DRAIN, interrupted_by="h:41:abc"
    )
    said = explain(drained, {"w1@h": mine})
    assert said is not None and said.startswith("its worker (w1@h) shut down mid-run")


def test_unserved_names_the_agents_no_live_worker_loaded() -> None:
    live = {"w1@h": TRIAGE, "w2@h": OTHER}
    assert unserved(live, ["triage", "billing", "ledger", "ledger"]) == ["ledger"]
    assert unserved({}, ["triage"]) == ["triage"]


def test_a_parked_run_says_on_what_limit_and_when_it_may_go() -> None:
    parked = run(
        RunStatus.QUEUED,
        enqueued_at=NOW,
        parked_key="openai/gpt-4o-mini",
        parked_until=NOW + timedelta(seconds=42),
    )
    assert explain(parked, {"w1@h": TRIAGE}) == (
        "waiting: rate_limit on 'openai/gpt-4o-mini', may go at 2026-12-01 20:00:42 UTC "
        "(parked: it holds no worker; it goes sooner if its turn comes)"
    )
