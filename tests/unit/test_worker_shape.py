"""``runwright worker-shape`` (runner/cli/shape.py): one process per core not
taken by other services, and enough threads that a process's runs keep its
core three quarters busy while each waits on the model."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from runner.cli.shape import REDIS_BROKER_BURST, broker_advice, shape, worker_shape
from store.errors import InvalidInput


def test_one_process_per_free_core_and_threads_for_the_latency() -> None:
    found = shape(cores=2, latency=1.0, cpu_ms_per_step=3.0)
    # 3 ms a step at 3/4 of a core: 250 steps/s; with 1.003 s a step, 251 in flight.
    assert (found.processes, found.threads, found.runs_in_flight) == (2, 251, 502)
    assert found.steps_per_second == 500.0
    shared = shape(cores=8, latency=5.0, cpu_ms_per_step=4.0, others=2)
    assert (shared.processes, shared.threads) == (6, 939)
    assert shape(cores=1, latency=0.0, cpu_ms_per_step=3.0).threads == 4  # never fewer
    assert shape(cores=4, latency=60.0, cpu_ms_per_step=1.0).threads == 1000  # capped
    assert shape(cores=2, latency=1.0, cpu_ms_per_step=3.0, others=5).processes == 1


@pytest.mark.parametrize(
    "args", [(0, 1.0, 3.0, 0), (2, -1.0, 3.0, 0), (2, 1.0, 0.0, 0), (2, 1.0, 3.0, -1)]
)
def test_nonsense_is_refused(args: tuple[int, float, float, int]) -> None:
    with pytest.raises(InvalidInput):
        shape(*args)


def test_the_command_prints_the_celery_multi_line() -> None:
    out = (
        CliRunner()
        .invoke(worker_shape, ["--cores", "2", "--latency", "1", "--cpu-ms-per-step", "3"])
        .output
    )
    assert "2 worker process(es), each -c 251" in out
    assert "celery multi start 2 -A tasks -l INFO -Q runwright -P threads -c 251" in out


def test_a_redis_broker_past_a_bursts_worth_of_runs_is_told_of_rabbitmq() -> None:
    advice = broker_advice(251, "redis://127.0.0.1:6379/1")
    assert advice is not None and "RabbitMQ" in advice and "251 runs" in advice
    assert broker_advice(251, None) == advice  # the default broker is the leases' Redis
    assert broker_advice(251, "rediss://cache.example:6380/0") is not None
    assert broker_advice(251, "amqp://guest:guest@rabbit:5672//") is None
    assert broker_advice(REDIS_BROKER_BURST, "redis://127.0.0.1:6379/1") is None


@pytest.mark.parametrize(
    ("broker", "told"), [("redis://127.0.0.1:6379/1", True), ("amqp://guest@rabbit//", False)]
)
def test_the_command_names_the_broker_it_advises_against(broker: str, told: bool) -> None:
    args = ["--cores", "2", "--latency", "1", "--cpu-ms-per-step", "3"]
    env = {"RUNWRIGHT_BROKER_URL": broker}
    out = CliRunner().invoke(worker_shape, args, env=env).output
    assert ("Note: with Redis as the broker" in out) is told
    shown = CliRunner().invoke(worker_shape, [*args, "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    assert (json.loads(shown.output)["broker_advice"] is not None) is told
