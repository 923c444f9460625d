"""A thread's chat stream (runner/chat/uistream.py) read by the Vercel AI
SDK's own client code: a Flask app with the chat blueprint on a loopback
port, and ``tests/js/read_chat_stream.mjs`` under Node, which parses the
stream with the ``ai`` package (``parseJsonEventStream`` with its
``uiMessageChunkSchema``) and rebuilds the messages (``readUIMessageStream``).
``make js`` installs the package from tests/js/package-lock.json.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.client import HTTPConnection
from typing import Any

import pytest
from flask import Flask

from runner import Agent, Engine, RunStatus, tool
from runner.chat.flask import chat_blueprint
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import StepKind
from tests.e2e.test_sse_http import serving
from tests.helpers import unique
from tests.services import ROOT

JS = ROOT / "tests" / "js"
READER = JS / "read_chat_stream.mjs"
AGUI_READER = JS / "read_agui_stream.mjs"


@tool
def order_status(order_id: str) -> dict[str, str]:
    """The status of an order."""
    return {"order_id": order_id, "status": "shipped"}


def chat_agent() -> str:
    """Says what it does, calls a tool, answers; a later run of the thread
    answers in words."""
    name = unique("chat")

    def script(request: Request) -> Any:
        if request.step == 1:
            return tools(call("order_status", {"order_id": "A-7"}), content="Let me look.")
        if request.step == 2:
            return text("Order A-7 has shipped.")
        return text("You are welcome.")

    Agent(name=name, model=ScriptedModel(name, script).model, tools=[order_status])
    return name


@pytest.fixture
def node() -> str:
    found = shutil.which("node")
    if found is None:
        pytest.skip("node is not installed: the AI SDK's client runs under Node")
    if not all((JS / "node_modules" / name).is_dir() for name in ("ai", "@ag-ui/client")):
        pytest.fail("the tests' Node packages are missing: run `make js` (npm ci in tests/js)")
    return found


def guard(request: Any) -> str | None:
    user = request.headers.get("X-User")
    return user or None


def abilities(request: Any) -> list[str]:
    return [a for a in request.headers.get("X-Abilities", "").split(",") if a]


@pytest.fixture
def port(engine: Engine) -> Iterator[int]:
    app = Flask(__name__)
    app.register_blueprint(
        chat_blueprint(engine, guard=guard, abilities=abilities, timeout=20), url_prefix="/chat"
    )

    @app.before_request
    def sign_in_the_reader() -> None:
        # The Node client sends no headers of the app's: it reads as someone
        # who may see payloads, unless the test's request says otherwise.
        from flask import request

        environ = request.environ
        environ.setdefault("HTTP_X_USER", "ada")
        environ.setdefault("HTTP_X_ABILITIES", "see_runs,see_payloads")

    with serving(app) as (bound, _handlers):
        yield bound


def thread_of_two_runs(engine: Engine) -> tuple[str, list[str]]:
    name, thread = chat_agent(), unique("thread")
    runs = []
    for message in ("Where is order A-7?", "Thanks!"):
        run = engine.send(thread, message, agent=name, by="ada")
        done = engine.execute(run.id)
        assert done is not None and done.status is RunStatus.COMPLETED
        runs.append(run.id)
    return thread, runs


def read(node: str, port: int, thread: str, cut: int | None = None) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/chat/threads/{thread}/stream"
    args = [node, str(READER), url] + ([] if cut is None else ["--cut", str(cut)])
    done = subprocess.run(args, cwd=JS, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    read: dict[str, Any] = json.loads(done.stdout)
    return read


def journal(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    """What the run's journal says its assistant message holds, as the AI SDK
    writes a message's parts: text, and each tool call with its result."""
    parts: list[dict[str, Any]] = []
    results = {s.tool_call_id: s.output for s in engine.steps(run_id) if s.kind is StepKind.TOOL}
    for step in engine.steps(run_id):
        if step.kind is not StepKind.LLM:
            continue
        message = step.output["message"]  # type: ignore[index]
        parts.append({"type": "step-start"})
        if message.get("content"):
            parts.append({"type": "text", "text": message["content"], "state": "done"})
        for made in message.get("tool_calls") or []:
            parts.append(
                {
                    "type": "dynamic-tool",
                    "toolName": made["function"]["name"],
                    "toolCallId": made["id"],
                    "state": "output-available",
                    "input": json.loads(made["function"]["arguments"]),
                    "output": results[made["id"]],
                }
            )
    return parts


