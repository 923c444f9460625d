"""``runwright show`` and ``runwright runs`` say what is known, through the real
entry point: an approval that expired reads as expired, not as a reviewer's
denial (issue 26, item 6); an unpriced model's cost reads as unknown, not as
$0 (item 14)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from runner import Agent, ApprovalPolicy, Engine, effect
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import RunStatus, utcnow
from tests.e2e.clirun import rw


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
    engine.respond(approval.approval_id, False, "expired", trusted=True)
    finished = engine.execute(run.id)
    assert finished is not None and finished.status is RunStatus.COMPLETED

    line = _tool_line(rw(cli_env, "show", run.id).stdout)
    assert "error: denied by a human reviewer" in line, line
    assert "not approved" not in line
