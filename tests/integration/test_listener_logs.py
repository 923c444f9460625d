"""The cancel listener across a Redis outage (issue 26): one WARNING when it
loses Redis, silence while it retries, one INFO when it is subscribed again.
A Redis server of the test's own, stopped and started again."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.core.coordination.leases import CancelListener, Leases, connect
from store.local import LocalRedis, free_port
from tests.e2e.cluster import wait_until

OUTAGE_SECONDS = 3.0  # six of the listener's retries


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalRedis]:
    server = LocalRedis(tmp_path / "redis", free_port())
    server.start()
    yield server
    server.stop()


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "runner.core.coordination.leases"
        and r.levelno == level
        and "cancel listener" in r.getMessage()
    ]


def test_a_redis_outage_logs_one_warning_and_one_info(
    server: LocalRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "runner.core.coordination.leases")
    got: list[str] = []
    arrived = threading.Event()

    def on_cancel(run_id: str) -> None:
        got.append(run_id)
        arrived.set()

    client = connect(server.url())
    leases = Leases(client)
    listener = CancelListener(client, on_cancel).start()
    try:
        assert leases.publish_cancel("before") == 1
        assert arrived.wait(5)

        server.kill()  # as a crash: the listener's connection drops
        wait_until(lambda: records(caplog, logging.WARNING), 10, "the listener's warning")
        time.sleep(OUTAGE_SECONDS)
        server.start()
        # Subscribed again once a publish reaches it (the INFO comes just before).
        wait_until(lambda: leases.publish_cancel("after") == 1, 15, "the listener back")
        wait_until(lambda: "after" in got, 5, "the cancel after the restart")
    finally:
        listener.stop()
        client.close()

    [warning] = records(caplog, logging.WARNING)
    assert warning.startswith("cancel listener lost Redis (")
    assert "reconnecting" in warning
    [info] = records(caplog, logging.INFO)
    assert info.startswith("cancel listener is subscribed again after ")
    away = float(info.split(" after ")[1].split(" s ")[0])
    assert OUTAGE_SECONDS <= away < OUTAGE_SECONDS + 15
