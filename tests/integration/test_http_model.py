"""The real HTTP path: litellm talks to an OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from runner import Agent, Engine
from store.models import RunStatus, StepKind, Usage
from tests.agents import lookup


class FakeOpenAI:
    """Answers /v1/chat/completions: a tool call first, then a text answer."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
                reply = outer.reply(body)
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        answered = any(m["role"] == "tool" for m in body["messages"])
        if answered:
            message: dict[str, Any] = {"role": "assistant", "content": "It crashes on start."}
            finish = "stop"
        else:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_http_1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps({"q": "crash"})},
                    }
                ],
            }
            finish = "tool_calls"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49},
        }


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_run_completes_through_an_openai_compatible_server(
    engine: Engine, fake_openai: FakeOpenAI
) -> None:
    name = f"http-{uuid.uuid4().hex[:8]}"
    Agent(
        name=name,
        model="openai/gpt-4o-mini",
        instructions="Triage the report.",
        model_settings={
            "api_base": fake_openai.base_url,
            "api_key": "sk-loopback-test",
            "temperature": 0,
        },
        tools=[lookup],
    )
    run = engine.start(name, {"title": "App crashes on start"})
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert done.output == "It crashes on start."
    assert done.usage == Usage(84, 14)

    first, second = fake_openai.requests
    assert first["model"] == "gpt-4o-mini"
    assert first["tools"][0]["function"]["name"] == "lookup"
    assert first["messages"][0] == {"role": "system", "content": "Triage the report."}
    assert fake_openai.headers[0]["authorization"] == "Bearer sk-loopback-test"
    tool_result = next(m for m in second["messages"] if m["role"] == "tool")
    assert tool_result["tool_call_id"] == "call_http_1"
    assert json.loads(tool_result["content"]) == {"q": "crash", "hits": 3}

    steps = engine.steps(run.id)
    assert [s.kind for s in steps] == [StepKind.LLM, StepKind.TOOL, StepKind.LLM]
    # The API key went to the provider only: not into the checkpoint or the steps.
    checkpoint = engine.checkpoint(run.id)
    assert "sk-loopback-test" not in json.dumps(checkpoint.messages if checkpoint else [])
    assert "sk-loopback-test" not in json.dumps([s.output for s in steps], default=str)
