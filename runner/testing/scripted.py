"""Scripted models for tests and the demo.

A :class:`ScriptedModel` is served through litellm as the custom provider
``scripted``: an agent with ``model="scripted/<name>"`` goes through
``litellm.acompletion`` like any other model.

The vocabulary of a script: :func:`text` (a reply in words), :func:`tools`
with :func:`call` (tool calls), :func:`output` (an agent's structured output,
its ``final_result`` tool call), and provider errors: :func:`rate_limited` (a
429, with a ``Retry-After`` if asked), :func:`server_error` (a 500),
:func:`timeout`, or any ``Reply(error=...)`` of :data:`ERROR_KINDS`.

A script is a function of the :class:`Request` (returning a :class:`Reply`,
or a ``str`` for a text reply), or a list. A list is read by the request's
step, not by a counter, so a script resumes correctly in another process
after a crash: the step is how many assistant messages the request already
holds, plus one. Errors are not messages, so a call retried after an error
asks for the same step again; hence the rule for errors in a list:

- step k is the k-th reply of the list that is not an error;
- the errors in a list belong to the step of the next non-error reply after
  them (errors at the end belong to one more step, which has no reply);
- a step is served its errors first, in order, then its reply (again for each
  later call of that step). Which errors were served is counted in this
  process: a step asked in a fresh process (a worker that resumed the run)
  meets its errors again. The count is the model's, not a run's: runs sharing
  one list share it.

``[rate_limited(retry_after=1), text("ok")]`` is one step: a 429, then
``"ok"``. A call past the end fails inside the provider with
:class:`ScriptExhausted`, as a bad request (retrying cannot help), so the run
fails ``model_error``; the call is recorded, and :meth:`ScriptedModel.assert_complete`
then raises :class:`UnexpectedModelCall`, or :class:`UnconsumedModelSteps` for
replies never served. Both count this process's calls only. A function script
is never exhausted and has no unconsumed steps.

Every request is recorded (``calls``). ``journal`` (a file path) records every
call across processes, for tests that count model calls over a kill and a
resume. ``price`` (USD per input and per output token) puts the model in
litellm's cost map at that price, so runs record a cost; without it the model
is free. Called with ``stream=True``, a scripted model streams its reply in
chunks (:meth:`Reply.chunks`), ``chunk_delay`` seconds apart.

``runner.core.model`` imports this module, and registers the provider, only when a
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

import pydantic

from runner.core.deprecation import retired
from runner.core.errors import InvalidInput, RunwrightError
from runner.core.steps.builtin_tools import FINAL_RESULT
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


class BeyondRecording(ScriptExhausted):
    """A replay asked for a model step its recording does not have
    (runner/evals/replay.py): a bad request to the recorded model, which no
    retry can help, so the run fails at once and the report names the step."""


# What assert_complete() raises. AssertionError as well as RunwrightError: a
# script that does not match the run is a failed expectation of the test, not
# a fault of the code under test, and an AssertionError is what says so
# (pytest prints it as a failed assertion, unittest counts it a failure, not
# an error, and `pytest.raises(AssertionError)` catches it); RunwrightError
# keeps the rule that every error Runwright raises derives from it (issue 11).
class UnexpectedModelCall(RunwrightError, AssertionError):
    """The scripted model was asked for more than its script holds."""


class UnconsumedModelSteps(RunwrightError, AssertionError):
    """The scripted model was never asked for some replies of its script."""


# What a strict scripted model's refusal says, where a run's error carries it
# (runner/testing/kit.py finds it there and fails the test).
NOT_OFFERED = "calls a tool the agent does not have"


class UnknownScriptedTool(RunwrightError, AssertionError):
    """A strict scripted model's reply calls a tool the agent was not offered
    (a typo in the script, or a tool the agent lacks): the test fails,
    naming the tool and the agent's tools. ``ScriptedModel(strict=False)``
    serves such a reply, for tests of exactly that."""


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
    # With an error: the pause in seconds its response asks for (Retry-After).
    retry_after: float | None = None

    def __post_init__(self) -> None:
        if self.error is not None and self.error not in ERROR_KINDS:
            raise InvalidInput(f"unknown scripted error {self.error!r}; use one of {ERROR_KINDS}")
        if self.retry_after is not None:
            if self.error is None:
                raise InvalidInput("retry_after belongs to an error reply")
            if not (
                isinstance(self.retry_after, int | float)
                and math.isfinite(self.retry_after)
                and self.retry_after >= 0
            ):
                raise InvalidInput("retry_after is seconds, a number >= 0")

    def describe(self) -> str:
        """The reply in a few words, for a test's failure message."""
        if self.error is not None:
            asked = "" if self.retry_after is None else f", retry_after={self.retry_after:g}"
            return f"error {self.error}{asked}"
        if self.tool_calls:
            return "tools(" + ", ".join(c.name for c in self.tool_calls) + ")"
        content = self.content or ""
        if len(content) > 40:
            content = content[:40] + "..."
        return f"text {content!r}"

    def headers(self) -> dict[str, str]:
        """The response headers of an error reply: its Retry-After, if any
        (whole seconds; a fraction goes in ``retry-after-ms``, which
        ``runner.core.retry.retry_after`` reads first)."""
        if self.retry_after is None:
            return {}
        seconds = self.retry_after
        if seconds == int(seconds):
            return {"retry-after": str(int(seconds))}
        return {"retry-after": str(math.ceil(seconds)), "retry-after-ms": f"{seconds * 1000:g}"}

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
    """A reply in words (the run's output when it is the last)."""
    return Reply(content=content, **kwargs)


