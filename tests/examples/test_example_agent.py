"""The examples' agent, tested with the kit as its users would test theirs
(docs/testing-your-agents.md); and the guide's first test, run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from examples import agents
from runner.testing import TestEngine
from store.models import RunStatus
from tests.services import ROOT, Services, outside_env


@pytest.fixture(autouse=True)
def _inbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXAMPLE_INBOX", str(tmp_path / "inbox.txt"))
    agents.refunds.clear()
    agents.sent_links.clear()


def test_the_refund_waits_for_a_person_then_is_made_once(runwright_engine: TestEngine) -> None:
    run = runwright_engine.run(agents.AGENT, {"message": "A-1002 never arrived"})
    assert run.status is RunStatus.WAITING
    assert len(agents.sent_links) == 1 and agents.refunds == []
    done = runwright_engine.approve(run.id, "refund")
    assert done.status is RunStatus.COMPLETED
    assert [(r["order_id"], r["amount"]) for r in agents.refunds] == [("A-1002", 125)]
    assert str(done.output).startswith("Triage done")


def test_a_worker_dying_after_the_refund_does_not_refund_twice(
    runwright_engine: TestEngine,
) -> None:
    run = runwright_engine.run(agents.AGENT, {"message": "A-1001 arrived damaged"})
    runwright_engine.engine.decide(
        runwright_engine.pending(run.id)[0].approval_id, True, trusted=True
    )
    runwright_engine.crash(run.id, at="after_effect_call")
    done = runwright_engine.take_over(run.id)
    assert done.status is RunStatus.COMPLETED
    runwright_engine.assert_taken_over(run.id)
    assert len(agents.refunds) == 1


def _blocks(doc: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc, re.S)


def test_the_guides_first_test_passes_as_written(services: Services, tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "testing-your-agents.md").read_text()
    agents_py, test_py = _blocks(doc)[:2]
    assert agents_py.startswith("# agents.py") and test_py.startswith("# test_support.py")
    (tmp_path / "agents.py").write_text(agents_py)
    (tmp_path / "test_support.py").write_text(test_py)
    env = outside_env()
    env["RUNWRIGHT_TEST_DATABASE_URL"] = services.database_url("postgres")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_support.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
