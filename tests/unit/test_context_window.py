"""The requests of an agent with a History: trimmed by whole turns, or a
summary in place of the oldest ones (runner/core/steps/context_window.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

import pytest

from runner import Agent, History, InvalidInput
from runner.core import versions
from runner.core.errors import ContextExceeded
from runner.core.steps.context_window import Window, summary_record
from runner.core.steps.history import APPROVAL_REQUEST, continue_thread, for_model
from store.models import Message
from tests.helpers import unique

PER_MESSAGE = 10


def count(messages: Sequence[Message]) -> int:
    """Ten tokens a message: sizes a test can reckon with."""
    return PER_MESSAGE * len(messages)


def turn(n: int, *, calls: int = 1) -> list[Message]:
    """A user message, the assistant's calls with their results, and its answer."""
    said: list[Message] = [{"role": "user", "content": f"question {n}"}]
    for c in range(calls):
        call_id = f"call_{n}_{c}"
        said.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps({"q": n})},
                    }
                ],
            }
        )
        said.append({"role": "tool", "tool_call_id": call_id, "content": f"result {n}.{c}"})
    said.append({"role": "assistant", "content": f"answer {n}"})
    return said


def thread(turns: int, *, calls: int = 1) -> list[Message]:
    return [m for n in range(turns) for m in turn(n, calls=calls)]


def window(budget: int, **history: Any) -> Window:
    return Window(History(budget_tokens=budget, **history), budget, "Be brief.", {}, count)


