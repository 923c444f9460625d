"""Declaring tool retries: what ``@tool(retries=...)`` and ``@effect(retries=...)``
accept, refuse, and count as worth another attempt."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import pytest

from runner import effect, tool
from runner.core.errors import ToolDefinitionError, ToolInputError
from runner.core.retry import RetryPolicy


def test_an_int_means_that_many_more_attempts() -> None:
    @tool(retries=2)
    def flaky(x: int) -> int:
        """Sometimes fails."""
        return x

    assert flaky.retries is not None and flaky.retries.max_attempts == 3
    assert flaky.retries.max_elapsed is None


def test_a_policy_is_kept_as_given() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_attempts=4, max_elapsed=None)

    @tool(retries=policy)
    async def flaky(x: int) -> int:
        """Sometimes fails."""
        return x

    assert flaky.retries is policy


def test_no_retries_by_default_and_zero_means_none() -> None:
    @tool
    def plain() -> str:
        """Plain."""
        return "ok"

    @tool(retries=0)
    def zero() -> str:
        """Zero."""
        return "ok"

    assert plain.retries is None and zero.retries is None
    assert not zero.retryable(ValueError("x"))


@pytest.mark.parametrize(
    ("retries", "words"),
    [(-1, "0 or more"), (True, "int or a RetryPolicy"), (1.5, "int or a RetryPolicy")],
)
def test_bad_retries_are_refused_at_definition(retries: Any, words: str) -> None:
    def f() -> str:
        """F."""
        return "ok"

    with pytest.raises(ToolDefinitionError, match=words):
        tool(retries=retries)(f)


def test_an_at_most_once_effect_cannot_be_retried() -> None:
    def charge(amount: int, idempotency_key: str) -> str:
        """Charge."""
        return idempotency_key

    with pytest.raises(ToolDefinitionError, match='retry="at_least_once"') as raised:
        effect(retries=1)(charge)
    assert "charge" in str(raised.value)
    with pytest.raises(ToolDefinitionError, match='retry="at_least_once"'):
        effect(retries=RetryPolicy(max_attempts=None, max_elapsed=10.0))(charge)
    with pytest.raises(ToolDefinitionError, match='retry="at_least_once"'):
        effect(retry="at_most_once", retries=1)(charge)
    # No retry at all is no promise broken.
    assert effect(retries=0)(charge).retries is None
    assert effect(retries=RetryPolicy(max_attempts=1))(charge).retries is None
    retried = effect(retry="at_least_once", retries=1)(charge)
    assert retried.retries is not None and retried.retries.max_attempts == 2


def test_what_is_worth_another_attempt() -> None:
    @tool(retries=2)
    def anything() -> str:
        """Any error but bad input."""
        return "ok"

    assert anything.retryable(ValueError("boom"))
    assert anything.retryable(ConnectionError("down"))
    assert not anything.retryable(ToolInputError("bad arguments"))
    assert not anything.retryable(concurrent.futures.CancelledError())

    def only_connections(exc: BaseException) -> bool:
        return isinstance(exc, ConnectionError | ToolInputError)

    @tool(retries=RetryPolicy(max_attempts=3, transient=only_connections))
    def picky() -> str:
        """Only connection errors."""
        return "ok"

    assert picky.retryable(ConnectionError("down"))
    assert not picky.retryable(ValueError("boom"))
    # Bad input stays bad however often it is tried, whatever the predicate says.
    assert not picky.retryable(ToolInputError("bad arguments"))

    def broken(exc: BaseException) -> bool:
        raise RuntimeError("bug in the predicate")

    @tool(retries=RetryPolicy(max_attempts=3, transient=broken))
    def guarded() -> str:
        """A predicate that raises."""
        return "ok"

    assert not guarded.retryable(ValueError("boom"))


def test_the_decorated_function_still_calls_directly() -> None:
    @tool(retries=1)
    async def double(x: int) -> int:
        """Double it."""
        return 2 * x

    assert asyncio.run(double(4)) == 8
