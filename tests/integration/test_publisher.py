"""The wake-up publisher (runner/core/coordination/live.py): messages go out at once and in
order without waiting for answers, on a Redis that agrees to stop answering
and on one that does not know how; a Redis that goes away costs messages,
never an exception, and the next publish connects again."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from runner.core.coordination.live import Publisher
from store.local import free_port, redis_server_bin


class Server:
    """A redis-server of the test's own (extra arguments allowed)."""

    def __init__(self, root: Path, *extra: str) -> None:
        self.root = root
        self.port = free_port()
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                str(redis_server_bin()),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.02)
        client.close()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    made = Server(tmp_path)
    made.start()
    yield made
    made.stop()


@pytest.fixture
def without_client_command(tmp_path: Path) -> Iterator[Server]:
    made = Server(tmp_path, "--rename-command", "CLIENT", '""')
    made.start()
    yield made
    made.stop()


def _received(url: str, count: int, send: object) -> list[bytes]:
    client = redis.Redis.from_url(url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe("runwright:events:test")
    pubsub.get_message(timeout=1)  # the subscription's confirmation
    assert callable(send)
    send()
    got: list[bytes] = []
    deadline = time.monotonic() + 10
    while len(got) < count and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.5)
        if message is not None:
            got.append(message["data"])
    pubsub.close()
    client.close()
    return got


def _publish_all(publisher: Publisher, count: int) -> None:
    for n in range(count):
        assert publisher.send("runwright:events:test", str(n))


@pytest.mark.parametrize("kind", ["replies off", "no CLIENT command"])
def test_messages_arrive_at_once_and_in_order(
    kind: str, server: Server, without_client_command: Server
) -> None:
    target = server if kind == "replies off" else without_client_command
    errors: list[Exception] = []
    publisher = Publisher(redis.Redis.from_url(target.url), errors.append)
    try:
        got = _received(target.url, 2000, lambda: _publish_all(publisher, 2000))
        assert got == [str(n).encode() for n in range(2000)]
        assert publisher._quiet is (kind == "replies off")
        if kind == "no CLIENT command":
            assert publisher._pending < 2000  # the answers are read as they come
        assert errors == []
        # The connection is still in step: a further message arrives alone.
        assert _received(target.url, 1, lambda: _publish_all(publisher, 1)) == [b"0"]
    finally:
        publisher.close()


def test_a_redis_that_goes_away_costs_messages_not_exceptions(server: Server) -> None:
    errors: list[Exception] = []
    publisher = Publisher(redis.Redis.from_url(server.url), errors.append)
    try:
        assert publisher.send("runwright:events:test", "before")
        server.stop()
        results = [publisher.send("runwright:events:test", "lost") for _ in range(20)]
        assert False in results  # the writes fail once the peer is gone
        assert errors and all(isinstance(e, redis.exceptions.RedisError | OSError) for e in errors)
        server.start()  # same port
        got = _received(server.url, 1, lambda: publisher.send("runwright:events:test", "after"))
        assert got == [b"after"]
    finally:
        publisher.close()