def assert_whole_turns(request: list[Message]) -> None:
    """Every tool result in the request follows the call it answers."""
    called: set[str] = set()
    for message in request:
        for call in message.get("tool_calls") or ():
            called.add(call["id"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in called, request


def test_a_history_within_the_budget_is_sent_whole() -> None:
    history = thread(3)
    assert window(1000).request(history) == for_model("Be brief.", history)


def test_trim_drops_the_oldest_turns_whole_and_keeps_the_instructions() -> None:
    history = thread(30, calls=2)  # 6 messages a turn
    frozen = copy.deepcopy(history)
    budget = 245  # the system message and 3 turns (10 + 3 * 60); not 4 (250)
    request = window(budget).request(history)
    assert request[0] == {"role": "system", "content": "Be brief."}
    assert request[1:] == history[-18:]  # the last three turns, not a message more
    assert count(request) <= budget
    assert_whole_turns(request)
    assert history == frozen  # only the request is shortened


@pytest.mark.parametrize("budget", range(90, 300, 7))
def test_trim_never_separates_a_call_from_its_result(budget: int) -> None:
    history = thread(20, calls=3)
    request = window(budget).request(history)
    assert count(request) <= budget
    assert request[1]["role"] == "user"
    assert_whole_turns(request)
    assert request[-1] == history[-1]


def test_trim_as_the_history_grows_counts_each_message_once() -> None:
    counted: list[int] = []

    def counting(messages: Sequence[Message]) -> int:
        counted.append(len(messages))
        return count(messages)

    grown = Window(History(budget_tokens=100), 100, "", {}, counting)
    history: list[Message] = []
    for n in range(50):
        history += turn(n)
        request = grown.request(history)
        assert count(request) <= 100
    assert sum(counted) == len(history)


def test_a_latest_turn_over_the_budget_is_one_clear_error() -> None:
    history = [*thread(3), *turn(3, calls=10)]  # 22 messages in its last turn
    with pytest.raises(ContextExceeded, match=r"latest turn .* 220 tokens .* budget of 200"):
        window(200).request(history)


def test_engine_records_never_reach_the_request() -> None:
    history = thread(2)
    history.insert(2, {"role": APPROVAL_REQUEST, "tool_call_id": "call_0_0", "approval_id": "a"})
    request = window(1000).request(history)
    assert all(m["role"] != APPROVAL_REQUEST for m in request)


def test_a_function_keeps_what_it_chooses() -> None:
    seen: list[tuple[int, int]] = []

    def last_two(messages: list[Message], budget: int) -> list[Message]:
        seen.append((len(messages), budget))
        return messages[:1] + messages[-2:]

    history = thread(10)
    shaped = Window(History(budget_tokens=50, keep=last_two), 50, "Hi.", {}, count)
    assert shaped.request(history) == [{"role": "system", "content": "Hi."}, *history[-2:]]
    assert seen == [(len(history) + 1, 50)]


def test_a_summary_is_due_once_over_the_budget_and_covers_whole_turns() -> None:
    history = thread(9)  # 4 messages a turn: 370 tokens with the instructions
    summarizing = window(400, keep="summarize", summary_tokens=20, retain=0.5)
    assert summarizing.summary_due(history) is None
    history += thread(12)[36:]  # 12 turns: 490 tokens
    due = summarizing.summary_due(history)
    assert due is not None
    assert due.start == 0 and history[due.covers]["role"] == "user"
    # The kept turns and the summary (with its preface) fill at most half the budget.
    kept = len(history) - due.covers
    assert 10 + 20 + 10 + PER_MESSAGE * kept <= 200
    assert due.covers == 32 and count(due.messages) <= 400
    assert due.messages[0]["role"] == "system"
    said = due.messages[1]["content"]
    assert "user: question 0\n" in said and "user: question 7\n" in said
    assert "user: question 8\n" not in said


def test_a_summary_takes_only_the_turns_its_own_request_holds() -> None:
    history = thread(8)  # 330 tokens with the instructions
    summarizing = window(200, keep="summarize", summary_tokens=20, retain=0.5)
    due = summarizing.summary_due(history)
    assert due is not None
    # Its request (20 tokens, and 10 a message) holds 4 turns of the 7 it would drop.
    assert due.covers == 16 and count(due.messages) <= 200
    history.append(summary_record("the first four", due.covers))
    assert summarizing.summary_due(history) is None  # 170 tokens now: within the budget
    assert count(summarizing.request(history)) <= 200


def test_the_request_after_a_summary_holds_it_in_place_of_the_turns() -> None:
    history = thread(8)
    summarizing = window(200, keep="summarize", summary_tokens=20)
    due = summarizing.summary_due(history)
    assert due is not None
    history.append(summary_record("They asked eight questions.", due.covers))
    request = summarizing.request(history)
    assert request[0]["role"] == "system"
    assert request[0]["content"].startswith("Be brief.\n\nA summary of the conversation")
    assert request[0]["content"].endswith("They asked eight questions.")
    assert request[1:] == history[due.covers : -1]
    assert summarizing.summary_due(history) is None


def test_a_later_summary_builds_on_the_earlier_one_and_reads_only_new_turns() -> None:
    history = thread(8)
    summarizing = window(200, keep="summarize", summary_tokens=20)
    first = summarizing.summary_due(history)
    assert first is not None
    history.append(summary_record("EARLIER SUMMARY", first.covers))
    history += thread(16)[32:]
    second = summarizing.summary_due(history)
    assert second is not None
    assert second.start == first.covers < second.covers
    said = second.messages[1]["content"]
    assert said.startswith("The summary so far:\nEARLIER SUMMARY")
    assert "user: question 0\n" not in said
    assert f"user: question {first.covers // 4 - 1}\n" not in said
    assert f"user: question {first.covers // 4}\n" in said


def test_a_summary_goes_on_with_the_thread() -> None:
    history = [*thread(2), summary_record("so far", 5)]
    assert continue_thread(history)[-1] == summary_record("so far", 5)
    # An agent without a History never sends one.
    assert all(m["role"] != "history_summary" for m in for_model("", history))


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"budget_tokens": 0}, "budget_tokens must be a positive whole number"),
        ({"budget_tokens": True}, "budget_tokens must be a positive whole number"),
        ({"share": 1.5}, "share must be above 0 and at most 1"),
        ({"keep": "drop"}, "keep must be 'trim', 'summarize' or a function"),
        ({"retain": 0}, "retain must be above 0"),
        ({"summary_tokens": 0}, "summary_tokens must be a positive whole number"),
        (
            {"keep": "summarize", "budget_tokens": 1000, "summary_tokens": 600},
            "summary_tokens \\(600\\) must be under half of budget_tokens \\(1000\\)",
        ),
    ],
)
def test_a_bad_history_is_one_clear_error(settings: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidInput, match=words):
        History(**settings)


