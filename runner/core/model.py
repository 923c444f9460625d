"""The model adapter: the only module that imports litellm, and only when a
model is actually called, so commands like ``runwright runs`` start fast.

With ``on_delta``, :func:`complete` streams the reply and hands its text over
piece by piece as it arrives; the reply it returns is the same as unstreamed.

Scripted models (``runner/testing/scripted.py``) are served through a litellm custom
provider named ``scripted``, so tests and the demo drive the real litellm path.
That provider is imported and registered on the first call of a ``scripted/``
model, never before: production processes do not load it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import random
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.core.errors import ModelError, ModelRequestsBlocked
from runner.core.observe import FirstSeen
from runner.core.retry import retry_after
from store.jsonsafe import clean_message, clean_text
from store.models import Message, Usage

log = logging.getLogger(__name__)

# A model message larger than this is refused as a model error.
MAX_MESSAGE_CHARS = 1_000_000

# ``on_delta(text, attempt)``: a piece of the reply's text, and the 1-based
# attempt of the call it belongs to (see :func:`complete`).
OnDelta = Callable[[str, int], None]

# Models served by ``runner.testing`` (tests and the demo).
SCRIPTED_PREFIX = "scripted/"
DEFAULT_TIMEOUT_SECONDS = 600.0
# The longest pause an in-call retry waits out; a provider asking for more
# (Retry-After) gets it from the queue instead (runner/core/retry.py).
MAX_IN_CALL_WAIT = 10.0

_setup_lock = threading.Lock()
_litellm: Any = None
# litellm's setting (read when it is imported): how long a base64 data URI may
# be in the messages litellm hands to logging callbacks before it is cut.
BASE64_LOGGING_VARIABLE = "MAX_BASE64_LENGTH_FOR_LOGGING"

# Whether calls of models that are not scripted are refused, in the whole
# process: runs execute on the runtime's thread, not the test's, so a context
# variable would not reach them. runner/testing/requests.py sets it for tests.
_requests_blocked = False
_requests_lock = threading.Lock()


def _load() -> Any:
    """Import litellm once, offline, with its chatter turned down."""
    global _litellm
    if _litellm is None:
        with _setup_lock:
            if _litellm is None:
                os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                # litellm copies a call's whole message list for its logging
                # payload, to cut base64 images short in it: on every call, so
                # a step cost more the longer the run's history (issue 16: a
                # sixth of a 200-step run's CPU, and most of why its last steps
                # cost more than its first). 0 turns the copy off; a host that
                # hands images to a logging callback sets a length of its own.
                os.environ.setdefault(BASE64_LOGGING_VARIABLE, "0")
                import litellm

                litellm.suppress_debug_info = True
                litellm.telemetry = False
                if "LITELLM_LOG" not in os.environ:
                    # litellm logs every call at INFO, twice under Celery; a
                    # worker's log is for runs, not for each model request.
                    logging.getLogger("LiteLLM").setLevel(logging.WARNING)
                _litellm = litellm
    return _litellm


def warm_up() -> None:
    """Import litellm now, not during the first model call (it takes seconds),
    and take one mocked call through its call path: litellm imports more of
    itself on its first call (a few hundred ms), and on a worker that first
    call would hold the event loop of every run it executes. The mocked call
    (litellm's ``mock_response``, on that same loop) reaches no provider and,
    marked ``no-log``, no logging callback. A worker calls this before it
    takes tasks."""
    from runner.core.runtime import runtime  # the loop the worker's model calls run on

    litellm = _load()
    try:
        runtime().run(_mocked_call(litellm), timeout=60)
    except Exception:  # a warm-up only: the first real call imports what is missing
        log.debug("litellm's warm-up call failed", exc_info=True)


async def _mocked_call(litellm: Any) -> None:
    await litellm.acompletion(
        model="openai/runwright-warm-up",
        messages=[{"role": "user", "content": "warm up"}],
        tools=[_WARM_UP_TOOL],
        mock_response="ready",
        api_key="not-used",
        **{"no-log": True},
    )
    # litellm finishes a call's success handling in a task of its own: let it run.
    await asyncio.sleep(0.05)


_WARM_UP_TOOL = {
    "type": "function",
    "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}},
}


def block_requests(blocked: bool) -> bool:
    """Refuse (``True``) or allow again calls of every model that is not
    ``scripted/``, in this whole process; returns the setting it replaces.
    Tests use :func:`runner.testing.block_model_requests` instead."""
    global _requests_blocked
    with _requests_lock:
        previous = _requests_blocked
        _requests_blocked = blocked
    return previous


def requests_blocked() -> bool:
    """Whether calls of models that are not ``scripted/`` are refused now."""
    return _requests_blocked


# How the message of a blocked call begins: the run's error says it.
BLOCKED = "model requests are blocked in this test"


def blocked_call(message: str) -> bool:
    """Whether a run's error ``message`` is that of a blocked model call."""
    return message.startswith(BLOCKED)


def _refuse_blocked(model: str) -> None:
    if _requests_blocked and not model.startswith(SCRIPTED_PREFIX):
        # One line (the model's repr escapes any line break in its name): the
        # run's error, and what a test author reads first.
        raise ModelRequestsBlocked(
            f"{BLOCKED}, and the run called {model!r}; "
            "to allow them, mark the test @pytest.mark.runwright_allow_model_requests "
            "or run the code inside runner.testing.allow_model_requests()"
        )


@dataclass(frozen=True)
class ModelReply:
    message: Message
    usage: Usage
    finish_reason: str | None
    # From litellm's cost map; None when the model has no price there.
    cost_usd: float | None = None
    # The provider's rate-limit headers on the answer (``x-ratelimit-*``), as
    # sent: what the limits of its model learn from (runner/core/limits/).
    rate_limits: Mapping[str, str] = field(default_factory=dict)


def _rate_limited(litellm: Any, exc: BaseException) -> bool:
    """A 429: the provider's limit, not a failure of the call."""
    return isinstance(exc, litellm.exceptions.RateLimitError) or (
        getattr(exc, "status_code", None) == 429
    )


def _transient(litellm: Any, exc: BaseException) -> bool:
    ex = litellm.exceptions
    transient = (
        ex.RateLimitError,
        ex.APIConnectionError,
        ex.Timeout,
        ex.ServiceUnavailableError,
        ex.InternalServerError,
        ex.BadGatewayError,
    )
    if isinstance(exc, transient):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status == 429 or status >= 500)


