"""What an attack on MCP tools broke, and holds now (issue 48), with real
servers written with the ``mcp`` SDK (tests/mcp_servers.py) and real Postgres:

- an effect that the server ran, answered by a gateway in front of it with
  what is not JSON-RPC (a 502, a 429, a page of HTML), is of unknown outcome,
  never "failed" for the model to make again under a new key; over stdio, a
  server that dies after it read the call too. Only a call that never left
  (the connection refused) may fail, and then it is made again later, once;
- a tool schema whose pattern backtracks for ever on a crafted argument
  holds the worker's loop for a bounded time, and the call is not made;
- a credential with a control character in it (a token read from a file with
  its newline) is one clear error naming the header, and no credential is in
  an error message the run stores or a log line."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner import Agent, RetryPolicy
from runner.core.errors import ConfigurationError
from runner.core.mcp import MCPServer
from runner.core.mcp.sessions import close_all, session
from runner.core.runtime import runtime
from runner.core.schemas import CHECK_SECONDS
from runner.testing import ScriptedModel, TestEngine, call, text, tools
from store.models import EffectStatus, RunStatus
from tests.helpers import finishes, regex_timeouts, unique
from tests.mcp_http import Answer, Gateway, HttpServer, calls, serving
from tests.services import ROOT

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _closed_sessions() -> Iterator[None]:
    yield
    close_all()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    yield from serving(tmp_path)


@pytest.fixture
def gateway(http_server: HttpServer) -> Iterator[Gateway]:
    front = Gateway(http_server.url).start()
    try:
        yield front
    finally:
        front.stop()


def hostile_stdio(log: Path, **options: Any) -> MCPServer:
    return MCPServer.stdio(
        "tracker",
        sys.executable,
        args=["-m", "tests.mcp_servers"],
        cwd=str(ROOT),
        env={
            "RUNWRIGHT_TEST_MCP_LOG": str(log),
            "PYTHONPATH": str(ROOT),
            "RUNWRIGHT_TEST_MCP_HOSTILE": "1",
        },
        **options,
    )


def tool_results(model: ScriptedModel, index: int) -> dict[str, str]:
    return {
        m["tool_call_id"]: m["content"] for m in model.calls[index].messages if m["role"] == "tool"
    }


def _error_body(request_id: Any) -> bytes:
    """A server's own JSON-RPC refusal: it did not run the call."""
    error = {"code": -32602, "message": "Invalid params: title is taken"}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()


def _other_id(request_id: Any) -> bytes:
    result = {"content": [{"type": "text", "text": "someone else's"}]}
    return json.dumps({"jsonrpc": "2.0", "id": f"x{request_id}", "result": result}).encode()


HTML = b"<html><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>"

# What a load balancer or an API gateway answers in a bad moment, after it
# passed the call on and the server ran it.
BAD_ANSWERS = {
    "500 text": Answer(500, "text/plain", b"Internal Server Error"),
    "502 html": Answer(502, "text/html", HTML),
    "502 json": Answer(502, "application/json", b'{"message": "Internal server error"}'),
    "504 html": Answer(504, "text/html", b"<html>504 Gateway Time-out</html>"),
    "429": Answer(429, "text/plain", b"Too Many Requests"),
    "200 html": Answer(200, "text/html", HTML),
    "200 json, not JSON-RPC": Answer(200, "application/json", b'{"status": "ok"}'),
    "200 another request's answer": Answer(200, "application/json", _other_id),
    "202": Answer(202, None, b""),
    "200 no content type": Answer(200, None, b"ok"),
}


