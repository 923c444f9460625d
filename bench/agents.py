"""The agents the benchmarks' worker processes run (``RUNWRIGHT_AGENTS=bench.agents``).

``throughput`` calls a real litellm provider over HTTP: an OpenAI-compatible
server on loopback that answers at once (``RUNWRIGHT_BENCH_PROVIDER``, its
base URL), four steps of one small tool call each, then a short answer, so a
run is five durable steps whose cost is the engine's and litellm's.

``flow`` and ``flow-warm`` (``bench.flow``) call a provider that enforces its
limits on requests and tokens per minute (``bench.limited_server``).
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

# ``flow`` (bench.flow): two steps, a tool call of ``note`` and an answer,
# against the provider that enforces its limits (``RUNWRIGHT_BENCH_LIMITED``,
# bench.limited_server); the run's tenant is its trigger's ``org`` key. Its
# output cap is what flow control reserves for each call's answer.
FLOW_PROVIDER = os.environ.get("RUNWRIGHT_BENCH_LIMITED", "http://127.0.0.1:9/v1")
FLOW_MAX_TOKENS = 64
FLOW_MODEL = "openai/flow-bench"


@tool
def note(n: int) -> str:
    """Note ``n``."""
    return f"{n} noted"


# ``flow-warm`` is the same agent on a model no limit names: the benchmark
# warms its workers with it, leaving the limit of ``flow``'s model untouched.
for name, model in (("flow", FLOW_MODEL), ("flow-warm", "openai/flow-warm")):
    Agent(
        name=name,
        model=model,
        instructions="Note the number you are given, then say that it is noted.",
        tools=[note],
        model_settings={
            "api_base": FLOW_PROVIDER,
            "api_key": "sk-loopback",
            "timeout": 30,
            "max_tokens": FLOW_MAX_TOKENS,
        },
        budget=Budget(max_steps=4),
        tenant=lambda trigger: trigger.keys.get("org"),
    )
