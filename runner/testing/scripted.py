"""Scripted models for tests and the demo.

A :class:`ScriptedModel` is served through litellm as the custom provider
``scripted``: an agent with ``model="scripted/<name>"`` goes through
``litellm.acompletion`` like any other model.

The reply to a request is chosen by how many assistant messages the request
already holds, not by a counter, so a script resumes correctly in another
process after a crash. ``journal`` (a file path) records every call across
processes, for tests that count model calls over a kill and a resume.
``price`` (USD per input and per output token) puts the model in litellm's cost
map at that price, so runs record a cost; without it the model is free.
Called with ``stream=True``, a scripted model streams its reply in chunks
(:meth:`Reply.chunks`), ``chunk_delay`` seconds apart.

``runner.model`` imports this module, and registers the provider, only when a
``scripted/`` model is first called: production processes never load it.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import InvalidInput, RunwrightError
from store.models import Message

# Scripted provider errors, by the name of the litellm exception each raises.
_LITELLM_ERRORS = {
    "rate_limit": "RateLimitError",
    "server_error": "InternalServerError",
    "unavailable": "ServiceUnavailableError",
    "timeout": "Timeout",
    "bad_request": "BadRequestError",
    "auth": "AuthenticationError",
}
ERROR_KINDS = tuple(_LITELLM_ERRORS)
SCRIPTED = "scripted/"


class ScriptedModelNotFound(RunwrightError):
    """No scripted model has that name."""


class ScriptExhausted(RunwrightError):
    """The scripted model was asked for more replies than its script holds."""


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
    # (input, output) tokens the reply reports; None: it reports no usage, as
    # many self-hosted servers answer (the engine then counts it itself).
    usage: tuple[int, int] | None = (10, 5)
    error: str | None = None  # one of ERROR_KINDS

    def __post_init__(self) -> None:
        if self.error is not None and self.error not in ERROR_KINDS:
            raise InvalidInput(f"unknown scripted error {self.error!r}; use one of {ERROR_KINDS}")

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"

    def message(self, step: int = 0) -> dict[str, Any]:
        """The assistant message, with an id made up for each tool call that has none."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                c.encode(f"call_{step}_{i}_{uuid.uuid4().hex[:8]}")
                for i, c in enumerate(self.tool_calls)
            ]
        return message

    def usage_block(self) -> dict[str, int] | None:
        if self.usage is None:
            return None
        return {
            "prompt_tokens": self.usage[0],
            "completion_tokens": self.usage[1],
            "total_tokens": sum(self.usage),
        }

    def response(self, model: str, step: int = 0) -> dict[str, Any]:
        """The reply in OpenAI's chat-completion shape."""
        response: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "model": model,
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": self.message(step), "finish_reason": self.finish_reason}
            ],
        }
        usage = self.usage_block()
        if usage is not None:
            response["usage"] = usage
        return response

    def chunks(self, step: int = 0) -> list[dict[str, Any]]:
        """The reply as litellm's streaming chunks of a custom provider
        (``GenericStreamingChunk``): the text a few characters at a time (two
        pieces at least once it has two characters), each tool call whole, and
        last the finish reason with the usage (if it reports any)."""
        message = self.message(step)
        content = message["content"] or ""
        # A few characters a piece, but no more than about 256 pieces, so a
        # long text does not turn into a quarter of a million chunks.
        size = max(1, min(4, len(content) // 2), -(-len(content) // 256))
        chunks = [_chunk(text=content[i : i + size]) for i in range(0, len(content), size)]
        for index, call in enumerate(message.get("tool_calls") or ()):
            chunks.append(_chunk(tool_use={**call, "index": index}))
        chunks.append(
            _chunk(is_finished=True, finish_reason=self.finish_reason, usage=self.usage_block())
        )
        return chunks


def _chunk(
    text: str = "",
    tool_use: dict[str, Any] | None = None,
    is_finished: bool = False,
    finish_reason: str = "",
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    return {
        "text": text,
        "tool_use": tool_use,
        "is_finished": is_finished,
        "finish_reason": finish_reason,
        "usage": usage,
        "index": 0,
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
        fenced JSON block of ``runner.steps.history.render_trigger``)."""
        first = next(m["content"] for m in self.messages if m.get("role") == "user")
        return json.loads(first.removeprefix("```json\n").removesuffix("\n```"))["payload"]


Script = Sequence[Reply] | Callable[[Request], Reply]


class ScriptedModel:
    """A deterministic model. Registers itself as ``scripted/<name>``."""

    def __init__(
        self,
        name: str,
        script: Script,
        *,
        journal: str | Path | None = None,
        price: tuple[float, float] | None = None,
        chunk_delay: float = 0.0,
    ) -> None:
        if not (math.isfinite(chunk_delay) and chunk_delay >= 0):
            raise InvalidInput("chunk_delay is seconds between streamed chunks, a number >= 0")
        if price is not None and not (
            len(price) == 2 and all(math.isfinite(p) and p >= 0 for p in price)
        ):
            raise InvalidInput(
                "price is (USD per input token, USD per output token), two numbers >= 0"
            )
        self.name = name
        self.script = script
        self.journal = Path(journal) if journal else None
        self.price = None if price is None else (float(price[0]), float(price[1]))
        self.chunk_delay = float(chunk_delay)
        self.calls: list[Request] = []
        self._lock = threading.Lock()
        register(self)

    @property
    def model(self) -> str:
        return f"{SCRIPTED}{self.name}"

    @property
    def call_count(self) -> int:
        return len(self.calls)

    def choose(self, request: Request) -> Reply:
        if callable(self.script):
            return self.script(request)
        index = request.step - 1
        if index >= len(self.script):
            raise ScriptExhausted(
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
        # A test assertion: a plain AssertionError, which pytest reports as a failure.
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
        raise ScriptedModelNotFound(
            f"no scripted model named {name!r}; create ScriptedModel({name!r}, ...) first"
        ) from None


# ------------------------------------------------------- the litellm provider


# What each scripted model is priced at in litellm's cost map, as last registered.
_priced: dict[str, tuple[float, float]] = {}


def price_scripted(litellm: Any, model: str) -> None:
    """Give a scripted model its entry in litellm's cost map: the ``price`` it
    was created with, else free. Without an entry, every call searches the map
    for a price and logs why it found none. (``runner.model`` calls this on each
    call of a scripted model; it registers again only when the price changed.)"""
    name = model.split("/", 1)[1]
    with _scripts_lock:
        found = _scripts.get(name)
    price = (found.price if found is not None else None) or (0.0, 0.0)
    if _priced.get(name) == price:
        return
    info = {
        "litellm_provider": "scripted",
        "mode": "chat",
        "input_cost_per_token": price[0],
        "output_cost_per_token": price[1],
        "cache_creation_input_token_cost": 0.0,
        "cache_read_input_token_cost": 0.0,
        "max_tokens": 1_000_000,
        "max_input_tokens": 1_000_000,
        "max_output_tokens": 1_000_000,
        "supports_function_calling": True,
    }
    # register_model, not a write to litellm.model_cost: it also drops litellm's
    # caches of model prices, so a model priced again is charged the new price.
    litellm.register_model({model: info, name: info})
    _priced[name] = price


def install_provider(litellm: Any) -> None:
    """Register the ``scripted`` custom provider with ``litellm`` (replacing an
    earlier one). ``runner.model`` calls it on the first call of a scripted model,
    handing over the litellm it imported (only ``runner.model`` imports litellm)."""
    ModelResponse = litellm.ModelResponse

    class ScriptedProvider(litellm.CustomLLM):  # type: ignore[misc]
        """Serves ``scripted/<name>`` from the scripts registered here."""

        async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
            model = str(kwargs.get("model", "")).split("/", 1)[-1]
            optional = kwargs.get("optional_params") or {}
            script = lookup(model)
            reply, step = await script.respond(
                kwargs.get("messages") or [], optional.get("tools") or []
            )
            if reply.error is not None:
                cls = getattr(litellm.exceptions, _LITELLM_ERRORS[reply.error])
                raise cls(message=f"scripted {reply.error}", model=model, llm_provider="scripted")
            # The provider-qualified name: litellm prices a response by its model.
            return ModelResponse(**reply.response(SCRIPTED + model, step))

        async def astreaming(self, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
            # litellm wraps this generator in its stream reader and starts it on
            # the first read: errors surface there, as a provider's mid-stream
            # errors do.
            model = str(kwargs.get("model", "")).split("/", 1)[-1]
            optional = kwargs.get("optional_params") or {}
            script = lookup(model)
            reply, step = await script.respond(
                kwargs.get("messages") or [], optional.get("tools") or []
            )
            if reply.error is not None:
                cls = getattr(litellm.exceptions, _LITELLM_ERRORS[reply.error])
                raise cls(message=f"scripted {reply.error}", model=model, llm_provider="scripted")
            for index, chunk in enumerate(reply.chunks(step)):
                if index and script.chunk_delay:
                    await asyncio.sleep(script.chunk_delay)
                yield chunk

        def completion(self, *args: Any, **kwargs: Any) -> Any:
            # litellm's contract for a custom provider that has no sync path.
            raise NotImplementedError("scripted models are async only")

    providers = [p for p in litellm.custom_provider_map if p.get("provider") != "scripted"]
    providers.append({"provider": "scripted", "custom_handler": ScriptedProvider()})
    litellm.custom_provider_map = providers