async def complete(
    model: str,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    settings: Mapping[str, Any],
    *,
    retries: int = 3,
    backoff_seconds: float = 0.5,
    transient: Callable[[BaseException], bool] | None = None,
    on_delta: OnDelta | None = None,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    retry_rate_limits: bool = True,
) -> ModelReply:
    """One model call with short retries on transient provider errors (blips).

    ``transient`` decides which errors are worth another attempt (default:
    429, 5xx, connection errors and timeouts). A provider's ``Retry-After`` is
    honoured; one longer than :data:`MAX_IN_CALL_WAIT` ends the call at once,
    since the run waits better in the queue (runner/core/retry.py) than on a worker
    thread. The :class:`ModelError` raised says whether the failure was
    transient and what pause the provider asked for.

    With ``on_delta``, the reply is streamed, and ``on_delta(text, attempt)``
    is called with each non-empty piece of its text as it arrives, cleaned as
    the final message is (``clean_text``). ``attempt`` counts this call's
    attempts from 1: when an attempt fails and is retried, the next one's
    pieces start the text again, so a reader keeps the pieces of the highest
    attempt only. The returned reply is the one the unstreamed call gives, and
    its text is exactly the concatenation of the last attempt's pieces. A text
    past :data:`MAX_MESSAGE_CHARS` is refused as soon as it passes the limit.
    ``on_delta`` runs on the event loop, so it must be quick; an exception it
    raises is logged once and otherwise ignored.

    A reply whose provider reported no usage (or only zeros) has its tokens
    counted by litellm's tokenizer instead, ``usage.estimated`` set, and is
    priced from that count: a budget never stops counting.

    ``retry_rate_limits=False``: a 429 raises at once, not retried here: a
    model under a limit (runner/core/limits/) waits on that shared limit instead.

    ``sleep`` waits out the backoff between attempts (a test's clock may skip
    it); it must stay cancellable, as :func:`asyncio.sleep` is.

    Cancelling the awaiting task cancels the call (and any backoff sleep), and
    closes the stream's connection.

    Where model requests are blocked (:func:`block_requests`, a test), a
    model that is not ``scripted/`` raises :class:`ModelRequestsBlocked`
    before anything is sent.
    """
    _refuse_blocked(model)
    litellm = _load()
    kwargs = dict(settings)
    kwargs.setdefault("timeout", DEFAULT_TIMEOUT_SECONDS)
    kwargs["num_retries"] = 0  # retries are ours: cancellable and counted
    # Whether to stream is on_delta's to say: a reply streamed is read only then.
    kwargs.pop("stream", None)
    kwargs.pop("stream_options", None)
    deltas = None if on_delta is None else guarded(on_delta, model)
    if deltas is not None:
        kwargs.update(stream=True, stream_options={"include_usage": True})
    if model.startswith(SCRIPTED_PREFIX):
        _serve_scripted(litellm, model)
    attempt = 0
    while True:
        attempt += 1
        try:
            response = await litellm.acompletion(
                model=model, messages=list(messages), tools=list(tools) or None, **kwargs
            )
            if deltas is not None:
                response = await read_stream(litellm, model, response, deltas, attempt)
        except (asyncio.CancelledError, ModelError):
            raise  # a ModelError here is ours (a message too large), not the provider's
        except Exception as raised:
            exc = _unwrap(litellm, raised)
            name = type(exc).__name__
            passing = _transient(litellm, exc) if transient is None else bool(transient(exc))
            pause = retry_after(exc) if passing else None
            limited = _rate_limited(litellm, exc)
            if passing and attempt <= retries and (retry_rate_limits or not limited):
                delay = backoff_seconds * 2 ** (attempt - 1) * (0.5 + random.random() / 2)
                if pause is not None:
                    delay = max(delay, pause)
                if delay <= MAX_IN_CALL_WAIT:
                    log.warning(
                        "model %s: %s (attempt %d); retrying in %.1fs", model, name, attempt, delay
                    )
                    await sleep(delay)
                    continue
            raise ModelError(
                f"{model}: {name}: {_short(exc)} (after {attempt} attempt(s))",
                transient=passing,
                retry_after=pause,
                rate_limited=limited,
            ) from exc
        reply = _reply(response, _cost(litellm, response))
        if reply.usage.total == 0:
            # No usage (or a block of zeros, a placeholder: no prompt is 0
            # tokens). A budget must not be silently off: count it ourselves.
            reply = await _estimated(litellm, model, messages, tools, reply)
        return reply


