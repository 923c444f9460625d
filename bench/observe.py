"""What observing costs per durable step: logs, traces and metrics on vs off.

    python -m bench.observe [--repeats 5]

Two durable engines (Postgres and Redis leases, a zero-latency scripted model
through litellm, ~1 KB tool results) on the same database, run in pairs (in
random order); the figure is the median of the pairs' differences, so that the
machine's drift cancels:

- off: the log context only (always on), INFO lines filtered out, no tracer,
  no metrics;
- on: JSON lines at INFO to a file, OpenTelemetry spans through the SDK with a
  batch processor (its exporter drops the spans, so the export's network is
  not measured), and Prometheus metrics.

Target: on - off at most 10 % of the durable step cost (off).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import tempfile
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.common import bench_database, report, settings
from bench.step_overhead import _per_step, _script, fetch
from runner import Agent, Budget, Engine
from runner.core.coordination.leases import Leases
from runner.core.observe.logs import install
from runner.core.settings import Settings
from runner.testing import ScriptedModel
from store.db import make_engine
from store.postgres import PostgresStore

STEPS = 50
TARGET = 0.10


def _tracer_provider() -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)
    return provider


def run(repeats: int) -> dict[str, Any]:
    from runner.observe import metrics, otel

    ScriptedModel("bench-steps", _script)
    agent = Agent(
        name="bench-steps", model="scripted/bench-steps", tools=[fetch], budget=Budget(500)
    )
    base = settings()
    assert base.redis_url is not None
    key = "bench:bench-secret-bench-secret-bench-secret"
    provider = _tracer_provider()
    with tempfile.TemporaryDirectory() as tmp, bench_database() as url:
        handler = logging.FileHandler(os.path.join(tmp, "worker.log"))
        install([handler], "json")
        root = logging.getLogger()
        root.addHandler(handler)
        db = make_engine(url, pool_size=10)
        leases = Leases.from_url(base.redis_url)
        quiet = Settings(lease_ttl_seconds=30, secret_key=key)
        observed = Settings(
            lease_ttl_seconds=30, secret_key=key, otel=True, metrics_port=9, log_format="json"
        )
        off = Engine(PostgresStore(db), leases=leases, settings=quiet)
        on = Engine(
            PostgresStore(db),
            leases=leases,
            settings=observed,
            observers=[otel.observer(observed), metrics.observer(observed)],
        )

        def timed(engine: Engine, level: int) -> float:
            root.setLevel(level)
            return _per_step(engine, agent.name, STEPS)

        for _ in range(2):  # warm up: litellm import, pools, prepared plans
            timed(off, logging.WARNING)
            timed(on, logging.INFO)
        samples: dict[str, list[float]] = {"off": [], "on": []}
        differences: list[float] = []
        order = random.Random(7)
        for _ in range(repeats):
            for _ in range(4):
                # A pair of runs, in random order: the pair's difference
                # cancels the machine's drift, the order any warm-cache bias.
                pair = {}
                for name in order.sample(["off", "on"], 2):
                    engine, level = (off, logging.WARNING) if name == "off" else (on, logging.INFO)
                    pair[name] = timed(engine, level)
                    samples[name].append(pair[name])
                differences.append(pair["on"] - pair["off"])
        with open(os.path.join(tmp, "worker.log")) as written:
            lines = sum(1 for _ in written)
        off.close()
        on.close()
        db.dispose()
        root.removeHandler(handler)
        handler.close()
    provider.shutdown()
    median = {k: statistics.median(v) for k, v in samples.items()}
    extra = statistics.median(differences)
    return {
        "steps_per_run": STEPS,
        "runs_each": len(samples["on"]),
        "per_step_ms": {k: round(v, 3) for k, v in median.items()},
        # The median of the pairs' differences (on - off, same moment).
        "observing_ms_per_step": round(extra, 3),
        "observing_vs_step": round(extra / median["off"], 3),
        "log_lines_written": lines,
        "target": f"observing <= {TARGET:.0%} of the durable step",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    result = run(args.repeats)
    report("observe", result, result["observing_vs_step"] <= TARGET)


if __name__ == "__main__":
    main()
