"""``runwright worker-shape`` (runner/cli/shape.py): one process per core not
taken by other services, and enough threads that a process's runs keep its
core three quarters busy while each waits on the model."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from runner.cli.shape import shape, worker_shape
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