# ------------------------------------------------------ usage the provider omits

# Models whose missing usage was logged in this process: once per model.
_unreported = FirstSeen()


def _note_unreported(model: str) -> None:
    if not _unreported.first(model):
        return
    log.warning(
        "model %s reported no token usage; its tokens are an estimate by litellm's counter "
        "from now on (steps and runs record them as estimated; budgets hold on the estimate)",
        model,
    )


async def _estimated(
    litellm: Any,
    model: str,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    reply: ModelReply,
) -> ModelReply:
    """``reply`` with its usage counted by litellm's tokenizer for ``model``
    (the request as sent, tools included, and the reply), marked estimated,
    and its cost priced from that count when litellm knows the model's price.
    The count reads the whole history, so it runs off the event loop."""
    _note_unreported(model)
    usage = await asyncio.to_thread(_count, litellm, model, list(messages), list(tools), reply)
    cost = reply.cost_usd
    if not cost:  # priced from zero tokens, or unpriced
        cost = _priced(litellm, model, usage) or cost
    return ModelReply(reply.message, usage, reply.finish_reason, cost)


def _count(
    litellm: Any,
    model: str,
    messages: list[Message],
    tools: list[dict[str, Any]],
    reply: ModelReply,
) -> Usage:
    prompt = _prompt_tokens(litellm, model, messages, tools)
    try:
        completion = litellm.token_counter(
            model=model, messages=[reply.message], count_response_tokens=True, **_COUNTING
        )
    except Exception:
        log.debug("model %s: litellm could not count the reply's tokens", model, exc_info=True)
        completion = len(json.dumps(reply.message, default=str)) // 4
    return Usage(prompt, max(1, int(completion)), estimated=True)


