"""The Flask example's event stream over real HTTP: werkzeug's threaded server
on a loopback port, an http.client reader that reads frames as they come, and
wake-ups through real Redis pub/sub (the engine runs on Postgres and Redis).

A client leaves mid-run and comes back with ``Last-Event-ID``, twice; what it
read over its three connections is the run's events, each once, in order. And
a client that left does not leave its reader behind on the server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.client import HTTPConnection, HTTPResponse
from typing import Any

from werkzeug.serving import make_server

from examples.flask_app.app import create_app
from runner import Agent, Engine, RunStatus, tool
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from tests.helpers import run_in_thread, unique, wait_for
from tests.sse_client import Frame, FrameReader

STEPS = 6
GATE_STEP = 4  # the model call of this step waits for the test


@tool
def count_item(n: int) -> str:
    """Count one item."""
    return f"item {n} counted"


@tool
def ship_order(order_id: str) -> str:
    """Ship the order; a person approves it first."""
    return f"{order_id} shipped"


def gated_agent(gate: threading.Event) -> str:
    """Counts STEPS items, 0.1 s a step; step GATE_STEP waits for ``gate``.
    Then it asks to ship (an approval), then answers."""
    name = unique("sse-http")

    def script(request: Request) -> Reply:
        time.sleep(0.1)
        if request.step == GATE_STEP:
            assert gate.wait(30), "the test never opened the gate"
        if request.step <= STEPS:
            return tools(call("count_item", {"n": request.step}))
        if request.step == STEPS + 1:
            return tools(call("ship_order", {"order_id": "A-7"}))
        return text("counted and shipped")

    model = ScriptedModel(name, script)
    Agent(
        name=name, model=model.model, tools=[count_item, ship_order], approvals={"ship_order": True}
    )
    return name


@contextmanager
def serving(app: Any) -> Iterator[tuple[int, list[threading.Thread]]]:
    """The app on 127.0.0.1 (a free port), and the threads that handled its
    requests; the server is shut down and its threads joined on the way out."""
    handlers: list[threading.Thread] = []

    def recorded(environ: Any, start_response: Any) -> Any:
        handlers.append(threading.current_thread())
        return app(environ, start_response)

    server = make_server("127.0.0.1", 0, recorded, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="sse-test-server")
    thread.start()
    try:
        yield server.server_port, handlers
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        for handler in handlers:
            handler.join(10)


class Client:
    """One EventSource connection, read a line at a time as frames arrive."""

    def __init__(self, port: int, run_id: str, last_event_id: int | None = None) -> None:
        self.connection = HTTPConnection("127.0.0.1", port, timeout=15)
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        self.connection.request("GET", f"/runs/{run_id}/events", headers=headers)
        self.response: HTTPResponse = self.connection.getresponse()
        assert self.response.status == 200
        assert self.response.getheader("Content-Type", "").startswith("text/event-stream")
        self.reader = FrameReader()
        self.durable: list[tuple[int, str]] = []  # (id, type) of what it read
        self.statuses: list[str] = []
        self.ended: Any = None

    def frames(self) -> Iterator[Frame]:
        while True:
            line = self.response.readline()
            if not line:
                return
            frame = self.reader.feed(line.decode())
            if frame is None:
                continue
            if frame.id is not None:
                self.durable.append((frame.id, str(frame.event)))
                if frame.event == "status":
                    self.statuses.append(frame.data["data"]["status"])
            if frame.event == "end":
                self.ended = frame.data
            yield frame

    def read_until(self, done: Any) -> None:
        for _ in self.frames():
            if done(self):
                return
        raise AssertionError(f"the stream ended first: {self.durable}")

    @property
    def last_id(self) -> int:
        return self.durable[-1][0]

    def close(self) -> None:
        self.response.close()
        self.connection.close()


def readers(engine: Engine, run_id: str) -> int:
    # Private state: the feed keeps its readers' queues per run, and has no
    # public count of them. A reader that was detached is gone from here.
    return len(engine.deps.feed._sinks.get(run_id, ()))


def test_a_client_that_leaves_mid_run_resumes_with_no_gap_and_no_duplicate(
    engine: Engine,
) -> None:
    app = create_app(engine)
    # Short keep-alives: a gone client is noticed at the next write.
    app.config["LIVE_KEEPALIVE_SECONDS"] = 0.2
    gate = threading.Event()
    run = engine.start(gated_agent(gate))
    worker: threading.Thread | None = None
    clients: list[Client] = []
    with serving(app) as (port, handlers):
        try:
            # 1. Follows the run live from its start, and leaves while the
            #    model call of step GATE_STEP is in flight.
            first = Client(port, run.id)
            clients.append(first)
            assert next(first.frames()).retry == 3000  # the server's reader is attached
            worker, box = run_in_thread(engine, run.id)
            before_gate = 2 * (GATE_STEP - 1)  # an llm and a tool step each
            first.read_until(lambda c: [t for _, t in c.durable].count("step") == before_gate)
            first.close()
            assert engine.get_run(run.id).status is RunStatus.RUNNING
            # The run is stuck at the gate, so no event will come: only a
            # failed keep-alive can tell the server the client is gone.
            wait_for(lambda: readers(engine, run.id) == 0, timeout=10)
            assert worker.is_alive()

            # 2. Comes back after its last id, follows until the run waits for
            #    its approval, and leaves again: the run is quiet then.
            second = Client(port, run.id, first.last_id)
            clients.append(second)
            next(second.frames())
            gate.set()
            second.read_until(lambda c: "waiting" in c.statuses)
            worker.join(15)
            assert box["run"].status is RunStatus.WAITING
            second.close()
            wait_for(lambda: readers(engine, run.id) == 0, timeout=10)

            # 3. Comes back once more and reads to the end while the approved
            #    run finishes.
            third = Client(port, run.id, second.last_id)
            clients.append(third)
            next(third.frames())
            engine.decide(box["run"].waiting.approval_id, True, trusted=True)
            worker, box = run_in_thread(engine, run.id)
            for _ in third.frames():
                pass
            worker.join(15)
            assert box["run"].status is RunStatus.COMPLETED
            assert third.ended == {"reason": "settled"}
        finally:
            # Before the server stops: it joins its threads, which end once
            # their clients are gone.
            gate.set()
            for client in clients:
                client.close()
            if worker is not None:
                worker.join(15)

    stored = [(e.id, e.type.value) for e in engine.store.events(run.id)]
    assert first.durable and second.durable and third.durable
    assert first.durable + second.durable + third.durable == stored  # no gap, no duplicate
    assert readers(engine, run.id) == 0
    assert len(handlers) == 3 and not any(h.is_alive() for h in handlers)
