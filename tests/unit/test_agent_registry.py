"""Two agents under one name refuse each other (issue 50, item 6): the second
definition raised nothing and silently replaced the first, so runs of that
name ran whichever module was imported last. ``replace=True`` replaces on
purpose; the same agent registered twice is no conflict."""

from __future__ import annotations

import pytest

from runner import Agent, AgentAlreadyRegistered
from runner.core.agent import Registry, registry
from tests.helpers import unique


def test_a_second_agent_of_a_name_is_refused_naming_where_the_first_is() -> None:
    name = unique("twice")
    first = Agent(name=name, model="scripted/a")
    with pytest.raises(AgentAlreadyRegistered) as refused:
        Agent(name=name, model="scripted/b")
    said = str(refused.value)
    assert f"an agent named {name!r} is registered already" in said
    assert f"{__name__}:" in said and "replace=True" in said
    assert registry.get(name) is first  # the first stays


def test_replace_true_replaces_on_purpose_and_one_agent_may_register_again() -> None:
    name = unique("again")
    Agent(name=name, model="scripted/a")
    second = Agent(name=name, model="scripted/b", replace=True)
    assert registry.get(name) is second
    own = Registry()
    own.add(second)
    own.add(second)  # the same agent: nothing to refuse
    assert own.get(name) is second


def test_the_in_call_retry_knobs_of_an_agent_are_deprecated_for_its_retry_policy() -> None:
    from runner import RetryPolicy

    with pytest.warns(DeprecationWarning, match=r"retry=RetryPolicy\(in_call_retries="):
        old = Agent(name=unique("old"), model="scripted/x", model_retries=0, register=False)
    assert old.model_retries == 0  # still honoured, for one release
    policy = RetryPolicy(in_call_retries=0, in_call_backoff=0.01)
    assert (policy.in_call_retries, policy.in_call_backoff) == (0, 0.01)
    with pytest.raises(Exception, match="in_call_retries must be a whole number"):
        RetryPolicy(in_call_retries=-1)
