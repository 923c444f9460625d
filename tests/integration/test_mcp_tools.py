"""Tools from real MCP servers (tests/mcp_servers.py, written with the ``mcp``
SDK), over stdio and streamable HTTP (issue 27, the first part): a run calls a
read-only tool and one with effects; the effect is journaled once under the
run's idempotency key, which reaches the server in the request's ``_meta``;
approvals gate MCP tools by their prefixed name; arguments are checked against
the server's schema; a server's error, and a result too large, go back to the
model as they should. A server that cannot be reached fails the run with
``mcp_unavailable``, never ``internal_error``."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runner import Agent, RetryPolicy
from runner.console.approval_pages import tool_about
from runner.core.mcp import MCPServer
from runner.core.mcp.sessions import close_all
from runner.core.mcp.tools import IDEMPOTENCY_META
from runner.core.steps.toolcalls import MAX_RESULT_CHARS
from runner.testing import ScriptedModel, TestEngine, call, text, tools
from store.local import free_port
from store.models import EffectStatus, RunStatus, StepKind
from tests.helpers import SAFETY_NET, joined, unique, wait_for
from tests.mcp_http import HttpServer, calls, serving
from tests.services import ROOT

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _closed_sessions() -> Iterator[None]:
    """Each test's sessions (and stdio servers) end with it."""
    yield
    close_all()


def stdio_server(log: Path, *, token: str = "", **options: Any) -> MCPServer:
    return MCPServer.stdio(
        "tracker",
        sys.executable,
        args=["-m", "tests.mcp_servers"],
        cwd=str(ROOT),
        # A callable: asked when the session connects, never stored.
        env=lambda: {
            "RUNWRIGHT_TEST_MCP_LOG": str(log),
            "PYTHONPATH": str(ROOT),
            "TRACKER_TOKEN": token,
        },
        **options,
    )


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    yield from serving(tmp_path)