def shown(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A rebuilt message's parts, without what the SDK adds of its own."""
    keep = ("type", "text", "state", "toolName", "toolCallId", "input", "output")
    return [{k: part[k] for k in keep if k in part} for part in message["parts"]]


def test_the_ai_sdk_rebuilds_the_thread_as_the_journal_has_it(
    engine: Engine, node: str, port: int
) -> None:
    thread, runs = thread_of_two_runs(engine)
    rebuilt = read(node, port, thread)
    messages = rebuilt["messages"]
    assert [m["id"] for m in messages] == runs
    assert all(m["role"] == "assistant" for m in messages)
    for message, run_id in zip(messages, runs, strict=True):
        assert shown(message) == journal(engine, run_id)
        assert message["metadata"] == {"run_id": run_id, "status": "completed"}
    first = shown(messages[0])
    assert [p["type"] for p in first] == [
        "step-start",
        "text",
        "dynamic-tool",
        "step-start",
        "text",
    ]
    tool_part = first[2]
    assert tool_part["input"] == {"order_id": "A-7"}
    assert tool_part["output"] == {"order_id": "A-7", "status": "shipped"}
    # The thread's history, as the model sees it, says the same.
    history = engine.checkpoint(runs[1])
    assert history is not None
    said = [m["content"] for m in history.messages if m["role"] == "assistant" and m["content"]]
    assert said == [p["text"] for m in messages for p in shown(m) if p["type"] == "text"]
    assert rebuilt["chunks"][-1] == {
        "type": "finish",
        "finishReason": "stop",
        "messageMetadata": {"run_id": runs[1], "status": "completed"},
    }


def test_a_stream_cut_in_the_middle_resumes_without_a_gap_or_a_duplicate(
    engine: Engine, node: str, port: int
) -> None:
    thread, _runs = thread_of_two_runs(engine)
    whole = read(node, port, thread)
    chunks = whole["chunks"]
    kinds = [c["type"] for c in chunks]
    # Cut after the first part, inside a text (after its start), between a
    # tool call and its result, and just before the end.
    cuts = sorted(
        {1, kinds.index("text-start") + 1, kinds.index("tool-input-available") + 1, len(chunks) - 1}
    )
    for cut in cuts:
        resumed = read(node, port, thread, cut=cut)
        assert resumed["cut_after"] is not None, cut
        assert resumed["chunks"] == chunks, f"cut after {cut} parts"
        assert resumed["messages"] == whole["messages"], f"cut after {cut} parts"


def test_ag_uis_client_rebuilds_the_thread_from_the_agui_stream(
    engine: Engine, node: str, port: int
) -> None:
    thread, runs = thread_of_two_runs(engine)
    url = f"http://127.0.0.1:{port}/chat/threads/{thread}/agui"
    done = subprocess.run(
        [node, str(AGUI_READER), url], cwd=JS, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    rebuilt = json.loads(done.stdout)
    kinds = [e["type"] for e in rebuilt["events"]]
    assert kinds.count("RUN_STARTED") == kinds.count("RUN_FINISHED") == 2
    assert [e["runId"] for e in rebuilt["events"] if e["type"] == "RUN_STARTED"] == runs
    # The journal, as AG-UI's messages: the assistant's texts, its tool
    # calls with their arguments, and the tools' results.
    expected: list[Any] = []
    for run_id in runs:
        results = {
            s.tool_call_id: s.output for s in engine.steps(run_id) if s.kind is StepKind.TOOL
        }
        for step in engine.steps(run_id):
            if step.kind is not StepKind.LLM:
                continue
            message = step.output["message"]  # type: ignore[index]
            if message.get("content"):
                expected.append(("assistant", message["content"]))
            for made in message.get("tool_calls") or []:
                arguments = json.loads(made["function"]["arguments"])
                expected.append(("call", made["id"], made["function"]["name"], arguments))
                expected.append(("tool", made["id"], results[made["id"]]))
    got: list[Any] = []
    for message in rebuilt["messages"]:
        if message["role"] == "tool":
            got.append(("tool", message["toolCallId"], json.loads(message["content"])))
            continue
        assert message["role"] == "assistant"
        if message.get("content"):
            got.append(("assistant", message["content"]))
        for made in message.get("toolCalls") or []:
            arguments = json.loads(made["function"]["arguments"])
            got.append(("call", made["id"], made["function"]["name"], arguments))
    assert got == expected
    assert ("tool", expected[2][1], {"order_id": "A-7", "status": "shipped"}) in got


@tool
def refund(order_id: str, amount: int) -> str:
    """Refund an order; a person approves it first."""
    return f"refunded {amount} on {order_id}"


FINAL = "The refund of 30 on order A-7 is done; it shows in three days."


def waiting_for_a_refund(engine: Engine) -> tuple[str, str]:
    """A thread whose run said a word, asked to refund, and waits for a
    person; its final text streams (``Agent(stream=True)``)."""
    name, thread = unique("chat-live"), unique("thread")

    def script(request: Request) -> Any:
        if request.step == 1:
            return tools(call("refund", {"order_id": "A-7", "amount": 30}), content="Refunding.")
        return text(FINAL)

    model = ScriptedModel(name, script, chunk_delay=0.01)
    Agent(name=name, model=model.model, tools=[refund], approvals={"refund": True}, stream=True)
    run = engine.start(name, {"question": "Refund A-7"}, thread=thread)
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING
    return thread, run.id


def read_while_deciding(
    engine: Engine, node: str, port: int, thread: str, run_id: str, *args: str
) -> dict[str, Any]:
    """What node rebuilt of the thread's stream, read while the test
    approves the refund once the stream has shown the request, and the run
    finishes."""
    url = f"http://127.0.0.1:{port}/chat/threads/{thread}/stream"
    reader = subprocess.Popen(
        [node, str(READER), url, *args],
        cwd=JS,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stderr is not None
        seen: list[str] = []
        for line in reader.stderr:  # the parts' types, as they arrive
            seen.append(line.strip())
            if seen[-1] == "data-approval":
                break
        assert seen[-1] == "data-approval", seen
        # The stream now follows the run live: decide, and let it finish.
        [request] = engine.approvals(run_id)
        engine.decide(request.approval_id, True, by="ada", trusted=True)
        finishing = threading.Thread(target=engine.execute, args=(run_id,))
        finishing.start()
        out, err = reader.communicate(timeout=60)
        finishing.join(30)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.communicate()
    assert reader.returncode == 0, err
    assert engine.get_run(run_id).status is RunStatus.COMPLETED
    rebuilt: dict[str, Any] = json.loads(out)
    return rebuilt


def test_a_live_run_streams_its_text_as_it_comes_and_its_approval_as_a_data_part(
    engine: Engine, node: str, port: int
) -> None:
    thread, run_id = waiting_for_a_refund(engine)
    rebuilt = read_while_deciding(engine, node, port, thread, run_id)
    [message] = rebuilt["messages"]
    parts = shown(message)
    approval = next(p for p in message["parts"] if p["type"] == "data-approval")
    [request] = engine.approvals(run_id)
    assert [p for p in parts if p["type"] != "data-approval"] == journal(engine, run_id)
    assert approval["id"] == request.approval_id
    assert approval["data"]["status"] == "approved"
    assert approval["data"]["input"] == {"order_id": "A-7", "amount": 30}
    assert "ada" not in json.dumps(approval)  # who decided stays in the console
    # The final text came as the model streamed it: many deltas, one text part.
    final = [c for c in rebuilt["chunks"] if c.get("id") == "text-2"]
    deltas = [c["delta"] for c in final if c["type"] == "text-delta"]
    assert len(deltas) >= 2 and "".join(deltas) == FINAL
    assert final[0]["type"] == "text-start" and final[-1]["type"] == "text-end"


# The parts a client has read when it is three deltas into the final text:
# the replay (start; the first step's start-step, text, tool call and
# finish-step; the request), the decision and the tool's result, then live
# the final step's start-step, text-start and three deltas.
THREE_DELTAS_IN = 8 + 2 + 2 + 3


def test_a_live_text_cut_in_the_middle_resumes_without_a_gap_or_a_duplicate(
    engine: Engine, node: str, port: int
) -> None:
    thread, run_id = waiting_for_a_refund(engine)
    cut = str(THREE_DELTAS_IN)
    rebuilt = read_while_deciding(engine, node, port, thread, run_id, "--cut", cut)
    # The client left three deltas into the text: its last id says how much it had.
    *_, step, chars = rebuilt["cut_after"].split(":")
    # Inside the final step's text, a whole number of the scripted model's
    # four-character deltas in (three, unless the decision's parts came after
    # a delta on a busy machine).
    assert step == "2" and 0 < int(chars) < len(FINAL) and int(chars) % 4 == 0, chars
    [message] = rebuilt["messages"]
    assert [p for p in shown(message) if p["type"] != "data-approval"] == journal(engine, run_id)
    final = [c for c in rebuilt["chunks"] if c.get("id") == "text-2"]
    assert [c["type"] for c in final].count("text-start") == 1
    assert "".join(c["delta"] for c in final if c["type"] == "text-delta") == FINAL
    kinds = [c["type"] for c in rebuilt["chunks"]]
    assert kinds.count("start-step") == kinds.count("finish-step") == 2
    assert kinds.count("finish") == 1


def get(port: int, path: str, headers: dict[str, str]) -> tuple[int, str]:
    connection = HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_the_stream_follows_the_consoles_access_rules(engine: Engine, port: int) -> None:
    thread, runs = thread_of_two_runs(engine)
    path = f"/chat/threads/{thread}/stream"
    nobody = {"X-User": "", "X-Abilities": "see_runs,see_payloads"}
    status, body = get(port, path, nobody)
    assert status == 403 and "Sign in" in body
    status, body = get(port, path, {"X-Abilities": "see_runs"})
    assert status == 403 and "see_payloads" in body
    assert "Order A-7" not in body
    status, _ = get(port, path, {"X-Abilities": "see_payloads"})
    assert status == 403
    status, body = get(port, path, {"X-Abilities": "see_runs,see_payloads"})
    assert status == 200 and "Order A-7 has shipped." in body
    assert body.endswith("data: [DONE]\n\n")
    # Who read which run's payloads is in the audit log, once a run.
    viewed = [e for e in engine.audit_log(limit=50) if e.action == "viewed_payloads"]
    assert sorted(e.run_id for e in viewed) == sorted(runs)
    # A hostile resume point is refused without an echo; a thread without runs is 204.
    status, body = get(port, path, {"Last-Event-ID": "<script>"})
    assert status == 400 and "<script>" not in body
    elsewhere = engine.start(chat_agent()).id  # a run of no thread
    status, body = get(port, path, {"Last-Event-ID": f"{elsewhere}:5:0"})
    assert status == 400 and "not in this thread" in body
    status, _ = get(port, f"/chat/threads/{unique('empty')}/stream", {})
    assert status == 204
    status, body = get(port, "/chat/threads/a%00b/stream", {})
    assert status == 400 and "NUL" in body