def test_a_model_litellm_does_not_know_needs_a_budget() -> None:
    name = unique("window")
    with pytest.raises(InvalidInput) as refused:
        Agent(name=name, model="openai/no-such-model-x", history=History())
    assert str(refused.value) == (
        f"agent {name!r}: History() on model 'openai/no-such-model-x': litellm does not know "
        "its context window; give History(budget_tokens=...)"
    )
    with pytest.raises(InvalidInput, match="history must be a History"):
        Agent(name=name, model="openai/gpt-4o", history=1000)  # type: ignore[arg-type]


def test_the_budget_is_a_share_of_the_context_window_litellm_knows() -> None:
    from runner.core.model import context_window

    assert context_window("gpt-4o") == 128_000
    assert History().budget(context_window("gpt-4o"), "gpt-4o") == 96_000
    assert History(share=0.5).budget(128_000, "gpt-4o") == 64_000
    assert History(budget_tokens=900).budget(None, "openai/unknown") == 900


def test_the_history_setting_is_part_of_the_agents_version() -> None:
    plain = Agent(name=unique("v"), model="openai/gpt-4o", register=False)
    trimmed = Agent(name=plain.name, model="openai/gpt-4o", history=History(), register=False)
    summarized = Agent(
        name=plain.name, model="openai/gpt-4o", history=History(keep="summarize"), register=False
    )
    assert "history" not in versions.define(plain)
    digests = {versions.of(agent).id for agent in (plain, trimmed, summarized)}
    assert len(digests) == 3
    assert versions.define(summarized)["history"]["keep"] == "summarize"


@pytest.mark.parametrize("keep", ["trim", "summarize"])
def test_a_long_history_read_whole_counts_only_its_latest_messages(keep: str) -> None:
    """An execution of a thread's run reads the thread's history whole: it
    counts back from the latest message until the budget is passed, and
    chooses exactly what a count of every message would."""
    counted: list[int] = []

    def counting(messages: Sequence[Message]) -> int:
        counted.append(len(messages))
        return count(messages)

    history = thread(300, calls=2)
    settings: dict[str, Any] = {"budget_tokens": 400, "keep": keep, "summary_tokens": 50}
    lazy = Window(History(**settings), 400, "Hi.", {}, counting)
    request = lazy.request(history)
    assert sum(counted) < 60  # not the 1,800 messages of the thread
    whole = Window(History(**settings), 400, "Hi.", {}, count)
    whole._read(history[:1])  # read message by message: every one counted
    assert whole.request(history) == request
    assert request[1:] == history[-36:]  # 6 turns of 6 messages: 360 tokens
    if keep == "summarize":
        # A History switched on for a long thread: the first summary takes
        # the oldest turns its request holds, and the next steps the rest.
        due, expected = lazy.summary_due(history), whole.summary_due(history)
        assert due is not None and due == expected
        assert due.start == 0 and 0 < due.covers < 60 and history[due.covers]["role"] == "user"
        assert count(due.messages) <= 400
        assert sum(counted) < 150


def test_a_keep_function_is_fingerprinted_by_its_code() -> None:
    def keep(messages: list[Message], budget: int) -> list[Message]:
        return messages[-2:]

    def other(messages: list[Message], budget: int) -> list[Message]:
        return messages[-3:]

    made = [
        Agent(
            name="fingerprinted",
            model="openai/gpt-4o",
            history=History(budget_tokens=500, keep=function),
            register=False,
        )
        for function in (keep, other)
    ]
    assert versions.of(made[0]).id != versions.of(made[1]).id
    assert versions.define(made[0])["history"]["keep"]["name"].endswith("keep")


def test_a_function_is_asked_once_for_each_history() -> None:
    asked: list[int] = []

    def last_turn(messages: list[Message], budget: int) -> list[Message]:
        asked.append(len(messages))
        return messages[:1] + messages[-4:]

    history = thread(10)
    shaped = Window(History(budget_tokens=50, keep=last_turn), 50, "Hi.", {}, count)
    assert shaped.request(history) == shaped.request(history)  # the estimate, then the call
    history += turn(10)
    shaped.request(history)
    assert asked == [len(history) - 3, len(history) + 1]
