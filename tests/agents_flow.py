"""Agents under flow control (docs/flow-control.md), for the tests that run
them on real workers (tests/e2e/test_flow_control_workers.py). Their models
are the loopback provider of tests/provider.py, reached over HTTP through
litellm's OpenAI path at ``RUNWRIGHT_TEST_PROVIDER_URL``; the limits are the
workers' ``RUNWRIGHT_MODEL_LIMITS``, which the test sets (:data:`LIMITS`).

``ship`` is an effect that logs each time it really runs
(``RUNWRIGHT_TEST_EFFECT_LOG``), then holds its step until the file
``RUNWRIGHT_TEST_FLOW_GATE`` exists: a test saturates a limit between a run's
first step and its second.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from runner import Agent, effect
from tests.agents import log_effect

_SETTINGS: dict[str, Any] = {
    "api_base": os.environ.get("RUNWRIGHT_TEST_PROVIDER_URL", "http://127.0.0.1:9/v1"),
    "api_key": "sk-loopback",
}

# One step, with an output cap that most of a minute's tokens cannot hold
# twice over: the calls contend for their tokens.
TOKENS = "openai/flow-tokens"
# A model whose one slot a test holds, and one with no limit at all.
SLOTTED = "openai/flow-slotted"
FREE = "openai/flow-free"
# Two steps: the effect, then a model call that a test makes park.
EFFECT = "openai/flow-effect"
# A model whose provider answers 429 to the first call.
BLOCKED = "openai/flow-blocked"

TOKENS_RUNS = 12
MAX_TOKENS = 600
LIMITS = {
    TOKENS: {"rpm": TOKENS_RUNS, "tpm": 1500},
    SLOTTED: {"max_concurrent": 1},
    EFFECT: {"max_concurrent": 1},
    BLOCKED: {"rpm": 1000},
}


def limits_json() -> str:
    return json.dumps(LIMITS)


GATE_SECONDS = 60


@effect
def ship(order: str, idempotency_key: str) -> dict[str, Any]:
    """Ship the order (at most once)."""
    log_effect("ship", key=idempotency_key, order=order)
    gate = os.environ.get("RUNWRIGHT_TEST_FLOW_GATE")
    deadline = time.monotonic() + GATE_SECONDS
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"shipped": order}


Agent(name="flow_tokens", model=TOKENS, model_settings={**_SETTINGS, "max_tokens": MAX_TOKENS})
Agent(name="flow_slotted", model=SLOTTED, model_settings=_SETTINGS)
Agent(name="flow_free", model=FREE, model_settings=_SETTINGS)
Agent(name="flow_effect", model=EFFECT, model_settings=_SETTINGS, tools=[ship])
Agent(name="flow_blocked", model=BLOCKED, model_settings=_SETTINGS)
