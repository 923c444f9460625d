"""Cost of saving one step (journal write + step commit) against history length, and the floor.

    python -m bench.checkpoint            # or: make bench

For history lengths 10, 100 and 1000 messages, a run is pre-filled to that
length and then takes steps of ~1 KB messages (an assistant message and a tool
result). The floor is one 1 KB ``INSERT`` + ``COMMIT`` through the same SQLAlchemy
engine; the bare-driver floor (psycopg2 alone) is reported beside it.
Targets: the 1000-message save within 1.3x of the 10-message save; a step's two
writes at most 3x the floor.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import sqlalchemy as sa

from bench.common import bench_database, report
from store.db import make_engine, raw_cursor
from store.models import Fence, Run, StepCommit, StepKind, StepRecord, Usage, utcnow
from store.postgres import PostgresStore
from tests.helpers import new_run

KB = "x" * 1000


def _assistant(i: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "lookup", "arguments": f'{{"q": "{KB[:900]}"}}'},
            }
        ],
    }


def _tool(i: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{i}", "content": KB}


class Stepper:
    """One claimed run that takes steps."""

    def __init__(self, store: PostgresStore, history: int) -> None:
        self.store = store
        run, _ = store.create_run(new_run("bench"))
        claimed = store.claim_run(run.id, "bench", 3600)
        assert isinstance(claimed, Run) and claimed.claim is not None
        self.fence = Fence(run.id, "bench", claimed.claim.epoch)
        prefill = [_tool(i) for i in range(history)]
        store.commit_step(self.fence, StepCommit(step_index=1, base_count=0, new_messages=prefill))
        self.index = 1
        self.count = history

    def step(self) -> None:
        self.index += 1
        now = utcnow()
        assistant = _assistant(self.index)
        self.store.record_llm_step(
            self.fence,
            StepRecord(
                index=self.index,
                kind=StepKind.LLM,
                started_at=now,
                finished_at=now,
                name="bench",
                output=assistant,
                usage=Usage(100, 20),
            ),
        )
        result = _tool(self.index)
        self.store.commit_step(
            self.fence,
            StepCommit(
                step_index=self.index,
                base_count=self.count,
                new_messages=[assistant, result],
                finish_reason="tool_calls",
                tool_steps=[
                    StepRecord(
                        index=self.index,
                        kind=StepKind.TOOL,
                        started_at=now,
                        finished_at=now,
                        name="lookup",
                        tool_call_id=f"call_{self.index}",
                        input={"q": "x"},
                        output=KB,
                    )
                ],
            ),
        )
        self.count += 2


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def run(rounds: int, steps_per_round: int) -> dict[str, Any]:
    lengths = (10, 100, 1000)
    with bench_database() as url:
        engine = make_engine(url, pool_size=2)
        store = PostgresStore(engine)
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE floor_probe (id bigserial PRIMARY KEY, body jsonb)"))
        body = f'{{"content": "{KB}"}}'

        def floor() -> None:
            with engine.begin() as conn:
                conn.execute(
                    sa.text("INSERT INTO floor_probe (body) VALUES (CAST(:b AS jsonb))"),
                    {"b": body},
                )

        def floor_driver() -> None:
            with raw_cursor(engine) as cursor:
                cursor.execute("INSERT INTO floor_probe (body) VALUES (%s)", (body,))
                cursor.connection.commit()

        samples: dict[str, list[float]] = {str(n): [] for n in lengths}
        samples["floor"] = []
        samples["floor_driver"] = []
        for _ in range(3):  # warm the pool and the caches
            floor()
        # Interleave the levels round by round so drift hits them all alike.
        for _ in range(rounds):
            for n in lengths:
                stepper = Stepper(store, n)
                samples[str(n)] += [_timed(stepper.step) for _ in range(steps_per_round)]
            samples["floor"] += [_timed(floor) for _ in range(steps_per_round)]
            samples["floor_driver"] += [_timed(floor_driver) for _ in range(steps_per_round)]
        engine.dispose()

    medians = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "median_ms": {k: round(v, 3) for k, v in medians.items()},
        "samples": {k: len(v) for k, v in samples.items()},
        "ratio_1000_vs_10": round(medians["1000"] / medians["10"], 3),
        "step_vs_floor": {n: round(medians[str(n)] / medians["floor"], 3) for n in lengths},
        # The same against a bare psycopg2 INSERT + COMMIT, without SQLAlchemy.
        "step_vs_driver_floor": {
            n: round(medians[str(n)] / medians["floor_driver"], 3) for n in lengths
        },
        "targets": {"ratio_1000_vs_10": 1.3, "step_vs_floor": 3.0},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    result = run(args.rounds, args.steps)
    ok = result["ratio_1000_vs_10"] <= 1.3 and all(
        v <= 3.0 for v in result["step_vs_floor"].values()
    )
    report("checkpoint", result, ok)


if __name__ == "__main__":
    main()
