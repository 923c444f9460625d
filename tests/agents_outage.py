"""Agents for the provider-outage tests: one calls an OpenAI-compatible server
on loopback that the test controls (``RUNWRIGHT_TEST_PROVIDER_URL``), the other
a scripted model that never fails, so a test can see whether runs waiting out
an outage keep a worker's threads from other work."""

from __future__ import annotations

import os

from runner import Agent
from runner.core.retry import RetryPolicy
from runner.testing import ScriptedModel, text
from tests.agents import lookup

PROVIDER = os.environ.get("RUNWRIGHT_TEST_PROVIDER_URL", "http://127.0.0.1:9/v1")
SETTINGS = {"api_base": PROVIDER, "api_key": "sk-loopback", "timeout": 10}

# Short in-call retries, then the queue: attempts 1 s, 2 s, 3 s, 3 s, ... apart.
PATIENT = RetryPolicy(
    initial_backoff=1,
    multiplier=2,
    max_backoff=3,
    max_attempts=None,
    max_elapsed=600,
    in_call_retries=1,
    in_call_backoff=0.2,
)

Agent(
    name="outage",
    model="openai/loopback",
    model_settings=SETTINGS,
    tools=[lookup],
    retry=PATIENT,
)

# Gives up after three attempts of a step (the exhausted-policy test).
Agent(
    name="outage-brief",
    model="openai/loopback",
    model_settings=SETTINGS,
    tools=[lookup],
    retry=RetryPolicy(
        initial_backoff=0.5, max_backoff=0.5, max_attempts=3, max_elapsed=None, in_call_retries=0
    ),
)

steady_model = ScriptedModel("outage-steady", lambda request: text("steady"))
Agent(name="outage-steady", model=steady_model.model)