def both_tools_agent(server: MCPServer, **fields: Any) -> tuple[Agent, ScriptedModel]:
    name = unique("mcp")
    model = ScriptedModel(
        name,
        [
            tools(
                call("tracker_lookup", {"q": "A7"}, id="call_lookup"),
                call("tracker_create_issue", {"title": "late parcel"}, id="call_issue"),
            ),
            text("filed"),
        ],
    )
    return Agent(name=name, model=model.model, mcp=[server], **fields), model


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_run_calls_a_read_only_tool_and_an_effect_of_a_real_server(
    runwright_engine: TestEngine,
    tmp_path: Path,
    transport: str,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if transport == "stdio":
        log = tmp_path / "stdio-calls.jsonl"
        server = stdio_server(log, token="secret-token")
    else:
        served = request.getfixturevalue("http_server")
        url, log = served.url, served.log
        server = MCPServer.http("tracker", url, headers=lambda: {"X-Token": "secret-token"})
    agent, model = both_tools_agent(server)
    with caplog.at_level(logging.DEBUG):
        run = runwright_engine.run(agent)
    assert run.status is RunStatus.COMPLETED, run.error
    model.assert_complete()

    # The model saw the server's tools, prefixed, with the server's schemas.
    offered = {t["function"]["name"]: t for t in model.calls[0].tools}
    assert {"tracker_lookup", "tracker_create_issue"} <= set(offered)
    assert offered["tracker_create_issue"]["function"]["parameters"]["required"] == ["title"]
    # Its results, in the order the server wrote them.
    results = {
        m["tool_call_id"]: m["content"] for m in model.calls[1].messages if m["role"] == "tool"
    }
    # The server's structured content, which its SDK wraps as {"result": ...}.
    assert json.loads(results["call_lookup"]) == {"result": "order A7: shipped"}
    assert json.loads(results["call_issue"]) == {"zeta": 1, "number": 7, "title": "late parcel"}
    assert list(json.loads(results["call_issue"])) == ["zeta", "number", "title"]

    # The read-only tool is a plain tool; the other an effect, journaled once,
    # whose idempotency key reached the server.
    [journaled] = runwright_engine.effects(run.id)
    assert (journaled.tool, journaled.status) == ("tracker_create_issue", EffectStatus.COMPLETED)
    seen = calls(log)
    assert [c["tool"] for c in seen] == ["lookup", "create_issue"] or [c["tool"] for c in seen] == [
        "create_issue",
        "lookup",
    ]
    issue = next(c for c in seen if c["tool"] == "create_issue")
    assert issue["key"] == f"{run.id}:call_issue" == journaled.key
    assert next(c for c in seen if c["tool"] == "lookup")["key"] is None
    assert IDEMPOTENCY_META == "io.runwright/idempotency-key"
    # The credentials never reached the record, the event feed or a log line.
    assert "secret-token" not in json.dumps(runwright_engine.messages(run.id))
    steps = [(s.input, s.output, s.error) for s in runwright_engine.steps(run.id)]
    assert "secret-token" not in json.dumps(steps, default=str)
    events = list(runwright_engine.engine.events(run.id, timeout=0, tokens=False))
    assert events and "secret-token" not in json.dumps([e.data for e in events], default=str)
    assert "secret-token" not in repr(runwright_engine.get_run(run.id))
    assert caplog.records and not any("secret-token" in r.getMessage() for r in caplog.records)
    assert "secret-token" not in repr(server)


def test_an_approval_gates_an_mcp_tool_and_a_denial_never_calls_the_server(
    runwright_engine: TestEngine, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    agent, _model = both_tools_agent(stdio_server(log), approvals={"tracker_create_issue": True})
    waiting = runwright_engine.run(agent)
    assert waiting.status is RunStatus.WAITING
    [pending] = runwright_engine.pending(waiting.id)
    assert pending.tool_name == "tracker_create_issue" and pending.input == {"title": "late parcel"}
    done = runwright_engine.deny(waiting.id, reason="not now")
    assert done.status is RunStatus.COMPLETED
    assert [c["tool"] for c in calls(log)] == ["lookup"]  # the denied call never went out

    agent, _model = both_tools_agent(stdio_server(log), approvals={"tracker_create_issue": True})
    waiting = runwright_engine.run(agent)
    # The reviewer sees the tool's server and description next to the arguments.
    [item] = [i for i in runwright_engine.engine.inbox() if i.run.id == waiting.id]
    assert item.about == {"mcp_server": "tracker", "description": "Open an issue in the tracker."}
    shown = tool_about(item.about)
    assert "From MCP server <b>tracker</b>: Open an issue in the tracker." in shown
    done = runwright_engine.approve(waiting.id)
    assert done.status is RunStatus.COMPLETED
    assert [c["tool"] for c in calls(log)].count("create_issue") == 1


def test_bad_arguments_a_server_error_and_a_huge_result_go_back_to_the_model(
    runwright_engine: TestEngine, tmp_path: Path
) -> None:
    name = unique("mcp-bad")
    model = ScriptedModel(
        name,
        [
            tools(
                call("tracker_create_issue", {"title": 5}, id="call_bad"),
                call("tracker_broken", {}, id="call_broken"),
                call("tracker_huge", {}, id="call_huge"),
            ),
            text("noted"),
        ],
    )
    agent = Agent(name=name, model=model.model, mcp=[stdio_server(tmp_path / "calls.jsonl")])
    run = runwright_engine.run(agent)
    assert run.status is RunStatus.COMPLETED, run.error
    results = {
        m["tool_call_id"]: m["content"] for m in model.calls[1].messages if m["role"] == "tool"
    }
    assert "invalid arguments for tracker_create_issue" in results["call_bad"]
    assert "not of type 'string'" in results["call_bad"]
    assert "Error executing tool broken" in results["call_broken"]
    # Cut as every tool's result is.
    assert len(results["call_huge"]) < MAX_RESULT_CHARS + 100
    assert results["call_huge"].endswith("characters]")
    assert calls(tmp_path / "calls.jsonl") == []  # the bad arguments never reached it


@pytest.mark.parametrize(
    ("lists", "offered"),
    [
        (
            {
                "block": [
                    "huge",
                    "broken",
                    "slow",
                    "whoami",
                    "refund_and_die",
                    "retire",
                    "slow_refund",
                    "chatter",
                    "markup",
                ]
            },
            ["tracker_create_issue", "tracker_lookup"],
        ),
        ({"allow": ["lookup", "no_such_tool"]}, ["tracker_lookup"]),
    ],
)
def test_allow_and_block_lists_choose_what_the_model_is_offered(
    runwright_engine: TestEngine, lists: dict[str, list[str]], offered: list[str]
) -> None:
    name = unique("mcp-lists")
    model = ScriptedModel(name, [text("nothing to do")])
    server = MCPServer.stdio(
        "tracker",
        sys.executable,
        args=["-m", "tests.mcp_servers"],
        cwd=str(ROOT),
        env={"PYTHONPATH": str(ROOT)},
        **lists,  # type: ignore[arg-type]
    )
    run = runwright_engine.run(Agent(name=name, model=model.model, mcp=[server]))
    assert run.status is RunStatus.COMPLETED
    assert sorted(t["function"]["name"] for t in model.calls[0].tools) == offered


def test_a_server_that_cannot_be_reached_is_retried_then_fails_with_a_clear_code(
    runwright_engine: TestEngine,
) -> None:
    name = unique("mcp-down")
    model = ScriptedModel(name, [text("never asked")])
    nowhere = MCPServer.http("tracker", f"http://127.0.0.1:{free_port()}/mcp", connect_seconds=3)
    agent = Agent(
        name=name, model=model.model, mcp=[nowhere], retry=RetryPolicy.attempts(2, backoff=1.0)
    )
    run = runwright_engine.start(agent)
    runwright_engine.engine.execute(run.id)
    # Not a failure on the first refusal: the run waits in queued for its retry.
    waiting = runwright_engine.get_run(run.id)
    assert waiting.status is RunStatus.QUEUED and waiting.retry is not None, waiting
    assert "MCP server 'tracker' cannot be reached" in waiting.retry.error
    done = runwright_engine.run_until_ended(run.id)
    # The kit moved its clock over the retry waits: nothing slept them.
    assert runwright_engine.clock.offset > timedelta(0)
    assert done.status is RunStatus.FAILED and done.error is not None
    assert done.error.code == "mcp_unavailable", done.error
    assert "gave up after 3 attempt(s)" in done.error.message
    assert model.calls == []


@pytest.fixture
def refusing_server() -> Iterator[str]:
    """An HTTP endpoint that answers every request 401, as a server does to a
    stale token."""
    import http.server
    import threading

    class Refuse(http.server.BaseHTTPRequestHandler):
        def _refuse(self) -> None:
            self.send_response(401)
            self.send_header("WWW-Authenticate", "Bearer")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_DELETE = _refuse

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/mcp"
    finally:
        server.shutdown()
        server.server_close()


def test_refused_credentials_fail_the_run_mcp_auth_at_once(
    runwright_engine: TestEngine, refusing_server: str
) -> None:
    name = unique("mcp-401")
    model = ScriptedModel(name, [text("never asked")])
    server = MCPServer.http("tracker", refusing_server, headers={"Authorization": "Bearer old"})
    run = runwright_engine.start(Agent(name=name, model=model.model, mcp=[server]))
    run = runwright_engine.engine.execute(run.id)
    # At once: the first execution failed it, with no retry scheduled.
    assert run is not None and run.status is RunStatus.FAILED and run.error is not None
    assert run.retry is None or run.retry.at is None, run.retry
    assert run.error.code == "mcp_auth", run.error
    assert "MCP server 'tracker' refused the credentials (HTTP 401)" in run.error.message
    assert "Bearer old" not in run.error.message


@pytest.mark.parametrize("tool", ["create_issue", "lookup"])
def test_credentials_refused_under_an_open_session_fail_the_run_mcp_auth(
    runwright_engine: TestEngine, http_server: HttpServer, tool: str
) -> None:
    """The token expires between two steps: the session is open and listed,
    and the next call (an effect's, or a plain tool's) meets a 401. The run
    fails ``mcp_auth`` at once, not a tool error the model would retry, and
    the refused call never ran."""
    name = unique("mcp-expired")

    def script(request: Any) -> Any:
        if request.step == 1:
            return tools(call("tracker_lookup", {"q": "A1"}, id="first"))
        http_server.refuse()  # the credential expires while the model thinks
        arguments = {"title": "late"} if tool == "create_issue" else {"q": "A2"}
        return tools(call(f"tracker_{tool}", arguments, id="second"))

    model = ScriptedModel(name, script)
    server = MCPServer.http("tracker", http_server.url, headers={"Authorization": "Bearer old"})
    run = runwright_engine.start(Agent(name=name, model=model.model, mcp=[server]))
    run = runwright_engine.engine.execute(run.id)
    # At once: the first execution failed it, with no retry scheduled.
    assert run is not None and run.status is RunStatus.FAILED and run.error is not None, run
    assert run.retry is None or run.retry.at is None, run.retry
    assert run.error.code == "mcp_auth", run.error
    assert "MCP server 'tracker' refused the credentials (HTTP 401)" in run.error.message
    assert model.call_count == 2  # the model was never handed the refusal as a tool error
    assert [c["arguments"] for c in calls(http_server.log)] == [{"q": "A1"}]
    # Refused, so not run: an effect is not left of unknown outcome.
    assert all(e.status is not EffectStatus.UNKNOWN for e in runwright_engine.effects(run.id))


@pytest.mark.parametrize("tool", ["create_issue", "lookup"])
def test_a_server_gone_between_steps_makes_the_run_wait_in_queued_not_fail(
    runwright_engine: TestEngine, http_server: HttpServer, tool: str
) -> None:
    """The server stops after the run listed it: the next call (an effect's,
    whose start is taken back since nothing went out, or a plain tool's) is
    not a tool error but the step's transient failure. The run waits in
    ``queued``; once the server is back the call is made, once."""
    name = unique("mcp-gone")
    arguments = {"title": "late"} if tool == "create_issue" else {"q": "A2"}

    def script(request: Any) -> Any:
        if request.step == 1:
            return tools(call("tracker_lookup", {"q": "A1"}, id="first"))
        if request.step == 2:
            http_server.stop()  # while the model thinks
            return tools(call(f"tracker_{tool}", arguments, id="second"))
        return text("done")

    model = ScriptedModel(name, script)
    server = MCPServer.http("tracker", http_server.url, connect_seconds=2)
    agent = Agent(
        name=name, model=model.model, mcp=[server], retry=RetryPolicy.attempts(5, backoff=0.5)
    )
    run = runwright_engine.start(agent)
    runwright_engine.engine.execute(run.id)
    waiting = runwright_engine.get_run(run.id)
    assert waiting.status is RunStatus.QUEUED and waiting.retry is not None, waiting
    assert waiting.retry.error.startswith("MCP server 'tracker'"), waiting.retry
    assert runwright_engine.effects(run.id) == []  # nothing went out, so nothing is journaled
    http_server.start()
    done = runwright_engine.run_until_ended(run.id)
    assert done.status is RunStatus.COMPLETED, done.error
    # The second call was made once, after the server came back.
    assert [c["tool"] for c in calls(http_server.log)] == ["lookup", tool]
    if tool == "create_issue":
        [effect] = runwright_engine.effects(run.id)
        assert effect.status is EffectStatus.COMPLETED and effect.attempts == 1
    results = [m for m in runwright_engine.messages(run.id) if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in results] == ["first", "second"]
    assert "MCP server" not in results[1]["content"]


def test_a_stdio_server_writing_what_is_not_json_rpc_keeps_its_session(
    runwright_engine: TestEngine, tmp_path: Path
) -> None:
    """A stdio server that prints a banner, NUL and bytes that are not UTF-8
    to its stdout (the transport): the lines are dropped, its answer still
    arrives, and the next call goes out on the same session."""
    name = unique("mcp-chatter")
    model = ScriptedModel(
        name,
        [
            tools(call("tracker_chatter", {}, id="noise")),
            tools(call("tracker_lookup", {"q": "A3"}, id="after")),
            text("done"),
        ],
    )
    log = tmp_path / "calls.jsonl"
    run = runwright_engine.run(Agent(name=name, model=model.model, mcp=[stdio_server(log)]))
    assert run.status is RunStatus.COMPLETED, run.error
    results = {
        m["tool_call_id"]: m["content"]
        for m in runwright_engine.messages(run.id)
        if m.get("role") == "tool"
    }
    assert json.loads(results["noise"]) == {"result": "still here"}
    assert json.loads(results["after"]) == {"result": "order A3: shipped"}
    assert [c["tool"] for c in calls(log)] == ["lookup"]


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda: MCPServer.stdio("bad name", "x"), "must start with a letter"),
        (lambda: MCPServer.stdio("a" * 30, "x"), "at most 24 characters"),
        (lambda: MCPServer.http("t", "ftp://x"), "must be an http(s) URL"),
        (lambda: MCPServer.stdio("t", ""), "command must be a program"),
        (lambda: MCPServer.stdio("t", "x", allow=["a"], block=["a"]), "both allowed and blocked"),
        (lambda: MCPServer.stdio("t", "x", call_seconds=0), "call_seconds must be"),
    ],
)
def test_a_bad_declaration_is_one_clear_error(declare: Any, message: str) -> None:
    from runner.core.errors import ToolDefinitionError

    with pytest.raises(ToolDefinitionError, match=re.escape(message)):
        declare()


