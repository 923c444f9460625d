"""The live run feed of both example apps (runner/sse.py), through Flask's and
Django's test clients: ``GET /runs/<id>/events`` (Server-Sent
Events, without tool input). The page that follows a run is the console's
(tests/console).

A real HTTP server, a client that disconnects mid-run and Redis wake-ups are
in tests/e2e/test_sse_http.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from flask.testing import FlaskClient

from runner import Agent, Engine, RunStatus, tool
from runner.sse import full_event, sse_stream
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from tests.helpers import run_in_thread, unique
from tests.sse_client import Frame, durable, parse

# In every tool input, and in nothing a tool returns: the examples' pages must
# never show it (what a run asks for is for the approval token's holder).
SECRET = "order-ref-known-to-approvers-only"
MAX_ID = str(2**63 - 1)
UNKNOWN_RUN = "0190a8f2-0000-7000-8000-000000000000"
BAD_ID_MESSAGE = f"a last event id must be a decimal integer from 0 to {MAX_ID}"

HOSTILE_IDS = [
    "-1",
    "1e3",
    "99999999999999999999",  # 20 digits
    str(2**63),  # 19 digits, one past the largest bigint
    "abc",
    "1\r\nX: y",
    "1\nevent: status",
    "7" * 100_000,
    "",
    " 1",
    "+1",
    "0x10",
    "1.0",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: a digit to str.isdigit, not to us
]


@tool
def inspect_order(order_ref: str) -> str:
    """Look an order up by its reference."""
    return "the order is fine"


@tool
def refund_order(order_ref: str) -> str:
    """Refund an order; a person approves it first."""
    return "refunded"


def make_agent(steps: int, *, refund: bool = False) -> str:
    """An agent that inspects ``steps`` orders, asks to refund one if
    ``refund``, then answers."""
    name = unique("sse")

    def script(request: Request) -> Reply:
        if request.step <= steps:
            return tools(call("inspect_order", {"order_ref": f"{SECRET} {request.step}"}))
        if refund and request.step == steps + 1:
            return tools(call("refund_order", {"order_ref": f"{SECRET} to refund"}))
        return text(f"checked {steps} orders, all fine")

    model = ScriptedModel(name, script)
    Agent(
        name=name,
        model=model.model,
        tools=[inspect_order, refund_order],
        approvals={"refund_order": True},
    )
    return name


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes

    def frames(self) -> list[Frame]:
        assert self.status == 200, self.body
        return parse(self.body)


class Web:
    """One example app through its test client."""

    def __init__(self, kind: str, client: Any) -> None:
        self.kind = kind
        self.client = client

    def get(self, path: str, last_event_id: str | None = None, after: str | None = None) -> Answer:
        query = {} if after is None else {"after": after}
        # Through the WSGI environ: a test client's header checks would refuse
        # the hostile values before the app could.
        environ = {} if last_event_id is None else {"HTTP_LAST_EVENT_ID": last_event_id}
        if self.kind == "flask":
            response = self.client.get(path, query_string=query, environ_overrides=environ)
            try:
                body = response.get_data()
            finally:
                response.close()
            headers = {k.lower(): v for k, v in response.headers.items()}
            return Answer(response.status_code, headers, body)
        response = self.client.get(path, query, **environ)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        headers = {k.lower(): v for k, v in response.headers.items()}
        return Answer(response.status_code, headers, body)


@pytest.fixture(params=["flask", "django"])
def web(request: pytest.FixtureRequest) -> Web:
    return Web(str(request.param), request.getfixturevalue(f"{request.param}_client"))


def stored(engine: Engine, run_id: str) -> list[tuple[int, str]]:
    return [(e.id, e.type.value) for e in engine.store.events(run_id)]


def assert_idle(engine: Engine) -> None:
    """No reader is attached to the engine's feed, and none ever subscribed.
    (Private state: the feed has no public count of its readers.)"""
    assert engine.deps.feed._sinks == {}
    assert engine.deps.feed._listener is None


def completed_run(engine: Engine, steps: int = 3) -> str:
    run = engine.start(make_agent(steps))
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    return run.id


def test_a_live_stream_carries_every_event_once_in_order(
    flask_client: FlaskClient, engine: Engine
) -> None:
    run = engine.start(make_agent(3))
    response = flask_client.get(f"/runs/{run.id}/events")
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-cache"
    assert response.headers["X-Accel-Buffering"] == "no"
    chunks: Iterator[bytes] = iter(response.response)
    try:
        first = next(chunks)  # the reader is attached now, before the run starts
        assert first == b"retry: 3000\n\n"
        worker, box = run_in_thread(engine, run.id)
        body = first + b"".join(chunks)
        worker.join(10)
    finally:
        response.close()
    assert box["run"].status is RunStatus.COMPLETED
    frames = parse(body)
    assert frames[0].retry == 3000
    assert durable(frames) == stored(engine, run.id)
    assert [f.data["data"]["status"] for f in frames if f.event == "status"] == [
        "queued",
        "running",
        "completed",
    ]
    assert frames[-1].event == "end" and frames[-1].data == {"reason": "settled"}
    assert frames[-1].id is None and [f.event for f in frames].count("end") == 1
    for frame in frames:
        if frame.id is not None:  # the JSON agrees with the frame's own lines
            assert frame.data["id"] == frame.id and frame.data["type"] == frame.event
            assert frame.data["run_id"] == run.id
    assert engine.deps.feed._sinks == {}  # the finished stream let go of its reader


def test_a_reconnect_resumes_after_its_last_event_id(web: Web, engine: Engine) -> None:
    run_id = completed_run(engine)
    path = f"/runs/{run_id}/events"
    first = web.get(path).frames()
    everything = durable(first)
    assert everything == stored(engine, run_id)
    assert first[0].retry == 3000 and first[-1].data == {"reason": "settled"}
    middle = len(everything) // 2
    for cut in (0, middle, len(everything) - 1):
        last = everything[cut][0]
        rest = durable(web.get(path, last_event_id=str(last)).frames())
        assert everything[: cut + 1] + rest == everything  # no gap, no duplicate
    # ?after= is the fallback for a first connection that cannot send the header.
    last = str(everything[middle][0])
    assert durable(web.get(path, after=last).frames()) == everything[middle + 1 :]
    # The header wins over the query.
    assert (
        durable(web.get(path, last_event_id=last, after="0").frames()) == everything[middle + 1 :]
    )
    # The largest id there can be is accepted: nothing after it, then the end.
    tail = web.get(path, last_event_id=MAX_ID).frames()
    assert [(f.retry, f.event) for f in tail] == [(3000, None), (None, "end")]
    assert engine.deps.feed._sinks == {}


def test_a_hostile_last_event_id_is_one_clear_400(web: Web, engine: Engine) -> None:
    # A run that is waiting: a stream that started would not end by itself.
    run = engine.start(make_agent(1, refund=True))
    before = stored(engine, run.id)
    path = f"/runs/{run.id}/events"
    for value in HOSTILE_IDS:
        for answer in (web.get(path, last_event_id=value), web.get(path, after=value)):
            assert answer.status == 400, (value, answer.body)
            assert json.loads(answer.body) == {"error": BAD_ID_MESSAGE}
            assert b"X: y" not in answer.body and b"7777" not in answer.body
    assert_idle(engine)  # nothing attached, nothing subscribed
    assert stored(engine, run.id) == before
    assert engine.get_run(run.id).status is RunStatus.QUEUED


def test_an_unknown_run_is_a_404(web: Web, engine: Engine) -> None:
    for run_id in (UNKNOWN_RUN, "not-a-run", "0190A8F2-0000-7000-8000-000000000000"):
        answer = web.get(f"/runs/{run_id}/events")
        assert answer.status == 404, (run_id, answer.body)
        assert "no run with id" in json.loads(answer.body)["error"]
    # A bad Last-Event-ID is refused before the run is looked up.
    assert web.get(f"/runs/{UNKNOWN_RUN}/events", last_event_id="x").status == 400
    assert_idle(engine)


def test_the_examples_never_stream_tool_input(web: Web, engine: Engine) -> None:
    run = engine.start(make_agent(2, refund=True))
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.waiting is not None
    approval_id = waiting.waiting.approval_id
    engine.decide(approval_id, True, "fine", trusted=True)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED

    # The full stream holds the inputs and the approval id: the checks
    # below look where they would be.
    raw = b"".join(sse_stream(engine, run.id, None, shape=full_event))
    assert SECRET.encode() in raw and approval_id.encode() in raw
    # runner.sse's own default is the public shape, as the examples serve.
    public = b"".join(sse_stream(engine, run.id, None))
    assert SECRET.encode() not in public and approval_id.encode() not in public

    answer = web.get(f"/runs/{run.id}/events")
    frames = answer.frames()
    assert durable(frames) == stored(engine, run.id)  # shaped, but no event dropped
    assert SECRET.encode() not in answer.body
    assert approval_id.encode() not in answer.body
    steps = [f.data["data"] for f in frames if f.event == "step"]
    assert all("input" not in step for step in steps)
    tool_steps = [s for s in steps if s["kind"] == "tool"]
    assert [s["output"] for s in tool_steps] == ["the order is fine"] * 2 + ["refunded"]
    calls = [
        c["name"] for s in steps if s["kind"] == "llm" for c in s["output"]["message"]["tool_calls"]
    ]
    assert calls == ["inspect_order", "inspect_order", "refund_order"]
    assert steps[-1]["output"]["message"]["content"] == "checked 2 orders, all fine"
    approvals = [f.data["data"] for f in frames if f.event == "approval"]
    assert [(a["action"], a["tool_name"], a["decision"]) for a in approvals] == [
        ("requested", "refund_order", None),
        ("decided", "refund_order", "approved"),
    ]
    assert all("owner" not in f.data["data"] for f in frames if f.event == "execution")


def test_the_examples_never_stream_who_decided_or_why(web: Web, engine: Engine) -> None:
    approver = "approver-known-to-the-console-only"
    reason = "a deny reason known to the console only"
    run = engine.start(make_agent(1, refund=True))
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.waiting is not None
    engine.decide(waiting.waiting.approval_id, False, reason, trusted=True, by=approver)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED

    # The console's stream (the full shape) shows both to those signed in.
    raw = b"".join(sse_stream(engine, run.id, None, shape=full_event))
    assert approver.encode() in raw and reason.encode() in raw
    public = b"".join(sse_stream(engine, run.id, None))
    assert approver.encode() not in public and reason.encode() not in public

    answer = web.get(f"/runs/{run.id}/events")
    frames = answer.frames()
    assert durable(frames) == stored(engine, run.id)
    assert approver.encode() not in answer.body
    assert reason.encode() not in answer.body
    approvals = [f.data["data"] for f in frames if f.event == "approval"]
    assert [(a["action"], a["tool_name"], a["decision"]) for a in approvals] == [
        ("requested", "refund_order", None),
        ("decided", "refund_order", "denied"),
    ]
    assert all("decided_by" not in a and "reason" not in a for a in approvals)


def test_token_deltas_stream_without_an_id(flask_client: FlaskClient, engine: Engine) -> None:
    run = engine.start(make_agent(1, refund=True))
    waiting = engine.execute(run.id)  # epoch 1, now waiting
    assert waiting is not None and waiting.waiting is not None
    replayed = len(stored(engine, run.id))
    response = flask_client.get(f"/runs/{run.id}/events")
    chunks: Iterator[bytes] = iter(response.response)
    try:
        first = next(chunks)  # attached: what is published now reaches the stream
        feed = engine.deps.feed
        for n, piece in enumerate(["Che", "cking <b>", "</b> it"]):
            feed.token(run.id, {"epoch": 1, "step": 3, "attempt": 1, "n": n, "text": piece})
        engine.decide(waiting.waiting.approval_id, True, trusted=True)
        engine.execute(run.id)
        body = first + b"".join(chunks)
    finally:
        response.close()
    frames = parse(body)
    assert durable(frames) == stored(engine, run.id)
    tokens = [f for f in frames if f.event == "token"]
    assert [f.id for f in tokens] == [None] * 3  # Last-Event-ID stays on durable events
    assert "".join(f.data["data"]["text"] for f in tokens) == "Checking <b></b> it"
    kinds = [f.event for f in frames if f.event not in (None, "end")]
    assert kinds[replayed : replayed + 4] == ["token", "token", "token", "approval"]
    assert frames[-1].data == {"reason": "settled"}


def test_a_stream_ends_with_every_event_of_a_cancel(
    flask_client: FlaskClient, engine: Engine
) -> None:
    # On Postgres, cancelling a waiting run commits its status event before the
    # approval's "withdrawn" event (the runs trigger fires first): the stream
    # must take the rest of that commit after the event that ends it.
    run = engine.start(make_agent(1, refund=True))
    engine.execute(run.id)
    response = flask_client.get(f"/runs/{run.id}/events")
    chunks: Iterator[bytes] = iter(response.response)
    try:
        first = next(chunks)
        engine.cancel(run.id)
        body = first + b"".join(chunks)
    finally:
        response.close()
    frames = parse(body)
    assert durable(frames) == stored(engine, run.id)
    assert frames[-1].data == {"reason": "settled"}


def test_a_quiet_stream_keeps_alive_and_ends_at_its_timeout(
    flask_client: FlaskClient, engine: Engine
) -> None:
    app = flask_client.application
    app.config.update(LIVE_KEEPALIVE_SECONDS=0.05, LIVE_TIMEOUT_SECONDS=0.5)
    run = engine.start(make_agent(1, refund=True))
    engine.execute(run.id)  # waiting: nothing happens until someone decides
    answer = Web("flask", flask_client).get(f"/runs/{run.id}/events")
    frames = answer.frames()
    assert durable(frames) == stored(engine, run.id)
    assert any(f.comments == ["keepalive"] for f in frames)
    assert frames[-1].event == "end" and frames[-1].data == {"reason": "timeout"}
    assert engine.deps.feed._sinks == {}
