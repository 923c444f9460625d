"""A tool that changed under a waiting decision (docs/approvals.md): the
decision is never lost and never applied blindly, whether the tool changed
before the person decided (runner/core/approvals/decisions.py) or between
their decision and the run's resumption (runner/core/steps/toolcalls/gate.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner import Agent, Engine, effect
from runner.core.agent import Registry, registry
from runner.core.coordination.leases import Leases
from runner.core.errors import InvalidApprovalInput
from runner.core.settings import Settings
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import Decision, RunStatus
from store.postgres import PostgresStore
from tests.e2e.clirun import make_cli_env, rw


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def engine(pg_store: PostgresStore, leases: Leases, settings: Settings) -> Iterator[Engine]:
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=lambda *a, **k: None)
    yield made
    made.close()


def _script(request: Request) -> Any:
    if request.step == 1:
        return tools(call("refund", {"order": "A-1"}))
    return text("told: " + str(request.tool_results()[-1]["content"]))


class Refunds:
    """The versions of one agent whose refund effect a person approves, and
    what its refunds did, in order."""

    def __init__(self, name: str, policy: str = "continue") -> None:
        self.name = name
        self.policy = policy
        self.model = ScriptedModel(unique("changed-model"), _script)
        self.done: list[dict[str, Any]] = []

    def v1(self) -> None:
        """refund(order)."""

        @effect
        def refund(order: str, idempotency_key: str) -> dict[str, Any]:
            """Refund an order."""
            self.done.append({"order": order})
            return {"refunded": order}

        self._define(refund)

    def with_reason(self, *, required: bool = True) -> None:
        """refund(order, reason): a parameter added, required or not."""
        if required:

            @effect
            def refund(order: str, reason: str, idempotency_key: str) -> dict[str, Any]:
                """Refund an order."""
                self.done.append({"order": order, "reason": reason})
                return {"refunded": order, "reason": reason}

        else:

            @effect
            def refund(  # type: ignore[misc]
                order: str, idempotency_key: str, reason: str = "none given"
            ) -> dict[str, Any]:
                """Refund an order."""
                self.done.append({"order": order, "reason": reason})
                return {"refunded": order, "reason": reason}

        self._define(refund)

    def renamed(self) -> None:
        """refund renamed issue_refund, its parameters the same."""

        @effect
        def issue_refund(order: str, idempotency_key: str) -> dict[str, Any]:
            """Refund an order."""
            self.done.append({"order": order, "renamed": True})
            return {"refunded": order}

        self._define(issue_refund)

    def by_id(self) -> None:
        """refund(order_id): the model's ``order`` no longer fits."""

        @effect
        def refund(order_id: str, idempotency_key: str) -> dict[str, Any]:
            """Refund an order."""
            self.done.append({"order_id": order_id})
            return {"refunded": order_id}

        self._define(refund)

    def _define(self, refund: Any) -> None:
        Agent(
            name=self.name,
            model=self.model.model,
            instructions="Refund what is asked.",
            tools=[refund],
            approvals={refund.name: True},
            on_new_version=self.policy,  # type: ignore[arg-type]
            replace=True,
        )


def waiting(engine: Engine, refunds: Refunds) -> str:
    refunds.v1()
    run = engine.start(refunds.name, {"order": "A-1"})
    paused = engine.execute(run.id)
    assert paused is not None and paused.status is RunStatus.WAITING
    return run.id


def pending(engine: Engine, run_id: str) -> Any:
    [approval] = [a for a in engine.approvals(run_id) if a.pending]
    return approval


def told(engine: Engine, run_id: str) -> str:
    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED, done
    assert isinstance(done.output, str)
    return done.output


# ------------------------------------------------------------ deciding


