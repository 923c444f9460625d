"""How long the console takes to render its biggest pages, server side.

    python -m bench.console [--repeats 7]

On a fresh Postgres database (Redis leases, as in production), through the
Flask blueprint and its test client, so that the figure is the whole server's
work for a request (engine reads, rendering, the adapter) and no network:

- the runs list showing 1,000 runs (``?limit=1000``);
- the page of a 500-step run (its whole timeline, replayed from the event feed);
- the approvals inbox with 200 pending approvals.

Targets: the list and the timeline each under 1 s (median of the repeats).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
import uuid
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.common import bench_database, durable_engine, report
from runner import Agent, ApprovalPolicy, Budget, Engine, effect, tool
from runner.testing import Reply, Request, ScriptedModel, call, text
from store.db import make_engine
from store.postgres import PostgresStore
from store.sealing import Cipher

LIST_RUNS = 1000
TIMELINE_STEPS = 500
PENDING = 200
TARGET_SECONDS = 1.0


@tool
def lookup(n: int) -> dict[str, Any]:
    """About half a kilobyte of result, as a real lookup returns."""
    return {"n": n, "status": "arrived broken", "notes": "x" * 400}


@effect
def refund(amount: int, idempotency_key: str) -> dict[str, Any]:
    """Refund money."""
    return {"refunded": amount}


def _long(request: Request) -> Reply:
    if request.step < TIMELINE_STEPS:
        return Reply(f"Step {request.step}: looking it up.", [call("lookup", {"n": request.step})])
    return text("done")


def _asks(request: Request) -> Reply:
    if request.step == 1:
        return Reply("I will refund it.", [call("refund", {"amount": 30})])
    return text("refunded")


def _agents() -> tuple[str, str, str]:
    ScriptedModel("bench-console-long", _long)
    Agent(
        name="bench-console-long",
        model="scripted/bench-console-long",
        tools=[lookup],
        budget=Budget(max_steps=TIMELINE_STEPS + 10),
    )
    ScriptedModel("bench-console-asks", _asks)
    Agent(
        name="bench-console-asks",
        model="scripted/bench-console-asks",
        tools=[refund],
        approvals={"refund": ApprovalPolicy(expires_in=3600)},
    )
    ScriptedModel("bench-console-short", lambda request: text("nothing to do"))
    Agent(name="bench-console-short", model="scripted/bench-console-short", tools=[lookup])
    return "bench-console-long", "bench-console-asks", "bench-console-short"


def _client(engine: Engine) -> Any:
    from flask import Flask

    from runner.console.flask import console_blueprint

    app = Flask(__name__)
    app.secret_key = uuid.uuid4().hex
    app.register_blueprint(
        console_blueprint(engine, guard=lambda request: "bench"), url_prefix="/console"
    )
    return app.test_client()


def _timed(client: Any, path: str, repeats: int, expect: str) -> dict[str, Any]:
    times = []
    size = 0
    for _ in range(repeats):
        started = time.perf_counter()
        answer = client.get(path)
        body = answer.get_data(as_text=True)
        times.append(time.perf_counter() - started)
        assert answer.status_code == 200 and expect in body, (path, answer.status_code)
        size = len(body)
    return {
        "median_s": round(statistics.median(times), 4),
        "max_s": round(max(times), 4),
        "html_kb": round(size / 1024, 1),
    }


def run(repeats: int, cipher: Cipher | None = None) -> dict[str, Any]:
    """The console's pages timed; ``cipher``: the store's payloads sealed
    with it (``bench.encryption`` compares)."""
    logging.getLogger("runner").setLevel(logging.ERROR)
    long_agent, asking_agent, short_agent = _agents()
    with bench_database() as url:
        db = make_engine(url, pool_size=4)
        engine = durable_engine(PostgresStore(db, cipher=cipher), enqueue=lambda run_id: None)
        try:
            started = time.perf_counter()
            long_run = engine.start(long_agent, {"order": "A-1"})
            done = engine.execute(long_run.id)
            assert done is not None and done.steps_used == TIMELINE_STEPS, done
            for i in range(PENDING):
                asking = engine.start(asking_agent, {"order": f"B-{i}"})
                engine.execute(asking.id)
            for i in range(LIST_RUNS - PENDING - 1):
                short = engine.start(short_agent, {"order": f"C-{i}"})
                if i % 4 == 0:  # the rest stay queued: a list of several statuses
                    engine.execute(short.id)
            setup = time.perf_counter() - started
            assert len(engine.inbox(limit=PENDING)) == PENDING
            client = _client(engine)
            client.get(f"/console/runs/{long_run.id}")  # warm up: imports, prepared plans
            result = {
                "repeats": repeats,
                "setup_s": round(setup, 1),
                "runs_list_1000": _timed(
                    client, f"/console/?limit={LIST_RUNS}", repeats, short_agent
                ),
                "timeline_500_steps": _timed(
                    client, f"/console/runs/{long_run.id}", repeats, "Step 499"
                ),
                "inbox_200": _timed(
                    client, f"/console/approvals?limit={PENDING}", repeats, "I will refund it"
                ),
            }
        finally:
            engine.close()
            db.dispose()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    result = run(args.repeats)
    ok = all(
        result[key]["median_s"] < TARGET_SECONDS for key in ("runs_list_1000", "timeline_500_steps")
    )
    result["target"] = f"runs list (1,000) and timeline (500 steps) each < {TARGET_SECONDS} s"
    report("console", result, ok)


if __name__ == "__main__":
    main()