# An image given by URL counts as litellm's default size: the counter must
# never fetch what the history names.
_COUNTING = {"use_default_image_token_count": True, "default_token_count": 0}


def _prompt_tokens(
    litellm: Any, model: str, messages: list[Message], tools: list[dict[str, Any]]
) -> int:
    """The request's tokens (its messages and tools) by litellm's counter for ``model``."""
    try:
        counted = litellm.token_counter(
            model=model, messages=messages, tools=tools or None, **_COUNTING
        )
    except Exception:
        # A history litellm cannot count: about four characters a token, so
        # that the budget still moves.
        log.debug("model %s: litellm could not count the tokens", model, exc_info=True)
        counted = len(json.dumps([messages, tools], default=str)) // 4
    return max(1, int(counted))


def count_tokens(
    model: str, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()
) -> int:
    """The tokens of a request's ``messages`` (and ``tools``) by litellm's counter
    for ``model``: what a history's budget is held to (runner/core/steps/context_window.py)."""
    return _prompt_tokens(_load(), model, list(messages), list(tools))


def context_window(model: str) -> int | None:
    """How many input tokens ``model`` takes, from litellm's model data; None
    if litellm does not know the model (or its window)."""
    litellm = _load()
    try:
        info = litellm.get_model_info(model)
    except Exception:  # litellm raises when the model is not in its map
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return window if isinstance(window, int) and window > 0 else None


# What a call's reply is expected to take when its settings set no output
# cap (``max_tokens``, ``max_completion_tokens``): docs/children.md.
DEFAULT_OUTPUT_TOKENS = 1024


def output_cap(settings: Mapping[str, Any]) -> int:
    """The most tokens a call with these model settings is expected to answer with."""
    for key in ("max_tokens", "max_completion_tokens"):
        value = settings.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return DEFAULT_OUTPUT_TOKENS


async def expected_tokens(
    model: str,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    settings: Mapping[str, Any],
) -> int:
    """The tokens a call is expected to take, before it is made: its request
    counted by litellm's counter for ``model`` (off the event loop: it reads
    the whole history) plus its :func:`output_cap`."""
    litellm = _load()
    prompt = await asyncio.to_thread(_prompt_tokens, litellm, model, list(messages), list(tools))
    return prompt + output_cap(settings)


def _priced(litellm: Any, model: str, usage: Usage) -> float | None:
    """What ``usage`` costs at ``model``'s price in litellm's cost map; None
    for a model without one."""
    try:
        prompt, completion = litellm.cost_per_token(
            model=model,
            prompt_tokens=usage.input_tokens,
            completion_tokens=usage.output_tokens,
        )
        value = float(prompt) + float(completion)
    except Exception:
        return None  # an unpriced model: litellm raises rather than guess
    return value if math.isfinite(value) and value > 0 else None


def _short(exc: BaseException, limit: int = 500) -> str:
    return clean_message(str(exc), limit)


def _cost(litellm: Any, response: Any) -> float | None:
    """What the call cost in USD, from litellm's (local) cost map; None when
    the model has no price there. litellm works it out for its own logging
    already (``response_cost``); only without that figure is it asked again."""
    hidden = getattr(response, "_hidden_params", None)
    if isinstance(hidden, dict) and "response_cost" in hidden:
        cost = hidden["response_cost"]  # None: the model has no price
        if cost is None:
            return None
    else:
        try:
            cost = litellm.completion_cost(completion_response=response)
        except Exception:
            return None  # an unpriced model: litellm raises rather than guess
    try:
        value = float(cost)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _reply(response: Any, cost_usd: float | None = None) -> ModelReply:
    try:
        choice = response.choices[0]
        raw = choice.message
    except (AttributeError, IndexError) as exc:
        raise ModelError(f"the model returned no choices: {exc}") from exc
    # Model output is untrusted: text that Postgres cannot store (NUL, lone
    # surrogates) is replaced here, and tool call ids are only kept as given;
    # the step loop makes them unique within the run before it journals them.
    content = raw.content
    message: Message = {
        "role": "assistant",
        "content": clean_text(content) if isinstance(content, str) else None,
    }
    calls: list[dict[str, Any]] = []
    for call in raw.tool_calls or []:
        function = call.function
        arguments = function.arguments
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, default=str)
        calls.append(
            {
                "id": call.id if isinstance(call.id, str) else "",
                "type": "function",
                "function": {
                    "name": clean_text(function.name or ""),
                    "arguments": clean_text(arguments or ""),
                },
            }
        )
    if calls:
        message["tool_calls"] = calls
    size = len(message["content"] or "") + sum(
        len(c["id"]) + len(c["function"]["name"]) + len(c["function"]["arguments"]) for c in calls
    )
    if size > MAX_MESSAGE_CHARS:
        raise ModelError(
            f"the model's message is {size} characters; the limit is {MAX_MESSAGE_CHARS}"
        )
    usage = getattr(response, "usage", None)
    return ModelReply(
        message=message,
        usage=Usage(
            int(getattr(usage, "prompt_tokens", 0) or 0),
            int(getattr(usage, "completion_tokens", 0) or 0),
        ),
        finish_reason=choice.finish_reason,
        cost_usd=cost_usd,
        rate_limits=rate_limit_headers(response),
    )


