"""What people beyond yes and no (issue 29) look like from outside the run:
the log line each decision writes in the deciding process (text, and JSON
fields such as ``edited``), and the webhook a notifier sends for an approval
and for a question."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

import tests.agents_planned as planned
from runner import Agent, Engine
from runner.core.agent import ApprovalRequest
from runner.core.observe.logs import LINE_FIELDS, JsonFormatter, TextFormatter, install
from runner.notifiers import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WebhookNotifier,
    request_body,
    verify_signature,
)
from runner.testing import ScriptedModel
from store.models import RunStatus
from tests.helpers import expire_approval, unique
from tests.integration.test_approvals import Receiver

RUNS = "runner.core.observe.logs"


@pytest.fixture(autouse=True)
def _run_context(caplog: pytest.LogCaptureFixture) -> None:
    """What a worker (or a web app's logging set-up) does to its handlers."""
    install([caplog.handler], "text")
    caplog.set_level(logging.INFO, logger=RUNS)


def decision_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == RUNS and getattr(r, LINE_FIELDS, {}).get("event") == "approval_decided"
    ]


def fields(record: logging.LogRecord) -> dict[str, Any]:
    found: dict[str, Any] = getattr(record, LINE_FIELDS)
    return found


def test_each_decision_is_one_info_line_with_its_facts_as_json_fields(
    approvals_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    engine = approvals_engine
    secret = f"secret-{unique('x')}"
    step = [("refund", {"amount": n}) for n in (1, 2, 3)]
    run = engine.start(
        planned.PEOPLE,
        planned.plan([*step, ("ask_human", {"question": f"Which colour? {secret}"})]),
    )
    engine.execute(run.id)
    edited, granting, expiring, question = engine.approvals(run.id)
    caplog.clear()

    engine.decide(edited.approval_id, True, trusted=True, by="ada", arguments={"amount": 7})
    engine.answer(question.approval_id, f"blue {secret}", trusted=True, by="cy")
    expire_approval(engine.store, expiring.approval_id)
    engine.tick()
    [edit, answer, expiry] = decision_lines(caplog)
    assert all(r.levelno == logging.INFO for r in (edit, answer, expiry))
    assert edit.getMessage() == (
        f"run {run.id} ({planned.PEOPLE}): approval {edited.approval_id} of refund approved "
        "by ada, with edited arguments"
    )
    assert (edit.run_id, edit.agent, edit.step) == (run.id, planned.PEOPLE, 1)  # type: ignore[attr-defined]
    assert answer.getMessage().endswith(f"question {question.approval_id} answered by cy")
    assert expiry.getMessage().endswith("of refund not approved: it expired")
    assert fields(expiry)["expired"] is True and fields(expiry)["decided_by"] is None

    # As JSON: the facts are fields, and the run context is there outside any execution.
    entry = json.loads(JsonFormatter().format(edit))
    assert entry["run_id"] == run.id and entry["agent"] == planned.PEOPLE and entry["step"] == 1
    assert (entry["edited"], entry["for_run"], entry["standing"], entry["kind"]) == (
        True,
        False,
        False,
        "approval",
    )
    assert (entry["decision"], entry["decided_by"], entry["tool"]) == ("approved", "ada", "refund")
    assert entry["approval_id"] == edited.approval_id and entry["message"] == edit.getMessage()
    asked = json.loads(JsonFormatter().format(answer))
    assert (asked["kind"], asked["decision"], asked["edited"]) == ("input", "answered", False)
    # Who and how, never what: no argument, question or answer in any line.
    assert not [r for r in caplog.records if secret in r.getMessage()]
    assert "amount" not in JsonFormatter().format(edit)
    assert TextFormatter("%(message)s").format(edit).endswith(f"[run={run.id} step=1]")

    caplog.clear()
    engine.decide(granting.approval_id, True, trusted=True, by="ada", for_run=True)
    assert engine.get_run(run.id).status is RunStatus.QUEUED
    [grant] = decision_lines(caplog)
    assert grant.getMessage().endswith("approved by ada, for the rest of the run")
    assert fields(grant)["for_run"] is True and fields(grant)["standing"] is False


def test_a_standing_approval_says_which_grant_decided_it(
    approvals_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    engine = approvals_engine
    run = engine.start(
        planned.PEOPLE, planned.plan([("refund", {"amount": 1}), ("refund", {"amount": 2})])
    )
    engine.execute(run.id)
    first, second = engine.approvals(run.id)
    caplog.clear()
    engine.decide(first.approval_id, True, trusted=True, by="ada", for_run=True)
    lines = {fields(r)["approval_id"]: r for r in decision_lines(caplog)}
    assert set(lines) == {first.approval_id, second.approval_id}
    also = lines[second.approval_id]
    assert also.getMessage().endswith(
        f"approved by ada (standing approval from {first.approval_id})"
    )
    assert fields(also)["standing"] is True and fields(also)["standing_from"] == first.approval_id


# --------------------------------------------------------------- webhooks


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver("whsec-people")
    yield made
    made.close()


def test_the_webhook_says_whether_it_asks_for_an_approval_or_an_answer(
    approvals_engine: Engine, receiver: Receiver
) -> None:
    engine = approvals_engine
    name = unique("hooked")
    Agent(
        name=name,
        model=ScriptedModel(name, planned.planned).model,
        tools=[planned.refund],
        approvals={"refund": True},
        ask_human=planned.Choice,
        notifier=WebhookNotifier(receiver.url, "whsec-people"),
    )
    run = engine.start(
        name,
        planned.plan(
            [("refund", {"amount": 9}), ("ask_human", {"question": "Refund or replace?"})]
        ),
    )
    engine.execute(run.id)
    approval, question = engine.approvals(run.id)
    assert approval.notified_at is not None and question.notified_at is not None  # 2xx: accepted
    bodies = {}
    for body, headers, ok in receiver.received:
        assert ok and verify_signature(
            "whsec-people", body, headers[TIMESTAMP_HEADER], headers[SIGNATURE_HEADER]
        )
        payload = json.loads(body)
        bodies[payload["type"]] = payload
    asked, wants = bodies["approval.requested"], bodies["input.requested"]

    assert (asked["kind"], asked["approval_id"], asked["tool_name"]) == (
        "approval",
        approval.approval_id,
        "refund",
    )
    assert asked["input"] == {"amount": 9} and asked["question"] is None
    assert asked["schema"]["properties"]["amount"]["maximum"] == 1000  # what an edit must fit
    assert asked["token"] == engine.token(approval.approval_id)

    assert (wants["kind"], wants["approval_id"], wants["tool_name"]) == (
        "input",
        question.approval_id,
        "ask_human",
    )
    assert wants["question"] == "Refund or replace?"
    assert wants["schema"]["properties"]["action"]["enum"] == ["refund", "replace"]
    assert wants["token"] == engine.token(question.approval_id)
    # The token in a question's webhook answers it.
    engine.answer(question.approval_id, {"action": "replace"}, token=wants["token"], by="link")
    assert engine.approvals(run.id)[1].answer == {"action": "replace"}


def test_the_body_of_a_text_question() -> None:
    request = ApprovalRequest(
        run_id="r",
        agent="a",
        approval_id="q",
        tool_name="ask_human",
        input={"question": "Which order?"},
        expires_at="2026-12-01T00:00:00+00:00",
        token="t",
        token_id="k",
        kind="input",
        question="Which order?",
        schema={"type": "string", "minLength": 1, "maxLength": 20000},
    )
    body = request_body(request)
    assert body["type"] == "input.requested" and body["kind"] == "input"
    assert body["question"] == "Which order?" and body["schema"]["type"] == "string"
    # The fields a receiver of an earlier version read are all still there.
    assert {"run_id", "agent", "approval_id", "tool_name", "input", "expires_at", "token",
            "token_id"} <= set(body)  # fmt: skip