@pytest.mark.parametrize("answer", list(BAD_ANSWERS.values()), ids=list(BAD_ANSWERS))
def test_an_effect_the_server_ran_behind_a_gateway_that_answered_badly_is_of_unknown_outcome(
    runwright_engine: TestEngine, http_server: HttpServer, gateway: Gateway, answer: Answer
) -> None:
    """The server runs the payment; the gateway answers its POST with what is
    not a JSON-RPC answer. The journal says unknown, the run needs a person,
    the model is told the outcome is unknown (so it does not pay again under
    a new key), and the server ran the call once."""
    gateway.answer("create_issue", answer)
    name = unique("mcp-gateway")
    model = ScriptedModel(
        name,
        [tools(call("tracker_create_issue", {"title": "refund A7"}, id="pay")), text("checking")],
    )
    # A call that waited for call_seconds would outlast the safety net.
    server = MCPServer.http("tracker", gateway.url, connect_seconds=5, call_seconds=600)
    agent = Agent(name=name, model=model.model, mcp=[server])
    run = finishes(
        lambda: runwright_engine.run(agent), "the bad answer was waited out to call_seconds"
    )
    assert run.status is RunStatus.COMPLETED, run.error
    [journaled] = runwright_engine.effects(run.id)
    assert journaled.status is EffectStatus.UNKNOWN, journaled
    assert runwright_engine.get_run(run.id).needs_attention
    said = json.loads(tool_results(model, 1)["pay"])["error"]
    assert said.startswith("outcome unknown: MCP server 'tracker'"), said
    assert "not retried automatically" in said
    assert [c["tool"] for c in calls(http_server.log)] == ["create_issue"]


@pytest.mark.parametrize(
    "answer",
    [
        Answer(200, "application/json", _error_body, forward=False),
        Answer(400, "application/json", _error_body, forward=False),
    ],
    ids=["200", "400"],
)
def test_a_servers_json_rpc_refusal_of_an_effect_is_a_failure_the_model_sees(
    runwright_engine: TestEngine, http_server: HttpServer, gateway: Gateway, answer: Answer
) -> None:
    """A well-formed JSON-RPC error is the server's own refusal: the effect
    failed (it did not run), the model is told why, no person is needed."""
    gateway.answer("create_issue", answer)
    name = unique("mcp-refused")
    model = ScriptedModel(
        name,
        [tools(call("tracker_create_issue", {"title": "refund A7"}, id="pay")), text("noted")],
    )
    server = MCPServer.http("tracker", gateway.url)
    run = runwright_engine.run(Agent(name=name, model=model.model, mcp=[server]))
    assert run.status is RunStatus.COMPLETED, run.error
    [journaled] = runwright_engine.effects(run.id)
    assert journaled.status is EffectStatus.FAILED, journaled
    assert not runwright_engine.get_run(run.id).needs_attention
    said = json.loads(tool_results(model, 1)["pay"])["error"]
    assert "Invalid params: title is taken" in said
    assert calls(http_server.log) == []


@pytest.mark.parametrize("heals", [True, False], ids=["gateway heals", "gateway stays bad"])
def test_a_plain_tools_call_answered_badly_by_a_gateway_is_made_again(
    runwright_engine: TestEngine, http_server: HttpServer, gateway: Gateway, heals: bool
) -> None:
    """A read-only tool's call that met a 502 is made again on a new
    session: the model gets the server's answer, or, if the gateway answers
    so again, a tool error saying what it answered."""
    gateway.answer("lookup", Answer(502, "text/html", HTML))

    def script(request: Any) -> Any:
        if request.step == 1:
            return tools(call("tracker_lookup", {"q": "A7"}, id="look"))
        return text("found")

    model = ScriptedModel(unique("mcp-plain-502"), script)

    async def heal() -> None:  # the gateway recovers once the first call met it
        while not calls(http_server.log):
            await asyncio.sleep(0.01)
        gateway.answer("lookup", None)

    healing = asyncio.run_coroutine_threadsafe(heal(), runtime().loop) if heals else None
    server = MCPServer.http("tracker", gateway.url)
    run = runwright_engine.run(Agent(name=model.name, model=model.model, mcp=[server]))
    if healing is not None:
        healing.result(5)
    assert run.status is RunStatus.COMPLETED, run.error
    assert [c["tool"] for c in calls(http_server.log)] == ["lookup", "lookup"]
    said = tool_results(model, 1)["look"]
    if heals:
        assert json.loads(said) == {"result": "order A7: shipped"}
    else:
        error = json.loads(said)["error"]
        assert "HTTP 502 Bad Gateway with text/html: not a JSON-RPC answer" in error, error


