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


def test_a_server_that_is_not_redis_is_retried_at_the_pace_of_an_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Whatever the listener meets (here a port that answers like an HTTP
    server, as another service that took Redis's port would), it tries again
    every half second and says so once: it never spins."""
    import socket

    caplog.set_level(logging.INFO, "runner.core.coordination.leases")
    accepted = []
    stop = threading.Event()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        listening.settimeout(0.1)
        port = listening.getsockname()[1]

        def serve() -> None:
            while not stop.is_set():
                try:
                    conn, _ = listening.accept()
                except TimeoutError:
                    continue
                accepted.append(time.monotonic())
                with conn:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        client = connect(f"redis://127.0.0.1:{port}/0")
        listener = CancelListener(client, lambda run_id: None).start(wait=0.1)
        try:
            time.sleep(OUTAGE_SECONDS)
        finally:
            listener.stop()
            client.close()
            stop.set()
            server.join(5)
    # Two tries a second, and a little slack: never hundreds.
    assert 1 <= len(accepted) <= 2 * OUTAGE_SECONDS + 3, len(accepted)
    said = records(caplog, logging.WARNING) + records(caplog, logging.ERROR)
    assert len(said) == 1, said