def rate_limit_headers(response: Any) -> dict[str, str]:
    """The ``x-ratelimit-*`` headers of the provider's answer, which litellm
    keeps among the response's hidden parameters (also prefixed
    ``llm_provider-``: both are kept, the reader takes either)."""
    hidden = getattr(response, "_hidden_params", None)
    headers = hidden.get("additional_headers") if isinstance(hidden, dict) else None
    if not isinstance(headers, Mapping):
        return {}
    return {
        str(name): str(value)
        for name, value in headers.items()
        if "ratelimit" in str(name).lower() and value is not None
    }


def _unwrap(litellm: Any, exc: Exception) -> Exception:
    """The provider's own error. litellm wraps one met while reading a stream
    in ``MidStreamFallbackError`` (a 503 for its router); the original says
    what happened (a 429 and its Retry-After, a dropped connection, ...)."""
    wrapper = getattr(litellm.exceptions, "MidStreamFallbackError", None)
    if wrapper is not None and isinstance(exc, wrapper):
        original = getattr(exc, "original_exception", None)
        if isinstance(original, Exception):
            return original
    return exc


# ------------------------------------------------------------- streamed replies
# The text handed over piece by piece as it arrives, and the reply put back
# together as litellm's unstreamed response, so that complete() returns the
# same reply either way.


def guarded(on_delta: OnDelta, model: str) -> OnDelta:
    """``on_delta`` unable to break the call: what it raises is logged once."""
    failed = False

    def call(text: str, attempt: int) -> None:
        nonlocal failed
        try:
            on_delta(text, attempt)
        except Exception:
            if not failed:  # once per call: a broken reader must not flood the log
                failed = True
                log.warning("model %s: on_delta raised; the call goes on", model, exc_info=True)

    return call