def tools(*calls: ToolCall, **kwargs: Any) -> Reply:
    """A reply that calls tools: ``tools(call("lookup", {"q": "x"}), ...)``."""
    return Reply(tool_calls=calls, **kwargs)


def output(value: pydantic.BaseModel | dict[str, Any], **kwargs: Any) -> Reply:
    """The structured output of an agent with ``output=``: its ``final_result``
    tool call with ``value`` (a pydantic model instance, or a dict) as JSON."""
    if isinstance(value, pydantic.BaseModel):
        arguments = value.model_dump(mode="json")
    elif isinstance(value, dict):
        arguments = value
    else:
        raise InvalidInput(f"output() takes a pydantic model or a dict, not {type(value).__name__}")
    return Reply(tool_calls=(call(FINAL_RESULT, arguments),), **kwargs)


def rate_limited(retry_after: float | None = None, **kwargs: Any) -> Reply:
    """A 429; with ``retry_after``, its response asks for that many seconds'
    pause (a ``Retry-After`` header, which the engine honours)."""
    return Reply(error="rate_limit", retry_after=retry_after, **kwargs)


def server_error(**kwargs: Any) -> Reply:
    """A 500 from the provider."""
    return Reply(error="server_error", **kwargs)


def timeout(**kwargs: Any) -> Reply:
    """The provider did not answer in time."""
    return Reply(error="timeout", **kwargs)


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
        fenced JSON block of ``runner.core.steps.history.render_trigger``)."""
        first = next(m["content"] for m in self.messages if m.get("role") == "user")
        return json.loads(first.removeprefix("```json\n").removesuffix("\n```"))["payload"]


Script = Sequence[Reply] | Callable[[Request], Reply | str]


@dataclass(frozen=True)
class _Step:
    """One step of a list script: indices into the list of its errors, in
    order, and of its reply (None: errors at the end, with no reply)."""

    errors: tuple[int, ...]
    reply: int | None


def _steps(script: Sequence[Reply]) -> list[_Step]:
    steps: list[_Step] = []
    errors: list[int] = []
    for index, reply in enumerate(script):
        if reply.error is not None:
            errors.append(index)
        else:
            steps.append(_Step(tuple(errors), index))
            errors = []
    if errors:
        steps.append(_Step(tuple(errors), None))
    return steps


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
        strict: bool = True,
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
        self.journal = Path(journal) if journal else None
        self.price = None if price is None else (float(price[0]), float(price[1]))
        self.chunk_delay = float(chunk_delay)
        # Strict: a reply that calls a tool the request did not offer is refused
        # (UnknownScriptedTool), not served for the model to be told "unknown tool".
        self.strict = bool(strict)
        self.calls: list[Request] = []
        # The calls past the end of a list script (each also failed).
        self.unexpected: list[Request] = []
        self._lock = threading.RLock()
        self.script = script
        register(self)

    @classmethod
    def from_run(cls, name: str, source: Any, **kwargs: Any) -> ScriptedModel:
        """A model whose script is what a recorded run's model replied, step
        by step: ``source`` is a :class:`~runner.evals.recording.Recording`,
        a :class:`~runner.evals.recording.Case` with one, or the path of a
        case file (``runwright runs export RUN > case.json``). Past the
        recorded steps it is exhausted, as any list script."""
        from runner.evals.recording import load_recording

        return cls(name, replies_of(load_recording(source)), **kwargs)

    @property
    def script(self) -> Script:
        return self._script

    @script.setter
    def script(self, script: Script) -> None:
        """A new script starts its steps (and the count of errors served) afresh."""
        with self._lock:
            self._script = script
            self._plan = None if callable(script) else _steps(script)
            self._served: dict[int, int] = {}  # step -> replies of it served, errors included
            self._used: set[int] = set()  # indices of the list served at least once
            self.unexpected = []

    @property
    def model(self) -> str:
        return f"{SCRIPTED}{self.name}"

    @property
    def call_count(self) -> int:
        return len(self.calls)

    def choose(self, request: Request) -> Reply:
        """The reply to ``request``: the function's answer, or the list's, by
        the rule of the module docstring. Past the end of a list, the call is
        recorded in ``unexpected`` and :class:`ScriptExhausted` raised."""
        script = self._script
        if callable(script):
            answer = script(request)
            return text(answer) if isinstance(answer, str) else answer
        with self._lock:
            plan = self._plan
            assert plan is not None
            k = request.step
            if k > len(plan):
                self.unexpected.append(request)
                raise ScriptExhausted(
                    f"scripted model {self.name!r} has {len(script)} replies for "
                    f"{len(plan)} step(s); step {k} asked for one more"
                )
            step = plan[k - 1]
            served = self._served.get(k, 0)
            if served < len(step.errors):
                index = step.errors[served]
            elif step.reply is not None:
                index = step.reply
            else:
                self.unexpected.append(request)
                raise ScriptExhausted(
                    f"scripted model {self.name!r} has {len(script)} replies for "
                    f"{len(plan) - 1} step(s) and {len(step.errors)} error(s) after them, "
                    f"all served; step {k} asked for one more"
                )
            self._served[k] = served + 1
            self._used.add(index)
            return script[index]

    def assert_complete(self) -> None:
        """Fail the test if the runs and this script did not match, as this
        process saw it: :class:`UnexpectedModelCall` if the model was asked for
        more than its script holds, else :class:`UnconsumedModelSteps` if some
        replies of a list script were never served. A function script only
        fails on neither."""
        with self._lock:
            script = self._script
            plan = self._plan
            unexpected = list(self.unexpected)
            used = set(self._used)
            calls = len(self.calls)
        if plan is None or callable(script):
            return
        holds = f"its script holds {len(script)} replies for {len(plan)} step(s)"
        if unexpected:
            steps = ", ".join(str(r.step) for r in unexpected)
            raise UnexpectedModelCall(
                f"{self.model} was called {len(unexpected)} time(s) more than its script "
                f"allows ({holds}; {calls} call(s) in all): the call(s) past its end asked "
                f"for step(s) {steps}"
            )
        missing = [
            f"step {k} {script[i].describe()} (reply {i + 1})"
            for k, step in enumerate(plan, 1)
            for i in (*step.errors, *(() if step.reply is None else (step.reply,)))
            if i not in used
        ]
        if missing:
            raise UnconsumedModelSteps(
                f"{self.model} served {len(used)} of the {len(script)} replies of its script "
                f"({len(plan)} step(s); {calls} call(s) in all); never served: "
                + "; ".join(missing)
            )

    async def reply_to(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> tuple[Reply, int]:
        """The reply to one request, after its latency, and the request's step."""
        request = Request([dict(m) for m in messages], [dict(t) for t in tools])
        with self._lock:
            self.calls.append(request)
        if callable(self._script):
            # Off the loop: a script that waits (for a test's gate, say) holds
            # its own thread, not the worker's loop, whose heartbeats and the
            # step's commit in flight go on meanwhile.
            reply = await asyncio.to_thread(self.choose, request)
        else:
            reply = self.choose(request)
        self._record(request, reply)
        if self.strict:
            self._check_offered(request, reply)
        if reply.latency:
            await asyncio.sleep(reply.latency)
        return reply, request.step

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> tuple[Reply, int]:
        """Deprecated: :meth:`reply_to`."""
        retired("ScriptedModel.respond", "ScriptedModel.reply_to")
        return await self.reply_to(messages, tools)

    def _check_offered(self, request: Request, reply: Reply) -> None:
        offered = request.tool_names
        for called in reply.tool_calls:
            if called.name not in offered:
                names = ", ".join(sorted(offered)) or "none"
                raise UnknownScriptedTool(
                    f"scripted model {self.name!r} {NOT_OFFERED}: step {request.step} calls "
                    f"{called.name!r}; the agent's tools are: {names} (a typo in the script? "
                    "ScriptedModel(strict=False) serves it, for a test of a model that "
                    "calls an unknown tool)"
                )

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


