"""Scripted models for tests and the demo.

A :class:`ScriptedModel` is served through litellm as the custom provider
``scripted``: an agent with ``model="scripted/<name>"`` goes through
``litellm.acompletion`` like any other model.

The reply to a request is chosen by how many assistant messages the request
already holds, not by a counter, so a script resumes correctly in another
process after a crash. ``journal`` (a file path) records every call across
processes, for tests that count model calls over a kill and a resume.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from store.models import Message

ERROR_KINDS = ("rate_limit", "server_error", "unavailable", "timeout", "bad_request", "auth")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Any = field(default_factory=dict)  # a dict, or a raw string (may be bad JSON)
    id: str | None = None

    def encode(self, default_id: str) -> dict[str, Any]:
        arguments = (
            self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)
        )
        return {
            "id": self.id or default_id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }


def call(name: str, arguments: Any = None, *, id: str | None = None) -> ToolCall:
    return ToolCall(name, {} if arguments is None else arguments, id)


@dataclass(frozen=True)
class Reply:
    """One scripted model reply: text, tool calls, or a provider error."""

    content: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    latency: float = 0.0
    usage: tuple[int, int] = (10, 5)
    error: str | None = None  # one of ERROR_KINDS

    def __post_init__(self) -> None:
        if self.error is not None and self.error not in ERROR_KINDS:
            raise ValueError(f"unknown scripted error {self.error!r}; use one of {ERROR_KINDS}")

    def response(self, model: str, step: int = 0) -> dict[str, Any]:
        """The reply in OpenAI's chat-completion shape."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                c.encode(f"call_{step}_{i}_{uuid.uuid4().hex[:8]}")
                for i, c in enumerate(self.tool_calls)
            ]
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "model": model,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if self.tool_calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": self.usage[0],
                "completion_tokens": self.usage[1],
                "total_tokens": sum(self.usage),
            },
        }


def text(content: str, **kwargs: Any) -> Reply:
    return Reply(content=content, **kwargs)


def tools(*calls: ToolCall, **kwargs: Any) -> Reply:
    return Reply(tool_calls=calls, **kwargs)


@dataclass(frozen=True)
class Request:
    messages: list[Message]
    tools: list[dict[str, Any]]

    @property
    def step(self) -> int:
        """1-based: how many assistant messages came before, plus one."""
        return 1 + sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    def tool_results(self) -> list[Message]:
        return [m for m in self.messages if m.get("role") == "tool"]

    @property
    def payload(self) -> Any:
        """The trigger payload, read back from the run's first message (the
        fenced JSON block of ``runner.trigger.render_trigger``)."""
        first = next(m["content"] for m in self.messages if m.get("role") == "user")
        return json.loads(first.removeprefix("```json\n").removesuffix("\n```"))["payload"]


Script = Sequence[Reply] | Callable[[Request], Reply]


class ScriptedModel:
    """A deterministic model. Registers itself as ``scripted/<name>``."""

    def __init__(self, name: str, script: Script, *, journal: str | Path | None = None) -> None:
        self.name = name
        self.script = script
        self.journal = Path(journal) if journal else None
        self.calls: list[Request] = []
        self._lock = threading.Lock()
        register(self)

    @property
    def model(self) -> str:
        return f"scripted/{self.name}"

    @property
    def call_count(self) -> int:
        return len(self.calls)

    def choose(self, request: Request) -> Reply:
        if callable(self.script):
            return self.script(request)
        index = request.step - 1
        if index >= len(self.script):
            raise AssertionError(
                f"scripted model {self.name!r} has {len(self.script)} replies; "
                f"step {request.step} asked for one more"
            )
        return self.script[index]

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> tuple[Reply, int]:
        """The reply to one request, after its latency, and the request's step."""
        request = Request([dict(m) for m in messages], [dict(t) for t in tools])
        with self._lock:
            self.calls.append(request)
        reply = self.choose(request)
        self._record(request, reply)
        if reply.latency:
            await asyncio.sleep(reply.latency)
        return reply, request.step

    def _record(self, request: Request, reply: Reply) -> None:
        if self.journal is None:
            return
        first_user = next(
            (m.get("content") for m in request.messages if m.get("role") == "user"), None
        )
        line = json.dumps(
            {
                "model": self.name,
                "step": request.step,
                "trigger": first_user,
                "pid": os.getpid(),
                "at": time.time(),
                "error": reply.error,
            }
        )
        with self._lock, open(self.journal, "a") as handle:
            handle.write(line + "\n")

    def journal_entries(self) -> list[dict[str, Any]]:
        if self.journal is None or not self.journal.exists():
            return []
        return [json.loads(line) for line in self.journal.read_text().splitlines() if line]

    def assert_called(self, times: int) -> None:
        assert self.call_count == times, (
            f"{self.model} was called {self.call_count} times, not {times}"
        )


_scripts: dict[str, ScriptedModel] = {}
_scripts_lock = threading.Lock()


def register(model: ScriptedModel) -> None:
    with _scripts_lock:
        _scripts[model.name] = model


def lookup(name: str) -> ScriptedModel:
    try:
        return _scripts[name]
    except KeyError:
        raise LookupError(
            f"no scripted model named {name!r}; create ScriptedModel({name!r}, ...) first"
        ) from None
