"""Histories that outgrow the context window (issue 54; docs/conversations.md).

A thread of 300 turns on a model with a small budget, at an OpenAI-compatible
server on loopback that counts every request's tokens with litellm's counter:
every request fits the agent's ``History`` budget, while the journal keeps
every message. Trimmed, a request never separates a tool call from its
result; summarized, each summary is one model call journaled once as a step,
a later one builds on the one before, and a crash right after its journal
write never pays for it again.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from runner import Agent, Engine, History
from runner.core.steps.context_window import SUMMARY_INSTRUCTIONS, SUMMARY_PREFACE
from runner.testing import TestEngine
from store.models import RunStatus, Step, StepKind
from tests.helpers import unique
from tests.provider import Provider, Served, answer, count_prompt, tool_calls

TURNS = 300
BUDGET = 700
SUMMARY_TOKENS = 120
# The trimmed thread's model: a context window litellm's model data gives
# as 1,000 tokens, three quarters of which is the default budget.
WINDOW = 1000

_ids = itertools.count()


def is_summary(body: dict[str, Any]) -> bool:
    return body["messages"][0]["content"] == SUMMARY_INSTRUCTIONS


def script(step: int, body: dict[str, Any]) -> dict[str, Any]:
    """Every third turn looks something up first; a summarizing call answers
    with a short summary that says how many summaries it builds on."""
    messages = body["messages"]
    if is_summary(body):
        said = messages[-1]["content"]
        depth = 1
        if said.startswith("The summary so far:\nsummary no."):
            depth += int(said.split("summary no.", 1)[1].split(":", 1)[0])
        return answer(f"summary no.{depth}: the user sent numbered turns.")
    last = messages[-1]
    if last["role"] == "user":
        turn = json.loads(last["content"].removeprefix("```json\n").removesuffix("\n```"))
        n = turn["payload"]["n"]
        if n % 3 == 0:
            return tool_calls((f"call_{next(_ids)}", "lookup", {"q": f"turn {n}"}))
        return answer(f"noted turn {n}")
    return answer("looked it up")


@pytest.fixture
def provider() -> Iterator[Provider]:
    with Provider(script) as server:
        yield server


def _agent(
    server: Provider, keep: str, history: History | None = None, name: str | None = None
) -> Agent:
    from tests.agents import lookup

    name = name or unique(f"long-{keep}")
    if history is None:
        history = History(budget_tokens=BUDGET, keep=keep, summary_tokens=SUMMARY_TOKENS)  # type: ignore[arg-type]
    return Agent(
        name=name,
        model=f"openai/{name}",
        model_settings={"api_base": server.base_url, "api_key": "sk-loopback"},
        instructions="Note each numbered turn the user sends.",
        tools=[lookup],
        history=history,
    )


def _small_context(name: str) -> str:
    """``name``, in litellm's model data with a context window of WINDOW tokens."""
    import litellm

    info = {"max_input_tokens": WINDOW, "litellm_provider": "openai", "mode": "chat"}
    litellm.register_model({f"openai/{name}": info})
    return name


def _assert_within_budget(requests: list[Served], budget: int = BUDGET) -> None:
    for served in requests:
        assert count_prompt(served.body) <= budget, served.body["messages"]


def _assert_calls_with_results(requests: list[Served]) -> None:
    for served in requests:
        called: set[str] = set()
        for message in served.body["messages"]:
            called.update(call["id"] for call in message.get("tool_calls") or ())
            if message["role"] == "tool":
                assert message["tool_call_id"] in called, served.body["messages"]


def _summary_steps(steps: list[Step]) -> list[Step]:
    return [
        s
        for s in steps
        if s.kind is StepKind.LLM and isinstance(s.input, dict) and "history_summary" in s.input
    ]


def _thread(engine: Engine, agent: Agent, turns: int) -> list[str]:
    thread = unique("thread")
    ran = []
    for n in range(turns):
        run = engine.start(agent.name, {"n": n}, thread=thread)
        done = engine.execute(run.id)
        assert done is not None and done.status is RunStatus.COMPLETED, done and done.error
        ran.append(run.id)
    return ran