def test_a_required_parameter_added_refuses_approval_as_is_and_takes_an_edit(
    engine: Engine,
) -> None:
    refunds = Refunds(unique("changed-param"))
    run_id = waiting(engine, refunds)
    refunds.with_reason()
    approval = pending(engine, run_id)

    change = engine.tool_change(approval)
    assert change is not None and not change.gone
    assert change.lines == ("tool refund: parameter reason added (required)",)
    [item] = [i for i in engine.inbox() if i.approval.approval_id == approval.approval_id]
    assert item.change == change

    with pytest.raises(InvalidApprovalInput) as refused:
        engine.decide(approval.approval_id, True, trusted=True, by="alice")
    message = str(refused.value)
    assert "tool refund changed since the call was requested" in message
    assert "parameter reason added (required)" in message
    assert "'reason' is a required property" in message
    assert pending(engine, run_id).pending  # nothing decided

    # An edit is checked against the tool now: one without the reason is refused too.
    with pytest.raises(InvalidApprovalInput, match="'reason' is a required property"):
        engine.decide(
            approval.approval_id, True, trusted=True, by="alice", arguments={"order": "A-1"}
        )
    edited = {"order": "A-1", "reason": "damaged"}
    engine.decide(approval.approval_id, True, trusted=True, by="alice", arguments=edited)
    assert "refunded" in told(engine, run_id)
    assert refunds.done == [{"order": "A-1", "reason": "damaged"}]


def test_arguments_that_still_fit_the_changed_tool_are_approved_as_they_are(
    engine: Engine,
) -> None:
    refunds = Refunds(unique("changed-optional"))
    run_id = waiting(engine, refunds)
    refunds.with_reason(required=False)
    approval = pending(engine, run_id)
    change = engine.tool_change(approval)
    assert change is not None
    assert change.lines == ("tool refund: parameter reason added (optional)",)
    engine.decide(approval.approval_id, True, trusted=True, by="alice")
    told(engine, run_id)
    assert refunds.done == [{"order": "A-1", "reason": "none given"}]


def test_a_renamed_tool_is_marked_gone_refused_approval_and_can_be_denied(
    engine: Engine,
) -> None:
    refunds = Refunds(unique("changed-renamed"))
    run_id = waiting(engine, refunds)
    refunds.renamed()
    approval = pending(engine, run_id)
    change = engine.tool_change(approval)
    assert change is not None and change.gone
    assert change.lines == (
        "tool refund no longer exists",
        "tool issue_refund takes the same parameters (renamed?)",
    )
    with pytest.raises(InvalidApprovalInput, match="it cannot be approved; deny it, or fail"):
        engine.decide(approval.approval_id, True, trusted=True, by="alice")
    with pytest.raises(InvalidApprovalInput, match="it cannot be approved"):
        engine.decide(
            approval.approval_id, True, trusted=True, by="alice", arguments={"order": "A-1"}
        )
    engine.decide(approval.approval_id, False, "ask again with issue_refund", trusted=True)
    output = told(engine, run_id)
    assert "denied by a human reviewer" in output and "ask again with issue_refund" in output
    assert "unknown tool" not in output
    assert refunds.done == []


def test_a_person_fails_the_run_from_the_decision_with_the_reason(engine: Engine) -> None:
    refunds = Refunds(unique("changed-fail"))
    run_id = waiting(engine, refunds)
    refunds.renamed()
    approval = pending(engine, run_id)
    with pytest.raises(InvalidApprovalInput, match="denies the call"):
        engine.decide(approval.approval_id, True, trusted=True, fail_run=True)
    failed = engine.decide(
        approval.approval_id, False, "refunds moved", trusted=True, by="alice", fail_run=True
    )
    assert failed.status is RunStatus.FAILED and failed.error is not None
    assert failed.error.code == "tool_changed"
    assert "alice failed the run at its call of refund" in failed.error.message
    assert "tool refund no longer exists" in failed.error.message
    assert failed.error.message.endswith("refunds moved")
    decided = engine.approvals(run_id)[0]
    assert decided.decision is Decision.DENIED and decided.reason == "refunds moved"
    assert refunds.done == []


def test_a_pinned_run_is_applied_on_its_own_version_so_nothing_is_marked(
    engine: Engine,
) -> None:
    refunds = Refunds(unique("changed-pin"), policy="pin")
    run_id = waiting(engine, refunds)
    refunds.with_reason()
    assert engine.tool_change(pending(engine, run_id)) is None