def test_an_effect_whose_connection_was_refused_never_went_out_and_is_made_later_once(
    runwright_engine: TestEngine, http_server: HttpServer, gateway: Gateway
) -> None:
    """The gateway goes away between the effect's probe and its call: the
    call's connection is refused, so it never left. Not unknown: its start
    is taken back, the run waits in queued, and once the gateway is back
    the call is made, once."""

    def script(request: Any) -> Any:
        if request.step == 1:
            gateway.close_after("tools/list")  # the probe is answered; then nothing listens
            return tools(call("tracker_create_issue", {"title": "refund A7"}, id="pay"))
        return text("paid")

    model = ScriptedModel(unique("mcp-refused-conn"), script)
    server = MCPServer.http("tracker", gateway.url, connect_seconds=3)
    agent = Agent(
        name=model.name, model=model.model, mcp=[server], retry=RetryPolicy.attempts(5, backoff=0.5)
    )
    run = runwright_engine.start(agent)
    runwright_engine.engine.execute(run.id)
    waiting = runwright_engine.get_run(run.id)
    assert waiting.status is RunStatus.QUEUED and waiting.retry is not None, waiting
    assert not waiting.needs_attention
    assert runwright_engine.effects(run.id) == []  # taken back: it never went out
    assert calls(http_server.log) == []
    gateway.start()
    done = runwright_engine.run_until_ended(run.id)
    assert done.status is RunStatus.COMPLETED, done.error
    [effect] = runwright_engine.effects(run.id)
    assert effect.status is EffectStatus.COMPLETED and effect.attempts == 1, effect
    assert [c["tool"] for c in calls(http_server.log)] == ["create_issue"]


@pytest.mark.parametrize("tool", ["refund_and_die", "refund_and_garble"])
def test_an_effect_whose_stdio_server_died_after_reading_it_is_of_unknown_outcome(
    runwright_engine: TestEngine, tmp_path: Path, tool: str
) -> None:
    """The server's process runs the refund, then exits (after a line that is
    not JSON-RPC, or none): unknown, never failed."""
    log = tmp_path / "calls.jsonl"
    name = unique("mcp-died")
    model = ScriptedModel(
        name, [tools(call(f"tracker_{tool}", {"order": "A7"}, id="r")), text("?")]
    )
    run = runwright_engine.run(Agent(name=name, model=model.model, mcp=[hostile_stdio(log)]))
    assert run.status is RunStatus.COMPLETED, run.error
    [journaled] = runwright_engine.effects(run.id)
    assert journaled.status is EffectStatus.UNKNOWN, journaled
    assert runwright_engine.get_run(run.id).needs_attention
    assert json.loads(tool_results(model, 1)["r"])["error"].startswith("outcome unknown")
    assert [c["tool"] for c in calls(log)] == [tool]


# A crafted argument for each hostile schema: Python's re takes seconds on
# each (and twice as long per "a" more); the check must hold the loop far less.
CRAFTED = "a" * 24 + "!"
HOSTILE_CALLS = {
    "pattern": ("tracker_redeem", {"code": CRAFTED}),
    "patternProperties": ("tracker_tag", {"labels": {CRAFTED: "x"}}),
    "propertyNames": ("tracker_label", {"fields": {CRAFTED: "x"}}),
}


