"""A run's events as UI message parts (runner/chat/uistream.py), without a
store: live text resumed in its middle, requests as data parts, and what
the public shape of an event withholds staying out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runner.chat.uistream import TOOL_FAILED, Cursor, Message, parse_cursor, refusal
from runner.console.abilities import Ability
from runner.core.errors import InvalidInput
from runner.core.redaction import Redactor
from store.events import EventType, RunEvent

RUN = "01a24f15-8710-708e-8472-5e6a98c72245"
TEXT = "The cache key ignores the lockfile."


def llm(event_id: int, index: int, content: str | None, *calls: dict[str, Any]) -> RunEvent:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    output = {"message": message, "finish_reason": "tool_calls" if calls else "stop"}
    return RunEvent(
        RUN, EventType.STEP, {"kind": "llm", "index": index, "output": output}, event_id
    )


def token(step: int, n: int, text: str) -> RunEvent:
    data = {"epoch": 1, "step": step, "attempt": 1, "n": n, "text": text}
    return RunEvent(RUN, EventType.TOKEN, data)


def approval(event_id: int, **data: Any) -> RunEvent:
    base = {
        "action": "requested",
        "approval_id": "ap-1",
        "step_index": 2,
        "tool_call_id": "call-1",
        "tool_name": "refund",
        "decision": None,
        "kind": "approval",
        "input": {"amount": 30, "email": "ada@example.com"},
        "expires_at": "2026-12-08T00:00:00+00:00",
    }
    return RunEvent(RUN, EventType.APPROVAL, {**base, **data}, event_id)


def sent(message: Message, *events: RunEvent) -> list[tuple[str | None, dict[str, Any]]]:
    return [part for event in events for part in message.parts(event)]


def text_of(parts: list[tuple[str | None, dict[str, Any]]]) -> str:
    return "".join(p["delta"] for _, p in parts if p["type"] == "text-delta")


def test_live_text_is_not_sent_again_when_its_step_is_journaled() -> None:
    message = Message(RUN, Redactor(), None)
    parts = sent(message, token(1, 0, TEXT[:10]), token(1, 1, TEXT[10:]), llm(7, 1, TEXT))
    assert [p["type"] for _, p in parts] == [
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "finish-step",
    ]
    assert text_of(parts) == TEXT
    # Every part has an id to resume from; the live ones say how much of the step the client has.
    assert [ident for ident, _ in parts] == [
        f"{RUN}:0:0:1:s",
        f"{RUN}:0:0:1:0",
        f"{RUN}:0:0:1:10",
        f"{RUN}:0:0:1:{len(TEXT)}",
        f"{RUN}:7:0",
        f"{RUN}:7:1",
    ]


@pytest.mark.parametrize("cut", [1, 2, 3, 4])
def test_a_stream_resumed_in_the_middle_of_live_text_sends_the_rest_once(cut: int) -> None:
    first = Message(RUN, Redactor(), None)
    before = sent(first, token(1, 0, TEXT[:10]), token(1, 1, TEXT[10:20]))[:cut]
    cursor = parse_cursor(before[-1][0])
    assert cursor is not None and cursor.step == 1
    # The new connection hears the step's last delta, then its event.
    resumed = Message(RUN, Redactor(), cursor)
    after = sent(resumed, token(1, 2, TEXT[20:]), llm(7, 1, TEXT))
    assert text_of(before) + text_of(after) == TEXT
    types = [p["type"] for _, p in before + after]
    assert types.count("start-step") == types.count("text-start") == types.count("text-end") == 1
    assert types[:2] == ["start-step", "text-start"] and types[-2:] == ["text-end", "finish-step"]


def test_a_resume_skips_the_parts_of_its_event_the_client_had() -> None:
    call = {"id": "call-1", "function": {"name": "look", "arguments": '{"q": "x"}'}}
    whole = sent(Message(RUN, Redactor(), None), llm(7, 1, "Looking.", call))
    for ident, _ in whole[:-1]:
        rest = sent(Message(RUN, Redactor(), parse_cursor(ident)), llm(7, 1, "Looking.", call))
        assert whole[: whole.index(next(p for p in whole if p[0] == ident)) + 1] + rest == whole


def test_requests_are_data_parts_keyed_by_their_id_without_who_decided_or_why() -> None:
    message = Message(RUN, Redactor("email"), None)
    asked, decided = sent(
        message,
        approval(8),
        approval(9, action="decided", decision="denied", reason="too much", decided_by="ada"),
    )
    assert asked[1]["type"] == decided[1]["type"] == "data-approval"
    assert asked[1]["id"] == decided[1]["id"] == "ap-1"
    assert asked[1]["data"]["status"] == "pending"
    assert asked[1]["data"]["input"] == {"amount": 30, "email": "[redacted:email]"}
    assert decided[1]["data"]["status"] == "denied"
    assert "too much" not in json.dumps(decided) and "ada" not in json.dumps(decided)


def test_a_question_is_a_data_question_part() -> None:
    event = approval(8, kind="input", tool_name="ask_human", input={"question": "Which order?"})
    [(_, part)] = sent(Message(RUN, Redactor(), None), event)
    assert part["type"] == "data-question"
    assert part["data"]["question"] == "Which order?"
    answered = approval(9, kind="input", action="decided", decision="answered", answer="A-7")
    [(_, done)] = sent(Message(RUN, Redactor(), None), answered)
    assert done["data"]["status"] == "answered" and "A-7" not in json.dumps(done)


def test_a_failed_tool_shows_no_error_message() -> None:
    data = {
        "kind": "tool",
        "index": 2,
        "tool_call_id": "call-1",
        "input": {"card": "4111 1111 1111 1111"},
        "output": None,
        "error": {"message": "card 4111 1111 1111 1111 declined"},
    }
    [(_, part)] = sent(Message(RUN, Redactor(), None), RunEvent(RUN, EventType.STEP, data, 8))
    assert part == {
        "type": "tool-output-error",
        "toolCallId": "call-1",
        "errorText": TOOL_FAILED,
        "dynamic": True,
    }


def test_the_runs_end_is_finish_and_other_statuses_are_not_parts() -> None:
    message = Message(RUN, Redactor(), None)
    running = RunEvent(RUN, EventType.STATUS, {"status": "running"}, 3)
    failed = RunEvent(RUN, EventType.STATUS, {"status": "failed", "error_code": "model_error"}, 9)
    parts = sent(message, running, failed)
    assert [p for _, p in parts] == [
        {
            "type": "finish",
            "finishReason": "error",
            "messageMetadata": {"run_id": RUN, "status": "failed", "error_code": "model_error"},
        }
    ]


@pytest.mark.parametrize(
    "value",
    [
        "12",
        f"{RUN}:x:0",
        f"{RUN}:1",
        "not-a-run:1:0",
        f"{RUN}:1:0:2",
        "<script>:1:0",
        f"{RUN}:{2**64}:0",
    ],
)
def test_a_resume_point_is_one_the_stream_sent(value: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_cursor(value)
    assert value not in str(raised.value)


def test_a_resume_point_round_trips() -> None:
    for cursor in (Cursor(RUN, 5, 2), Cursor(RUN, 0, 0, 3, 120)):
        assert parse_cursor(str(cursor)) == cursor
    assert parse_cursor(None) is None and parse_cursor("") is None


def test_the_stream_wants_someone_who_may_see_payloads() -> None:
    every = frozenset(Ability)
    assert refusal(None, every) is not None
    assert refusal("ada", frozenset({Ability.SEE_RUNS})) is not None
    assert refusal("ada", frozenset({Ability.SEE_PAYLOADS})) is not None
    assert refusal("ada", frozenset({Ability.SEE_RUNS, Ability.SEE_PAYLOADS})) is None


def test_live_text_joined_in_its_middle_or_with_a_gap_comes_whole_from_the_journal() -> None:
    joined = sent(Message(RUN, Redactor(), None), token(1, 1, TEXT[10:]), llm(7, 1, TEXT))
    assert text_of(joined) == TEXT
    assert [p["type"] for _, p in joined].count("text-start") == 1
    gap = sent(
        Message(RUN, Redactor(), None), token(1, 0, TEXT[:10]), token(1, 2, "x"), llm(7, 1, TEXT)
    )
    assert text_of(gap) == TEXT
    assert [p["type"] for _, p in gap].count("text-start") == 1


def test_agui_events_are_the_same_parts_one_for_one() -> None:
    from runner.chat.agui import agui_event

    def one(part: dict[str, Any]) -> dict[str, Any] | None:
        return agui_event(part, RUN, "t-1")

    assert one({"type": "start-step"}) is None and one({"type": "finish-step"}) is None
    assert one({"type": "start", "messageId": RUN}) == {
        "type": "RUN_STARTED",
        "threadId": "t-1",
        "runId": RUN,
    }
    failed = {"run_id": RUN, "status": "failed", "error_code": "model_error"}
    assert one({"type": "finish", "finishReason": "error", "messageMetadata": failed}) == {
        "type": "RUN_ERROR",
        "message": "the run failed",
        "code": "model_error",
    }
    error = {"type": "tool-output-error", "toolCallId": "c-1", "errorText": TOOL_FAILED}
    assert one(error) == {
        "type": "TOOL_CALL_RESULT",
        "messageId": f"{RUN}:result:c-1",
        "toolCallId": "c-1",
        "content": TOOL_FAILED,
        "role": "tool",
    }
    event = approval(8, kind="input", tool_name="ask_human", input={"question": "Which order?"})
    [(_, part)] = sent(Message(RUN, Redactor(), None), event)
    custom = one(part)
    assert custom is not None and custom["type"] == "CUSTOM" and custom["name"] == "question"
    assert custom["value"]["question"] == "Which order?"
