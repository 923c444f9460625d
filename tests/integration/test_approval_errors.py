"""Each way a decision can fail raises its own ApprovalError subclass, so a web
app can answer each with its own HTTP status (issue 11, errors)."""

from __future__ import annotations

import uuid

import pytest

from runner import Engine
from runner.core.errors import (
    ApprovalAlreadyDecided,
    ApprovalError,
    ApprovalExpired,
    ApprovalNotFound,
    InvalidApprovalId,
    InvalidApprovalToken,
    InvalidInput,
    RunNotWaiting,
)
from runner.testing import call, text, tools
from tests.helpers import expire_approval
from tests.integration.test_approvals import Inbox, refund_agent


def test_each_refusal_has_its_own_class(approvals_engine: Engine) -> None:
    engine = approvals_engine
    inbox = Inbox()
    name, _, _ = refund_agent(
        inbox=inbox,
        script=lambda r: (
            tools(call("refund", {"amount": 1}), call("refund", {"amount": 2}))
            if r.step == 1
            else text("done")
        ),
    )
    run = engine.start(name)
    engine.execute(run.id)
    first, second = engine.approvals(run.id)
    token_first, token_second = inbox.accepted[0].token, inbox.accepted[1].token

    cases: list[tuple[type[ApprovalError], dict[str, object]]] = [
        (InvalidApprovalToken, {"approval_id": first.approval_id, "token": "forged"}),
        (InvalidApprovalToken, {"approval_id": first.approval_id}),
        (ApprovalNotFound, {"approval_id": str(uuid.uuid4()), "trusted": True}),
        (InvalidApprovalId, {"approval_id": "urn:uuid:" + first.approval_id, "trusted": True}),
    ]
    for cls, kwargs in cases:
        approval_id = kwargs.pop("approval_id")
        with pytest.raises(cls):
            engine.decide(approval_id, True, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):  # a malformed id is the caller's bad input too
        engine.decide("not-an-id", True, trusted=True)
    with pytest.raises(ApprovalNotFound):
        engine.decide("not-an-id", True, trusted=True)

    engine.decide(first.approval_id, True, token=token_first)
    with pytest.raises(ApprovalAlreadyDecided):
        engine.decide(first.approval_id, False, token=token_first)

    expire_approval(engine.store, second.approval_id)
    with pytest.raises(ApprovalExpired):
        engine.decide(second.approval_id, True, token=token_second)
    engine.cancel(run.id)
    with pytest.raises(RunNotWaiting):
        engine.decide(second.approval_id, True, token=token_second)