def test_an_agent_refuses_two_servers_of_one_name() -> None:
    from runner.core.errors import InvalidInput

    one = MCPServer.stdio("tracker", "x")
    other = MCPServer.stdio("tracker", "y")
    with pytest.raises(InvalidInput, match="two MCP servers named 'tracker'"):
        Agent(name=unique("mcp-twice"), model="scripted/x", mcp=[one, other], register=False)
    with pytest.raises(InvalidInput, match=r"mcp takes runner\.mcp\.MCPServer"):
        Agent(name=unique("mcp-wrong"), model="scripted/x", mcp=["tracker"], register=False)  # type: ignore[list-item]


def _server_pid(runwright_engine: TestEngine, run_id: str) -> int:
    [result] = [m["content"] for m in runwright_engine.messages(run_id) if m.get("role") == "tool"]
    return int(json.loads(result)["result"])


def test_a_stdio_server_that_died_is_started_again_by_the_next_run(
    runwright_engine: TestEngine, tmp_path: Path
) -> None:
    import os
    import signal

    server = stdio_server(tmp_path / "calls.jsonl")

    def run_whoami() -> int:
        name = unique("mcp-pid")
        model = ScriptedModel(name, [tools(call("tracker_whoami", {})), text("done")])
        run = runwright_engine.run(Agent(name=name, model=model.model, mcp=[server]))
        assert run.status is RunStatus.COMPLETED, run.error
        return _server_pid(runwright_engine, run.id)

    first = run_whoami()
    assert run_whoami() == first  # the pooled session, the same process
    os.kill(first, signal.SIGKILL)
    second = run_whoami()
    assert second != first  # a new process, on a new session, and the run completed


