"""``Agent.override`` holds in the context that made it (issue 50, item 6):
overrides on two threads that end out of order leave the agent its own model
(they left it the first thread's), and neither thread sees the other's."""

from __future__ import annotations

import threading

from runner import Agent
from tests.helpers import unique


def test_overrides_on_two_threads_ending_out_of_order_leave_the_agent_its_own() -> None:
    agent = Agent(name=unique("shared"), model="openai/gpt-4o-mini", register=False)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, list[str]] = {"a": [], "b": []}

    def first() -> None:
        with agent.override(model="scripted/a"):
            a_in.set()
            b_in.wait(5)
            seen["a"].append(agent.model)  # B's override is B's alone
        a_out.set()

    def second() -> None:
        a_in.wait(5)
        with agent.override(model="scripted/b", instructions="b"):
            b_in.set()
            a_out.wait(5)  # A's block ends first
            seen["b"].append(agent.model)
            seen["b"].append(agent.instructions)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == {"a": ["scripted/a"], "b": ["scripted/b", "b"]}
    assert agent.model == "openai/gpt-4o-mini" and agent.instructions == ""