class _Assembly:
    """A streamed reply put back together from its chunks: the text, the tool
    calls (by index: id, name, arguments in pieces), the finish reason and the
    usage. It counts the characters as they come, to stop a message that is
    too large while it is still streaming."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.cost: float | None = None
        self.size = 0

    def add(self, chunk: Any) -> str:
        """Take one chunk in; returns its text (cleaned), if any."""
        piece = ""
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "index", 0) not in (0, None):
                continue  # other choices (n > 1); the reply is the first, as unstreamed
            if getattr(choice, "finish_reason", None):
                self.finish_reason = choice.finish_reason
            delta = getattr(choice, "delta", None)
            content = getattr(delta, "content", None)
            if isinstance(content, str) and content:
                piece += clean_text(content)
            for call in getattr(delta, "tool_calls", None) or ():
                self._add_call(call)
        if piece:
            self.text.append(piece)
            self._grow(len(piece))
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = usage
            # litellm's own figure rides on the usage chunk, when it is above
            # zero; None there means only "not stamped", not "no price".
            hidden = getattr(chunk, "_hidden_params", None)
            cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
            if isinstance(cost, int | float) and not isinstance(cost, bool):
                self.cost = float(cost)
        return piece

    def _add_call(self, call: Any) -> None:
        index = getattr(call, "index", None)
        if not isinstance(index, int):  # providers that number nothing send calls whole
            index = len(self.calls) if getattr(call, "id", None) else max(self.calls, default=0)
        entry = self.calls.setdefault(index, {"id": "", "name": "", "arguments": []})
        function = getattr(call, "function", None)
        for key, holder in (("id", call), ("name", function)):
            value = getattr(holder, key, None)
            if isinstance(value, str) and value and not entry[key]:  # the first piece's
                entry[key] = value
                self._grow(len(value))
        arguments = getattr(function, "arguments", None)
        if arguments is not None and not isinstance(arguments, str):
            arguments = json.dumps(arguments, default=str)
        if arguments:
            entry["arguments"].append(arguments)
            self._grow(len(arguments))

    def _grow(self, chars: int) -> None:
        self.size += chars
        if self.size > MAX_MESSAGE_CHARS:
            raise ModelError(
                f"the model's message passed {MAX_MESSAGE_CHARS} characters, the limit; "
                "its stream was closed there"
            )

    def response(self, litellm: Any, model: str, *, reported: bool = True) -> Any:
        """The reply as litellm's unstreamed response, for :func:`_reply`;
        without its usage unless the provider ``reported`` it (see
        :func:`provider_counted`), so that it is counted as an unstreamed
        reply without usage is."""
        calls = [
            {
                "id": entry["id"],
                "type": "function",
                "function": {"name": entry["name"], "arguments": "".join(entry["arguments"])},
            }
            for _, entry in sorted(self.calls.items())
        ]
        # As unstreamed: no content when the model only called tools.
        content = "".join(self.text) if self.text or not calls else None
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        fields: dict[str, Any] = {
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }
        if self.usage is not None and reported:
            fields["usage"] = self.usage
        response = litellm.ModelResponse(**fields)
        # Without litellm's figure, _cost asks litellm's cost map.
        response._hidden_params = {} if self.cost is None else {"response_cost": self.cost}
        return response


async def read_stream(litellm: Any, model: str, stream: Any, deltas: OnDelta, attempt: int) -> Any:
    """Read a streamed reply to its end, handing each piece of text to
    ``deltas``; the reply assembled as an unstreamed response. The stream is
    closed however reading ends (finished, failed, too large, cancelled), so
    its connection to the provider is closed, not left to the garbage collector."""
    assembly = _Assembly()
    try:
        async for chunk in stream:
            piece = assembly.add(chunk)
            if piece:
                deltas(piece, attempt)
    finally:
        with contextlib.suppress(Exception):  # best effort: the outcome stands
            await stream.aclose()
    return assembly.response(litellm, model, reported=provider_counted(stream))


def provider_counted(stream: Any) -> bool:
    """Whether the provider's own chunks carried usage. Asked for usage
    (``include_usage``), litellm ends every stream with a usage chunk of its
    own: the provider's figures when a chunk of the provider carried them,
    else its own tokenizer's guess, which must not pass for reported usage.
    litellm keeps the chunks it received in ``chunks``; a stream without that
    list cannot say, and its usage is taken as reported."""
    chunks = getattr(stream, "chunks", None)
    if not isinstance(chunks, list):
        return True
    for chunk in chunks:
        usage = chunk.get("usage") if isinstance(chunk, dict) else getattr(chunk, "usage", None)
        if usage is not None:
            return True
    return False


# ------------------------------------------------------------- scripted models

# Serves a call of a ``scripted/`` model, handed the litellm this module
# imported and the model's name: registered by the kit for testing agents
# (runner/testing/__init__.py) when a process imports it, as a test or the
# demo does to make a ScriptedModel. The adapter imports no test machinery,
# so a worker that calls real models never loads any.
ScriptedServer = Callable[[Any, str], None]
_scripted_server: ScriptedServer | None = None


def serve_scripted_models(server: ScriptedServer) -> None:
    """Serve the ``scripted/`` models with ``server`` (called before each call
    of one: it registers the provider and the model's price with litellm)."""
    global _scripted_server
    _scripted_server = server


def _serve_scripted(litellm: Any, model: str) -> None:
    server = _scripted_server
    if server is None:
        raise ModelError(
            f"{model!r} is a scripted model, served by runner.testing: this process has "
            "not imported it (create the ScriptedModel in the process that runs the agent)"
        )
    server(litellm, model)