@pytest.mark.parametrize("stop", ["cancel", "timeout", "drain"])
def test_a_call_that_hangs_is_cut_off_by_cancel_timeout_and_drain(
    runwright_database_url: str, tmp_path: Path, stop: str
) -> None:
    """A call that hangs (the server answers in a minute) races the run's
    abort like any tool's: cancel, the execution's timeout and a drain each
    settle the run within about a second (a drain gives the call the drain
    window less two seconds, 1 s here with a drain window of 3 s)."""
    import threading

    from runner import Budget
    from runner.core.runtime import runtime
    from runner.core.settings import Settings
    from runner.testing.kit import TEST_SECRET_KEY

    settings = Settings(secret_key=TEST_SECRET_KEY, drain_seconds=3)
    with TestEngine(runwright_database_url, settings=settings) as kit:
        name = unique("mcp-hang")
        model = ScriptedModel(name, [tools(call("tracker_slow", {})), text("never")])
        # The budget begins before the model call, the server's start and the
        # listing: enough for them on a busy machine, far less than the minute.
        budget = Budget(timeout_ms=8000) if stop == "timeout" else Budget()
        log = tmp_path / "calls.jsonl"
        agent = Agent(name=name, model=model.model, mcp=[stdio_server(log)], budget=budget)
        run = kit.start(agent)
        done: list[Any] = []
        thread = threading.Thread(target=lambda: done.append(kit.engine.execute(run.id)))
        thread.start()
        try:
            wait_for(lambda: [c["tool"] for c in calls(log)] == ["slow"], what="the tool's call")
            if stop == "cancel":
                kit.engine.cancel(run.id)
            elif stop == "drain":
                runtime().drain()
            joined(thread, f"the {stop} did not cut the call off")
        finally:
            thread.join(SAFETY_NET)
            runtime()._draining = False  # a drained worker exits; this test's process goes on
        settled = kit.get_run(run.id)
        if stop == "timeout":
            assert settled.status is RunStatus.FAILED and settled.error is not None
            assert settled.error.code == "timeout"
        else:
            expected = RunStatus.CANCELLED if stop == "cancel" else RunStatus.INTERRUPTED
            assert settled.status is expected, settled
        # Cut off before the server answered: the call has no result.
        assert not [s for s in kit.engine.steps(run.id) if s.kind is StepKind.TOOL]