@pytest.mark.parametrize("hostile", list(HOSTILE_CALLS.values()), ids=list(HOSTILE_CALLS))
def test_a_schema_whose_pattern_backtracks_never_holds_the_loop(
    runwright_engine: TestEngine,
    tmp_path: Path,
    hostile: tuple[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model calls a tool whose schema has a pattern that backtracks for
    ever, with an argument crafted for it. The check matches the patterns
    under its one deadline (what holds the runtime's loop is bounded: the
    deadline's own tests are in tests/unit/test_bounded_schemas.py), the
    model is told its arguments were refused, and the server never gets the
    call."""
    log = tmp_path / "calls.jsonl"
    server = hostile_stdio(log)
    tool, arguments = hostile
    # A first run: the session, the listing and the imports are warm.
    warm = ScriptedModel(
        unique("mcp-warm"), [tools(call("tracker_lookup", {"q": "A1"})), text(".")]
    )
    assert runwright_engine.run(Agent(name=warm.name, model=warm.model, mcp=[server])).status is (
        RunStatus.COMPLETED
    )
    model = ScriptedModel(
        unique("mcp-redos"), [tools(call(tool, arguments, id="crafted")), text("refused")]
    )
    agent = Agent(name=model.name, model=model.model, mcp=[server])
    timeouts = regex_timeouts(monkeypatch)
    run = runwright_engine.run(agent)
    assert run.status is RunStatus.COMPLETED, run.error
    said = json.loads(tool_results(model, 1)["crafted"])["error"]
    assert said.startswith(f"invalid arguments for {tool}") or "could not be checked" in said, said
    # Every search of the crafted call had what was left of the check's deadline.
    assert timeouts, "the crafted arguments were never matched by the bounded check"
    assert all(t is not None and 0 < t <= CHECK_SECONDS for t in timeouts), timeouts
    assert [c["tool"] for c in calls(log)] == ["lookup"]  # the crafted call never went out


def test_a_header_with_a_newline_is_one_clear_error_naming_it_and_the_token_is_nowhere(
    runwright_engine: TestEngine, http_server: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A token read from a file keeps its newline. Declared as a mapping, the
    server is refused at once; from a callable (asked when a session
    connects), the run fails with the same error. The error names the
    header, never the token, and the token is in no stored message, step or
    log line."""
    token = "tok-3f9a1c77e2b4d5"
    with pytest.raises(ConfigurationError, match="'Authorization'") as refused:
        MCPServer.http("tracker", http_server.url, headers={"Authorization": f"Bearer {token}\n"})
    assert token not in str(refused.value)

    server = MCPServer.http(
        "tracker", http_server.url, headers=lambda: {"Authorization": f"Bearer {token}\n"}
    )
    with pytest.raises(ConfigurationError, match="'Authorization'") as refused:
        runtime().run(session(server).list_tools(), timeout=30)
    assert token not in str(refused.value)

    model = ScriptedModel(unique("mcp-newline"), [text("never asked")])
    agent = Agent(
        name=model.name, model=model.model, mcp=[server], retry=RetryPolicy.attempts(2, backoff=0.1)
    )
    with caplog.at_level(logging.DEBUG):
        run = runwright_engine.run(agent)
    assert run.status is RunStatus.FAILED and run.error is not None, run
    assert "'Authorization'" in run.error.message, run.error
    assert token not in run.error.message
    assert token not in repr(runwright_engine.get_run(run.id))
    steps = [(s.input, s.output, s.error) for s in runwright_engine.steps(run.id)]
    assert token not in json.dumps(steps, default=str)
    assert not any(token in r.getMessage() for r in caplog.records)
    assert model.calls == []


def test_a_credential_in_a_servers_error_is_redacted_wherever_it_is_stored_or_logged(
    runwright_engine: TestEngine,
    http_server: HttpServer,
    gateway: Gateway,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server (or what stands in front of it) echoes the credential it was
    sent in its errors: in a refused call, which the model and the run's
    steps see, and in a refused connection, which becomes the run's error
    message and a log line. Each says ``[redacted]`` where the token was."""
    token = "tok-88e1d0c4b7a2f6"

    def echo(request_id: Any) -> bytes:
        error = {"code": -32602, "message": f"token Bearer {token} may not do this"}
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()

    gateway.answer("create_issue", Answer(200, "application/json", echo, forward=False))
    server = MCPServer.http(
        "tracker", gateway.url, headers=lambda: {"Authorization": f"Bearer {token}"}
    )
    model = ScriptedModel(
        unique("mcp-echo"),
        [tools(call("tracker_create_issue", {"title": "x"}, id="c")), text("noted")],
    )
    with caplog.at_level(logging.DEBUG):
        run = runwright_engine.run(Agent(name=model.name, model=model.model, mcp=[server]))
        assert run.status is RunStatus.COMPLETED, run.error
        said = json.loads(tool_results(model, 1)["c"])["error"]
        assert "token [redacted] may not do this" in said, said
        steps = [(s.input, s.output, s.error) for s in runwright_engine.steps(run.id)]
        assert token not in json.dumps(steps, default=str)
        assert token not in json.dumps(runwright_engine.messages(run.id))

        close_all()  # the next run connects again, and is refused
        for method in ("server/discover", "initialize"):
            gateway.answer(method, Answer(200, "application/json", echo, forward=False))
        model = ScriptedModel(unique("mcp-echo-connect"), [text("never asked")])
        agent = Agent(
            name=model.name,
            model=model.model,
            mcp=[server],
            retry=RetryPolicy.attempts(1, backoff=0.1),
        )
        failed = runwright_engine.run(agent)
    assert failed.status is RunStatus.FAILED and failed.error is not None, failed
    assert "[redacted]" in failed.error.message, failed.error
    assert token not in failed.error.message
    assert any("[redacted]" in r.getMessage() for r in caplog.records)
    assert not any(token in r.getMessage() for r in caplog.records)


def test_a_credential_in_a_driver_error_is_redacted_wherever_it_is_stored_or_logged(
    runwright_engine: TestEngine,
    http_server: HttpServer,
    gateway: Gateway,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The gateway echoes the request's credential in a header line the HTTP
    library cannot read, after the server ran the call: the library's error
    holds the token. The effect's outcome is unknown; what the model is
    told, the journal and the ERROR line say ``[redacted]`` in its place."""
    token = "tok-5b0e9d2a61c3f8"
    echoed = f"HTTP/1.1 200 OK\r\nBearer {token}\r\nContent-Length: 0\r\n\r\n".encode()
    gateway.answer("create_issue", Answer(200, None, echoed, raw=True))
    server = MCPServer.http(
        "tracker", gateway.url, headers=lambda: {"Authorization": f"Bearer {token}"}
    )
    model = ScriptedModel(
        unique("mcp-driver-echo"),
        [tools(call("tracker_create_issue", {"title": "x"}, id="c")), text("noted")],
    )
    with caplog.at_level(logging.DEBUG):
        run = runwright_engine.run(Agent(name=model.name, model=model.model, mcp=[server]))
    assert run.status is RunStatus.COMPLETED, run.error
    [journaled] = runwright_engine.effects(run.id)
    assert journaled.status is EffectStatus.UNKNOWN, journaled
    said = json.loads(tool_results(model, 1)["c"])["error"]
    assert said.startswith("outcome unknown") and "illegal header line" in said, said
    assert "[redacted]" in said and token not in said
    steps = [(s.input, s.output, s.error) for s in runwright_engine.steps(run.id)]
    assert token not in json.dumps(steps, default=str)
    assert token not in json.dumps(runwright_engine.messages(run.id))
    assert any("[redacted]" in r.getMessage() for r in caplog.records)
    # Runwright's lines; the HTTP library's own DEBUG trace quotes its error.
    ours = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert not any(token in r.getMessage() for r in ours)
    assert [c["tool"] for c in calls(http_server.log)] == ["create_issue"]
