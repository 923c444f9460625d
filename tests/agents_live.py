"""An agent that streams from an OpenAI-compatible server on loopback that
the test controls (``RUNWRIGHT_TEST_PROVIDER_URL``): issue 14's acceptance 2."""

from __future__ import annotations

import os

from runner import Agent
from tests.agents import lookup

PROVIDER = os.environ.get("RUNWRIGHT_TEST_PROVIDER_URL", "http://127.0.0.1:9/v1")

Agent(
    name="live-stream",
    model="openai/loopback",
    model_settings={"api_base": PROVIDER, "api_key": "sk-loopback", "timeout": 30},
    tools=[lookup],
    stream=True,
)