def test_a_call_the_server_refuses_is_a_tool_error_and_keeps_the_session(
    tmp_path: Path,
) -> None:
    """A tool the server no longer has: its answer is an error result, which
    goes back to the model as :class:`MCPToolError`, not a broken session."""
    from runner.core.errors import MCPToolError
    from runner.core.mcp.sessions import session
    from runner.core.mcp.tools import result_value
    from runner.core.runtime import runtime

    server = stdio_server(tmp_path / "calls.jsonl")
    pooled = session(server)
    refused = runtime().run(pooled.call_tool("no_such_tool", {}), timeout=30)
    with pytest.raises(MCPToolError, match="no_such_tool"):
        result_value(refused)
    assert pooled.open  # the same session goes on
    answer = runtime().run(pooled.call_tool("lookup", {"q": "B2"}), timeout=30)
    assert answer.structured_content == {"result": "order B2: shipped"}


def test_an_effect_whose_server_died_mid_call_is_of_unknown_outcome_and_never_repeated(
    runwright_engine: TestEngine, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    name = unique("mcp-died")
    model = ScriptedModel(
        name,
        [tools(call("tracker_refund_and_die", {"order": "A7"}, id="call_refund")), text("hm")],
    )
    run = runwright_engine.run(Agent(name=name, model=model.model, mcp=[stdio_server(log)]))
    assert run.status is RunStatus.COMPLETED, run.error
    # The server saw the call once; its journal says unknown, the run needs a person.
    assert [c["tool"] for c in calls(log)] == ["refund_and_die"]
    [journaled] = runwright_engine.effects(run.id)
    assert journaled.status is EffectStatus.UNKNOWN
    assert runwright_engine.get_run(run.id).needs_attention
    [told] = [m["content"] for m in model.calls[1].messages if m["role"] == "tool"]
    said = json.loads(told)["error"]
    assert said.startswith("outcome unknown: MCP server 'tracker' gave no answer")
    assert "not retried automatically" in said


def test_the_offered_tools_are_recorded_and_a_change_between_executions_too(
    runwright_engine: TestEngine, tmp_path: Path
) -> None:
    """The first step records the MCP tools it offers; after an approval, the
    server has retired one: the next step records what changed, the event
    feed carries it, and the model's call of the retired tool is a tool error."""
    from runner.core.mcp.sessions import session
    from runner.core.runtime import runtime

    server = stdio_server(tmp_path / "calls.jsonl", list_cache_seconds=0)
    name = unique("mcp-changed")
    model = ScriptedModel(
        name,
        [
            tools(call("tracker_create_issue", {"title": "late"}, id="call_issue")),
            tools(call("tracker_lookup", {"q": "A7"}, id="call_gone")),
            text("done"),
        ],
        strict=False,  # it calls a tool the server retired: the model is told
    )
    agent = Agent(
        name=name, model=model.model, mcp=[server], approvals={"tracker_create_issue": True}
    )
    waiting = runwright_engine.run(agent)
    assert waiting.status is RunStatus.WAITING
    runtime().run(session(server).call_tool("retire", {"name": "lookup"}), timeout=30)
    done = runwright_engine.approve(waiting.id)
    assert done.status is RunStatus.COMPLETED, done.error

    llm = [s for s in runwright_engine.steps(done.id) if s.kind.value == "llm"]
    first = llm[0].input
    assert isinstance(first, dict) and "tracker_lookup" in first["mcp_tools"]
    assert "mcp_tools_changed" not in first
    changed = llm[1].input
    assert isinstance(changed, dict)
    assert changed["mcp_tools_changed"] == {
        "added": [],
        "removed": ["tracker_lookup"],
        "changed": [],
    }
    assert "tracker_lookup" not in changed["mcp_tools"]
    assert llm[2].input is None  # nothing new to record
    # The event feed carries the change with the step.
    events = list(runwright_engine.engine.events(done.id, timeout=0, tokens=False))
    recorded = [
        e.data["input"]
        for e in events
        if e.type.value == "step" and e.data.get("kind") == "llm" and e.data.get("input")
    ]
    assert [bool(r.get("mcp_tools_changed")) for r in recorded] == [False, True]
    # The model's call of the retired tool came back as a tool error.
    [gone] = [m for m in model.calls[2].messages if m.get("tool_call_id") == "call_gone"]
    assert "unknown tool 'tracker_lookup'" in gone["content"]


def test_a_fork_compares_its_tools_with_what_its_origin_was_offered(
    runwright_engine: TestEngine, tmp_path: Path
) -> None:
    """A fork has its origin's record of the MCP tools (as it stood at the
    fork's step): forked while the server's list is unchanged, it records
    nothing new; forked after the server retired a tool, its first step
    records the change. The origin is not written."""
    from runner.core.mcp.sessions import session
    from runner.core.runtime import runtime

    server = stdio_server(tmp_path / "calls.jsonl", list_cache_seconds=0)
    name = unique("mcp-fork")
    model = ScriptedModel(
        name,
        [tools(call("tracker_create_issue", {"title": "late"}, id="c1")), text("done")],
    )
    origin = runwright_engine.run(Agent(name=name, model=model.model, mcp=[server]))
    assert origin.status is RunStatus.COMPLETED, origin.error
    before = [s.input for s in runwright_engine.steps(origin.id)]

    def fork_inputs() -> list[Any]:
        fork = runwright_engine.engine.fork(origin.id, 1, rerun_effects=True)
        done = runwright_engine.run_until_ended(fork.id)
        assert done.status is RunStatus.COMPLETED, done.error
        return [s.input for s in runwright_engine.steps(fork.id) if s.kind.value == "llm"]

    assert fork_inputs() == [None]  # the same tools as the origin's model saw
    runtime().run(session(server).call_tool("retire", {"name": "lookup"}), timeout=30)
    [changed] = fork_inputs()
    assert changed["mcp_tools_changed"] == {
        "added": [],
        "removed": ["tracker_lookup"],
        "changed": [],
    }
    assert "tracker_lookup" not in changed["mcp_tools"]
    assert [s.input for s in runwright_engine.steps(origin.id)] == before


def test_a_listing_of_thousands_of_tools_offers_a_model_at_most_128(
    runwright_engine: TestEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """A server listing 2,000 tools: the model is offered its first 128, with
    one WARNING that says how to choose; ``allow=`` reaches one far down the
    list, and calling it works."""
    from runner.core.mcp.tools import MAX_OFFERED

    def many(**options: Any) -> MCPServer:
        return MCPServer.stdio(
            "tracker",
            sys.executable,
            args=["-m", "tests.mcp_servers"],
            cwd=str(ROOT),
            env={"PYTHONPATH": str(ROOT), "RUNWRIGHT_TEST_MCP_MANY": "2000"},
            **options,
        )

    name = unique("mcp-many")
    model = ScriptedModel(name, [text("too many to choose from")])
    with caplog.at_level(logging.WARNING, logger="runner.core.mcp"):
        run = runwright_engine.run(Agent(name=name, model=model.model, mcp=[many()]))
    assert run.status is RunStatus.COMPLETED, run.error
    assert len(model.calls[0].tools) == MAX_OFFERED == 128
    [warned] = [r.getMessage() for r in caplog.records if "offers more than" in r.getMessage()]
    assert "MCP server 'tracker' offers more than 128 tools" in warned
    assert "choose with allow=[...]" in warned

    name = unique("mcp-few")
    model = ScriptedModel(
        name, [tools(call("tracker_many_1999", {"n": 5}, id="far")), text("done")]
    )
    agent = Agent(name=name, model=model.model, mcp=[many(allow=["many_1999"])])
    run = runwright_engine.run(agent)
    assert run.status is RunStatus.COMPLETED, run.error
    assert [t["function"]["name"] for t in model.calls[0].tools] == ["tracker_many_1999"]
    [result] = [m for m in model.calls[1].messages if m.get("tool_call_id") == "far"]
    assert json.loads(result["content"]) == {"result": 5}