def unregister(model: ScriptedModel) -> None:
    """Forget ``model`` (a replay's, when the replay is over): a later call of
    it is :class:`ScriptedModelNotFound`."""
    with _scripts_lock:
        if _scripts.get(model.name) is model:
            del _scripts[model.name]


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
    for a price and logs why it found none. (``runner.core.model`` calls this on each
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
    earlier one). ``runner.core.model`` calls it on the first call of a scripted model,
    handing over the litellm it imported (only ``runner.core.model`` imports litellm)."""
    ModelResponse = litellm.ModelResponse

    async def scripted_reply(script: ScriptedModel, kwargs: dict[str, Any]) -> tuple[Reply, int]:
        """The script's reply and its step; an error reply raised as the
        litellm error it names, as a provider's answer would be."""
        optional = kwargs.get("optional_params") or {}
        try:
            reply, step = await script.reply_to(
                kwargs.get("messages") or [], optional.get("tools") or []
            )
        except (ScriptExhausted, UnknownScriptedTool) as exhausted:
            # A bad request, not the connection error litellm makes of an
            # error of a custom provider: retrying it cannot help, so the run
            # fails at once, with the reason.
            raise litellm.exceptions.BadRequestError(
                message=exhausted.message, model=script.name, llm_provider="scripted"
            ) from exhausted
        if reply.error is None:
            return reply, step
        cls = getattr(litellm.exceptions, _LITELLM_ERRORS[reply.error])
        error = cls(message=f"scripted {reply.error}", model=script.name, llm_provider="scripted")
        # Where litellm puts the headers of a provider's error response, and
        # runner.core.retry.retry_after() reads them.
        error.litellm_response_headers = reply.headers()
        raise error

    class ScriptedProvider(litellm.CustomLLM):  # type: ignore[misc]
        """Serves ``scripted/<name>`` from the scripts registered here."""

        async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
            model = str(kwargs.get("model", "")).split("/", 1)[-1]
            script = lookup(model)
            reply, step = await scripted_reply(script, kwargs)
            # The provider-qualified name: litellm prices a response by its model.
            return ModelResponse(**reply.response(SCRIPTED + model, step))

        async def astreaming(self, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
            # litellm wraps this generator in its stream reader and starts it on
            # the first read: errors surface there, as a provider's mid-stream
            # errors do.
            model = str(kwargs.get("model", "")).split("/", 1)[-1]
            script = lookup(model)
            reply, step = await scripted_reply(script, kwargs)
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


def replies_of(recording: Any) -> list[Reply]:
    """The replies of a recording's model steps, in order: words and tool
    calls with their recorded ids and raw arguments, and the usage reported."""
    replies: list[Reply] = []
    for step in recording.steps:
        calls = []
        for asked in step.message.get("tool_calls") or ():
            function = asked.get("function") or {}
            calls.append(
                ToolCall(
                    str(function.get("name")), function.get("arguments") or "{}", asked.get("id")
                )
            )
        content = step.message.get("content")
        replies.append(
            Reply(
                content=content if isinstance(content, str) else None,
                tool_calls=tuple(calls),
                usage=(step.input_tokens, step.output_tokens),
            )
        )
    return replies


def recorded_script(recording: Any) -> Callable[[Request], Reply]:
    """A script that replies what a recording's model replied at each step
    (:func:`replies_of`), and past its last step raises
    :class:`BeyondRecording`, which the provider turns into a bad request:
    a replay's run fails at once, not after retries."""
    replies = replies_of(recording)

    def script(request: Request) -> Reply:
        if request.step > len(replies):
            raise BeyondRecording(
                f"the replay asked for model step {request.step}; the recording has {len(replies)}"
            )
        return replies[request.step - 1]

    return script
