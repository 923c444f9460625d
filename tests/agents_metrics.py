"""Agents whose runs end in known ways, for the metrics acceptance test
(``tests/e2e/test_metrics.py``): over budget, a model that refuses, and a
model that fails once and then answers. Each reply waits
``RUNWRIGHT_TEST_MODEL_LATENCY`` seconds, as the ``five`` agent does."""

from __future__ import annotations

import os
import threading

from runner import Agent, Budget
from runner.core.retry import RetryPolicy
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from tests.agents import JOURNAL, lookup


def _latency() -> float:
    return float(os.environ.get("RUNWRIGHT_TEST_MODEL_LATENCY", "0"))


def endless(request: Request) -> Reply:
    """A lookup every step: the budget stops it."""
    return tools(call("lookup", {"q": f"step {request.step}"}), latency=_latency())


budget_model = ScriptedModel("metrics-budget", endless, journal=JOURNAL)
Agent(
    name="metrics-budget",
    model=budget_model.model,
    tools=[lookup],
    budget=Budget(max_steps=2),
)


def refusing(request: Request) -> Reply:
    """A lookup, then a request the provider refuses (not transient: the run fails)."""
    if request.step == 1:
        return tools(call("lookup", {"q": "first"}), latency=_latency())
    return Reply(error="bad_request", latency=_latency())


refusing_model = ScriptedModel("metrics-refused", refusing, journal=JOURNAL)
Agent(
    name="metrics-refused",
    model=refusing_model.model,
    tools=[lookup],
    retry=RetryPolicy(in_call_retries=0),
)


# The runs whose first call already failed, by their payload's "n". Per
# process: the test runs one worker.
_failed_once: set[object] = set()
_failed_lock = threading.Lock()


def flaky(request: Request) -> Reply:
    """The first call of each run fails with a transient error (a durable
    retry, since no in-call retry is allowed); then a lookup and an answer."""
    with _failed_lock:
        first = request.payload["n"] not in _failed_once
        _failed_once.add(request.payload["n"])
    if first:
        return Reply(error="server_error", latency=_latency())
    if request.step == 1:
        return tools(call("lookup", {"q": "again"}), latency=_latency())
    return text("recovered", latency=_latency())


flaky_model = ScriptedModel("metrics-flaky", flaky, journal=JOURNAL)
Agent(
    name="metrics-flaky",
    model=flaky_model.model,
    tools=[lookup],
    retry=RetryPolicy(initial_backoff=0.2, max_backoff=0.2, max_attempts=3, in_call_retries=0),
)
