"""A worker's log lines name the run (issue 13's acceptance 3)."""

from __future__ import annotations

import json

import tests.agents_logs  # noqa: F401  (the agent the worker runs, known here too)
from store.models import RunStatus
from tests.e2e.cluster import Cluster, wait_until

AGENTS = "tests.agents,tests.agents_logs"
# Lines about the process, not a run, that may fall into a run's window.
HOUSEKEEPING = ("runner.core.engine.watchdog", "runner.celery", "celery.worker.consumer")


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _succeeded(window: list[str], run_id: str) -> bool:
    for line in window:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line still being written; the test parses every line later
        if entry.get("run_id") == run_id and "succeeded" in entry["message"]:
            return True
    return False


def test_every_line_of_an_execution_is_json_and_names_its_run(cluster: Cluster) -> None:
    worker = cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, RUNWRIGHT_LOG_FORMAT="json")
    engine = cluster.engine()
    # Everything after the banner (printed, not logged) is one JSON object a line.
    banner_end = worker.log().index(" ready.")
    before = len(_lines(worker.log()[:banner_end]))
    for attempt in range(2):
        start = len(_lines(worker.log()))
        run = engine.start("logging", {"attempt": attempt})
        wait_until(
            lambda run=run: engine.get_run(run.id).status is RunStatus.COMPLETED,
            60,
            "the run to complete",
        )
        # The run is completed before its task's last lines are written; wait for
        # this task's own "succeeded", not the one an earlier attempt left.
        wait_until(
            lambda start=start, run=run: _succeeded(_lines(worker.log())[start:], run.id),
            10,
            "the task's last line",
        )
        window = _lines(worker.log())[start:]
        entries = [json.loads(line) for line in window]  # every line parses
        ours = [e for e in entries if e.get("run_id") == run.id]
        others = [e for e in entries if e.get("run_id") != run.id]
        assert [e for e in others if not e["logger"].startswith(HOUSEKEEPING)] == []
        messages = " | ".join(e["message"] for e in ours)
        for expected in (
            "received",  # Celery's line, before the execution
            "sync tool wrote one",  # a tool thread
            "async tool wrote two",  # the event loop
            "RateLimitError",  # the model adapter's retry
            "completed: 3 step(s)",  # the outcome line
            "succeeded",  # Celery's line, after it
        ):
            assert expected in messages, (expected, messages)
        steps = {e.get("step") for e in ours if "tool wrote" in e["message"]}
        assert steps == {1}
        assert all(e["agent"] == "logging" and e["epoch"] >= 1 for e in ours if "step" in e)
    for line in _lines(worker.log())[before + 1 :]:
        json.loads(line)  # nothing but JSON, not a traceback, after the banner
    engine.close()
