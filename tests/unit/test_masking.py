"""What a reader without ``see_payloads`` is shown of a payload
(runner/console/masking.py): its keys and lists' lengths, each leaf value one
mask string, a missing value still missing; events keep what is no payload."""

from __future__ import annotations

from datetime import UTC, datetime

from runner.console.masking import MASK, mask, masked_approval, masked_event, masked_run
from store.events import EventType, RunEvent
from store.models import Approval, Run, RunError, RunStatus, TriggerEnvelope, Usage

NOW = datetime(2026, 1, 31, 9, 30, tzinfo=UTC)


def test_a_payload_keeps_its_shape_and_loses_every_value() -> None:
    payload = {"a": 1, "b": {"c": [True, 2.5, "x", None]}, "d": None, "e": []}
    assert mask(payload) == {"a": MASK, "b": {"c": [MASK, MASK, MASK, None]}, "d": None, "e": []}
    assert mask("text") == MASK and mask(None) is None and mask(0) == MASK


def test_events_mask_their_payload_fields_only() -> None:
    step = RunEvent(
        "r1",
        EventType.STEP,
        {"kind": "tool", "index": 2, "name": "lookup", "input": {"q": "x"}, "output": "y"},
        id=7,
        at=NOW,
    )
    shown = masked_event(step)
    assert shown.data == {
        "kind": "tool",
        "index": 2,
        "name": "lookup",
        "input": {"q": MASK},
        "output": MASK,
    }
    assert (shown.id, shown.at, shown.type) == (7, NOW, EventType.STEP)
    asked = RunEvent(
        "r1",
        EventType.APPROVAL,
        {"action": "decided", "tool_name": "refund", "arguments": {"n": 3}, "reason": "ok"},
    )
    assert masked_event(asked).data == {
        "action": "decided",
        "tool_name": "refund",
        "arguments": {"n": MASK},
        "reason": MASK,
    }
    token = RunEvent("r1", EventType.TOKEN, {"step": 1, "epoch": 1, "text": "Hel"})
    assert masked_event(token).data == {"step": 1, "epoch": 1, "text": MASK}
    status = RunEvent("r1", EventType.STATUS, {"status": "failed", "error_code": "tool_error"})
    assert masked_event(status) is status


def test_a_run_and_an_approval_keep_what_is_no_payload() -> None:
    run = Run(
        id="r1",
        agent="support",
        status=RunStatus.FAILED,
        trigger=TriggerEnvelope(payload={"customer": "Ada"}, keys={"team": "ops"}),
        usage=Usage(10, 5),
        created_at=NOW,
        updated_at=NOW,
        output={"answer": 42},
        error=RunError("tool_error", "refund of Ada failed"),
        cost_usd=0.25,
    )
    shown = masked_run(run)
    assert shown.trigger.payload == {"customer": MASK} and shown.trigger.keys == {"team": MASK}
    assert shown.output == {"answer": MASK} and shown.error == RunError("tool_error", MASK)
    assert (shown.id, shown.agent, shown.status, shown.usage, shown.cost_usd) == (
        "r1",
        "support",
        RunStatus.FAILED,
        Usage(10, 5),
        0.25,
    )
    approval = Approval(
        approval_id="a1",
        run_id="r1",
        step_index=2,
        tool_call_id="c1",
        tool_name="refund",
        input={"amount": 30},
        expires_at=NOW,
        on_expire="deny",
        token_id="t1",
        created_at=NOW,
    )
    shown_approval = masked_approval(approval)
    assert shown_approval.input == {"amount": MASK} and shown_approval.tool_name == "refund"
    assert shown_approval.arguments is None and shown_approval.pending