def test_a_trimmed_thread_of_300_turns_keeps_every_request_within_the_budget(
    engine: Engine, provider: Provider
) -> None:
    from runner.core import model

    name = _small_context(unique("long-trim"))
    assert model.context_window(f"openai/{name}") == WINDOW
    agent = _agent(provider, "trim", History(), name)  # its budget: 0.75 of the window
    runs = _thread(engine, agent, TURNS)
    served = provider.answered()
    assert len(served) == TURNS + TURNS // 3  # no call more: trimming calls no model
    _assert_within_budget(served, budget=WINDOW * 3 // 4)
    _assert_calls_with_results(served)
    last = served[-1].body["messages"]
    assert last[0] == {"role": "system", "content": "Note each numbered turn the user sends."}
    assert last[1]["role"] == "user"
    sent = sum(1 for m in last if m["role"] == "user")
    assert 3 <= sent < 30  # the oldest turns were dropped, whole
    # The journal keeps every message: only the requests were shortened.
    checkpoint = engine.checkpoint(runs[-1])
    assert checkpoint is not None
    assert sum(1 for m in checkpoint.messages if m["role"] == "user") == TURNS


def test_a_summarized_thread_of_300_turns_pays_for_each_summary_once(
    engine: Engine, provider: Provider
) -> None:
    agent = _agent(provider, "summarize")
    runs = _thread(engine, agent, TURNS)
    served = provider.answered()
    _assert_within_budget(served)
    _assert_calls_with_results(served)
    summaries = [s for s in served if is_summary(s.body)]
    assert len(summaries) >= 10
    # Each summary is a step of its run, journaled once, and called once.
    steps = [step for run_id in runs for step in engine.steps(run_id)]
    journaled = _summary_steps(steps)
    assert len(journaled) == len(summaries)
    llm_steps = [s for s in steps if s.kind is StepKind.LLM]
    assert len(llm_steps) == len(served)
    # A later summary builds on the one before it, and reads only the turns since.
    for depth, request in enumerate(summaries[1:], start=1):
        said = request.body["messages"][-1]["content"]
        assert said.startswith(f"The summary so far:\nsummary no.{depth}:"), said
        assert count_prompt(request.body) <= BUDGET
    # The last request holds the latest summary in place of the oldest turns.
    last = served[-1].body["messages"]
    assert f"{SUMMARY_PREFACE}\nsummary no.{len(summaries)}:" in last[0]["content"]
    assert sum(1 for m in last if m["role"] == "user") < 30
    checkpoint = engine.checkpoint(runs[-1])
    assert checkpoint is not None
    assert sum(1 for m in checkpoint.messages if m["role"] == "user") == TURNS
    records = [m for m in checkpoint.messages if m["role"] == "history_summary"]
    assert len(records) == len(summaries)


@pytest.mark.runwright_allow_model_requests
def test_a_crash_after_a_summarys_journal_write_never_pays_for_it_again(
    runwright_engine: TestEngine, provider: Provider
) -> None:
    """Every run of the thread dies right after its first journal write (a
    summary's when one is due, else its model reply's) and is taken over: no
    model call is ever made twice."""
    agent = _agent(provider, "summarize")
    thread = unique("thread")
    crashed_in_summary = []
    for n in range(40):
        run = runwright_engine.start(agent, {"n": n}, thread=thread)
        before = len(provider.answered())
        runwright_engine.crash(run.id, "after_journal")
        called = provider.answered()[before:]
        done = runwright_engine.take_over(run.id)
        assert done.status is RunStatus.COMPLETED, done.error
        steps = runwright_engine.steps(run.id)
        if called and is_summary(called[-1].body):
            crashed_in_summary.append(run.id)
            # The summary journaled before the crash is the run's first step,
            # and the run after the takeover made no summarizing call.
            assert [s.index for s in _summary_steps(steps)] == [1]
            after = provider.answered()[before + len(called) :]
            assert not any(is_summary(s.body) for s in after)
    assert crashed_in_summary  # the crash fell on summaries
    served = provider.answered()
    _assert_within_budget(served)
    runs = runwright_engine.engine.list_runs(thread=thread)
    steps = [step for r in runs for step in runwright_engine.steps(r.id)]
    assert len([s for s in steps if s.kind is StepKind.LLM]) == len(served)
    assert len(_summary_steps(steps)) == sum(1 for s in served if is_summary(s.body))


def test_a_latest_turn_over_the_budget_fails_the_run_before_any_call(engine: Engine) -> None:
    from runner.testing import ScriptedModel, text

    name = unique("too-long")
    model = ScriptedModel(name, [text("never sent")])
    Agent(name=name, model=model.model, history=History(budget_tokens=60))
    done = engine.execute(engine.start(name, {"report": "word " * 200}).id)
    assert done is not None and done.status is RunStatus.FAILED
    assert done.error is not None and done.error.code == "context_exceeded"
    assert "more than the history's budget of 60 tokens" in done.error.message
    assert model.calls == []


def test_a_worker_killed_after_a_summarys_journal_write_never_pays_for_it_again(
    engine: Engine, proc_env: dict[str, str]
) -> None:
    """The thread's runs execute in worker processes, each SIGKILLed right
    after its first journal write and taken over by another; the first run
    whose first step is a summary shows the summary paid for once."""
    from tests.agents import read_effect_log
    from tests.integration.test_recovery import execute_in_process, wait_until_claim_lapses

    def calls() -> list[dict[str, Any]]:
        return read_effect_log(proc_env["RUNWRIGHT_SCRIPTED_JOURNAL"])

    def summarizing(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            e for e in entries if str(e["trigger"]).startswith(("The conversation:", "The summary"))
        ]

    thread = unique("thread")
    for n in range(6):  # in this process: a history a summary is due on soon
        done = engine.execute(engine.start("summarizing", {"n": n}, thread=thread).id)
        assert done is not None and done.status is RunStatus.COMPLETED
    for n in range(6, 20):
        run = engine.start("summarizing", {"n": n}, thread=thread)
        before = len(calls())
        killed = execute_in_process(run.id, proc_env, "after_journal=kill")
        assert killed.returncode == -9, killed.stderr[-2000:]
        paid = calls()[before:]
        wait_until_claim_lapses(engine, run.id)
        resumed = execute_in_process(run.id, proc_env)
        assert "RESULT completed" in resumed.stdout, resumed.stderr[-2000:]
        again = calls()[before + len(paid) :]
        steps = [s for s in engine.steps(run.id) if s.kind is StepKind.LLM]
        assert len(paid) + len(again) == len(steps)  # no call made twice
        if _summary_steps(steps):
            assert [s.index for s in _summary_steps(steps)] == [1]
            assert len(summarizing(paid)) == 1  # the killed worker's
            assert summarizing(again) == []  # the worker that took over made none
            checkpoint = engine.checkpoint(run.id)
            assert checkpoint is not None
            assert [m["role"] for m in checkpoint.messages].count("history_summary") >= 1
            return
    raise AssertionError("no run of the thread summarized its history")
