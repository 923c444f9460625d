"""The agents the benchmarks' worker processes run (``RUNWRIGHT_AGENTS=bench.agents``).

``throughput`` calls a real litellm provider over HTTP: an OpenAI-compatible
server on loopback that answers at once (``RUNWRIGHT_BENCH_PROVIDER``, its
base URL), four steps of one small tool call each, then a short answer, so a
run is five durable steps whose cost is the engine's and litellm's.
"""

from __future__ import annotations

import os

from runner import Agent, Budget, tool

PROVIDER = os.environ.get("RUNWRIGHT_BENCH_PROVIDER", "http://127.0.0.1:9/v1")
STEPS = 5


@tool
def touch(n: int) -> str:
    """Note that step ``n`` ran."""
    return f"step {n} noted"


Agent(
    name="throughput",
    model="openai/throughput",
    tools=[touch],
    model_settings={"api_base": PROVIDER, "api_key": "sk-loopback", "timeout": 30},
    budget=Budget(max_steps=STEPS + 2),
)