def test_a_process_without_the_agent_compares_with_its_latest_recorded_version(
    engine: Engine, pg_store: PostgresStore, leases: Leases, settings: Settings
) -> None:
    refunds = Refunds(unique("changed-store"))
    run_id = waiting(engine, refunds)
    refunds.with_reason()
    engine.deps.note_version(registry.get(refunds.name).current_version())
    elsewhere = Engine(pg_store, leases=leases, settings=settings, registry=Registry())
    try:
        approval = pending(elsewhere, run_id)
        change = elsewhere.tool_change(approval)
        assert change is not None
        assert change.lines == ("tool refund: parameter reason added (required)",)
        with pytest.raises(InvalidApprovalInput, match="parameter reason added"):
            elsewhere.decide(approval.approval_id, True, trusted=True)
    finally:
        elsewhere.close()


# ------------------------------------------------------------ resuming


def test_an_approved_call_whose_tool_was_renamed_since_fails_the_run_tool_changed(
    engine: Engine,
) -> None:
    refunds = Refunds(unique("run-renamed"))
    run_id = waiting(engine, refunds)
    engine.decide(pending(engine, run_id).approval_id, True, trusted=True, by="alice")
    refunds.renamed()  # deployed between the decision and the resumption
    failed = engine.execute(run_id)
    assert failed is not None and failed.status is RunStatus.FAILED
    assert failed.error is not None and failed.error.code == "tool_changed"
    assert "no tool refund now" in failed.error.message
    assert "unknown tool" not in failed.error.message
    assert refunds.done == []


def test_a_denied_call_whose_tool_is_gone_tells_the_model_the_denial(engine: Engine) -> None:
    refunds = Refunds(unique("run-denied"))
    run_id = waiting(engine, refunds)
    engine.decide(pending(engine, run_id).approval_id, False, "not this one", trusted=True)
    refunds.renamed()
    output = told(engine, run_id)
    assert "denied by a human reviewer" in output and "not this one" in output
    assert "unknown tool" not in output


def test_an_approved_call_that_no_longer_fits_tells_the_model_why(engine: Engine) -> None:
    refunds = Refunds(unique("run-unfit"))
    run_id = waiting(engine, refunds)
    engine.decide(pending(engine, run_id).approval_id, True, trusted=True)
    refunds.with_reason()
    output = told(engine, run_id)
    assert "the call a person approved no longer fits refund as it is now" in output
    assert "reason" in output
    assert refunds.done == []


def test_edited_arguments_are_parsed_by_the_tool_now_not_the_models_first(
    engine: Engine,
) -> None:
    refunds = Refunds(unique("run-edited"))
    run_id = waiting(engine, refunds)
    refunds.by_id()  # the model's {"order": ...} does not fit; the person's edit does
    approval = pending(engine, run_id)
    assert engine.tool_change(approval) is not None
    engine.decide(
        approval.approval_id, True, trusted=True, by="alice", arguments={"order_id": "A-9"}
    )
    output = told(engine, run_id)
    assert "A-9" in output
    assert refunds.done == [{"order_id": "A-9"}]


# ------------------------------------------------------------ the CLI


def test_show_marks_the_call_and_deny_fail_run_ends_the_run(
    engine: Engine, runwright_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    refunds = Refunds(unique("changed-cli"))
    run_id = waiting(engine, refunds)
    refunds.with_reason()
    # The CLI's process does not define the agent: it reads its latest recorded version.
    engine.deps.note_version(registry.get(refunds.name).current_version())
    env = make_cli_env(runwright_database_url, redis_url, tmp_path, engine.settings)
    shown = rw(env, "show", run_id).stdout
    assert (
        "    tool changed since requested:\n      tool refund: parameter reason added (required)\n"
    ) in shown
    refused = rw(env, "approve", run_id, ok=False)
    assert "parameter reason added (required)" in refused.stderr
    assert pending(engine, run_id).pending
    rw(env, "deny", run_id, "--fail-run", "--reason", "ask again", "--by", "ops")
    failed = engine.get_run(run_id)
    assert failed.status is RunStatus.FAILED and failed.error is not None
    assert failed.error.code == "tool_changed" and failed.error.message.endswith("ask again")
