"""Streamed model replies: the text handed over piece by piece as it arrives,
and the reply put back together as litellm's unstreamed response, so that
:func:`runner.model.complete` returns the same reply either way. The litellm
module is handed in; only ``runner.model`` imports it."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from runner.errors import ModelError
from store.jsonsafe import clean_text

log = logging.getLogger("runner.model")

# A model message larger than this is refused as a model error.
MAX_MESSAGE_CHARS = 1_000_000

# ``on_delta(text, attempt)``: a piece of the reply's text, and the 1-based
# attempt of the call it belongs to (see :func:`runner.model.complete`).
OnDelta = Callable[[str, int], None]


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
        """The reply as litellm's unstreamed response, for ``runner.model._reply``;
        without its usage unless the provider ``reported`` it (see
        :func:`provider_counted`), so that ``runner.model`` counts it as it
        counts an unstreamed reply without usage."""
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
        # Without litellm's figure, runner.model._cost asks litellm's cost map.
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
