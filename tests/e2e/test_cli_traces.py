"""An approval decided from the command line is in the run's trace like one
decided elsewhere (issue 26, item 9): with RUNWRIGHT_OTEL, `runwright approve`
exports its span before it exits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runner import Engine
from store.models import RunStatus
from tests.e2e.clirun import make_cli_env, rw
from tests.otel_collector import Collector


@pytest.fixture
def collector() -> Iterator[Collector]:
    with Collector() as running:
        yield running


def test_an_approval_decided_from_the_cli_is_a_span_of_the_run(
    engine: Engine, collector: Collector, database_url: str, redis_url: str, tmp_path: Path
) -> None:
    run = engine.start("approve", {"q": "traced"})
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    assert waiting.waiting is not None
    approval_id = waiting.waiting.approval_id
    env = make_cli_env(database_url, redis_url, tmp_path, engine.settings)
    env.update(RUNWRIGHT_OTEL="1", OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint)
    rw(env, "approve", approval_id, "--token", engine.token(approval_id))
    collector.wait_for(
        lambda got: any(s.name == "runwright.approval refund" for s in got), 30, "the span"
    )
    (decided,) = [s for s in collector.spans() if s.name == "runwright.approval refund"]
    assert decided.attributes["runwright.run_id"] == run.id
    assert collector.errors == []
