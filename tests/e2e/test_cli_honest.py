"""``runwright show`` and ``runwright runs`` say what is known, through the real
entry point: an approval that expired reads as expired, not as a reviewer's
denial (issue 26, item 6); an unpriced model's cost reads as unknown, not as
$0 (item 14)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from runner import Agent, ApprovalPolicy, Engine, effect, tool
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import RunStatus, utcnow
from tests.e2e.clirun import rw
from tests.e2e.test_cli_cost import table
from tests.unpriced import leave_unpriced


@effect
def ship(parcel: str, idempotency_key: str) -> dict[str, Any]:
    """Ship a parcel."""
    return {"shipped": parcel}


def _ship_once(request: Request) -> Any:
    if request.step == 1:
        return tools(call("ship", {"parcel": "p1"}))
    return text("done")


asks = ScriptedModel("cli-honest-asks", _ship_once)
Agent(
    name="cli-honest-asks",
    model=asks.model,
    tools=[ship],
    approvals={"ship": ApprovalPolicy(expires_in=60, on_expire="deny")},
)


def _tool_line(shown: str) -> str:
    [line] = [line for line in shown.splitlines() if " tool  ship(" in line]
    return line


def test_show_says_an_approval_expired(cli_env: dict[str, str], engine: Engine) -> None:
    run = engine.start("cli-honest-asks")
    engine.execute(run.id)
    assert engine.tick(now=utcnow() + timedelta(seconds=61)).expired == 1
    finished = engine.execute(run.id)
    assert finished is not None and finished.status is RunStatus.COMPLETED
    [approval] = engine.approvals(run.id)

    line = _tool_line(rw(cli_env, "show", run.id).stdout)
    assert "error: not approved: the approval expired at" in line, line
    assert f"{approval.expires_at:%Y-%m-%d %H:%M:%S}" in line
    assert "denied" not in line


def test_show_says_a_reviewer_who_typed_expired_denied_it(
    cli_env: dict[str, str], engine: Engine
) -> None:
    run = engine.start("cli-honest-asks")
    engine.execute(run.id)
    [approval] = engine.approvals(run.id)
    engine.decide(approval.approval_id, False, "expired", trusted=True)
    finished = engine.execute(run.id)
    assert finished is not None and finished.status is RunStatus.COMPLETED

    line = _tool_line(rw(cli_env, "show", run.id).stdout)
    assert "error: denied by a human reviewer" in line, line
    assert "not approved" not in line


USAGE = (1000, 500)  # at 1e-5 and 2e-5 USD per token: 0.02 USD a step


@tool
def measure(parcel: str) -> str:
    """Measure a parcel."""
    return f"{parcel}: 30 cm"


# The models left unpriced while a test runs (the ``unpriced`` fixture).
_unpriced: set[str] = set()


@pytest.fixture
def unpriced(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    _unpriced.clear()
    yield leave_unpriced(monkeypatch, _unpriced)
    _unpriced.clear()


def _costed(name: str) -> None:
    def script(request: Request) -> Any:
        if request.step == 1:
            return tools(call("measure", {"parcel": "p1"}), usage=USAGE)
        if name == "cli-honest-mixed":
            _unpriced.add(name)  # its second call has no price
        return text("30 cm", usage=USAGE)

    model = ScriptedModel(name, script, price=(0.000_01, 0.000_02))
    Agent(name=name, model=model.model, tools=[measure])


for _name in ("cli-honest-priced", "cli-honest-unpriced", "cli-honest-mixed"):
    _costed(_name)


def test_an_unpriced_cost_reads_as_unknown(
    cli_env: dict[str, str], engine: Engine, unpriced: set[str]
) -> None:
    unpriced.add("cli-honest-unpriced")
    runs = {}
    for kind in ("priced", "unpriced", "mixed"):
        run = engine.start(f"cli-honest-{kind}")
        done = engine.execute(run.id)
        assert done is not None and done.status is RunStatus.COMPLETED
        runs[kind] = done

    rows = {cells[0]: cells for cells in table(rw(cli_env, "runs").stdout)}
    assert rows[runs["priced"].id][5] == "$0.0400"
    assert rows[runs["unpriced"].id][5] == "—"
    # Only some steps unpriced: the list says so too, as show does.
    assert rows[runs["mixed"].id][5] == "≥ $0.0200 (some steps unpriced)"

    shown = rw(cli_env, "show", runs["priced"].id).stdout
    assert "cost     $0.0400" in shown
    shown = rw(cli_env, "show", runs["unpriced"].id).stdout
    assert "cost     —" in shown and "$0.0000" not in shown
    assert "[1000+500 tokens, cost unknown]" in shown
    shown = rw(cli_env, "show", runs["mixed"].id).stdout
    assert "cost     ≥ $0.0200 (some steps unpriced)" in shown
    assert "[1000+500 tokens, $0.0200]" in shown and "[1000+500 tokens, cost unknown]" in shown
