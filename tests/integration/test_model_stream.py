"""Token streaming in the model adapter, on the real litellm path: an
OpenAI-compatible server on loopback (tests/provider.py) and scripted models.

``complete(..., on_delta=...)`` must give the reply the unstreamed call gives,
hand its text over piece by piece while it arrives, retry and fail as the
unstreamed call does, and close the provider's connection when it stops early.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from runner.core.errors import ModelError
from runner.core.model import MAX_MESSAGE_CHARS, ModelReply, complete
from runner.core.runtime import runtime
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from tests.provider import Provider, answer, tool_calls

T = TypeVar("T")
MODEL = "openai/gpt-4o-mini"
ASK = [{"role": "user", "content": "Why does the build fail?"}]
TEXT = "The build fails because the cache key ignores the lockfile; bump it."


class Deltas:
    """An ``on_delta`` that keeps what it is given."""

    def __init__(self) -> None:
        self.items: list[tuple[str, int]] = []

    def __call__(self, text: str, attempt: int) -> None:
        self.items.append((text, attempt))

    def text(self, attempt: int | None = None) -> str:
        return "".join(t for t, a in self.items if attempt is None or a == attempt)

    @property
    def attempts(self) -> list[int]:
        return sorted({a for _, a in self.items})


@pytest.fixture
def provider() -> Iterator[Provider]:
    with Provider(lambda step, body: answer(TEXT)) as server:
        yield server


def via(server: Provider) -> dict[str, Any]:
    return {"api_base": server.base_url, "api_key": "x"}


def both(
    model: str, settings: dict[str, Any], **kwargs: Any
) -> tuple[ModelReply, ModelReply, Deltas]:
    """The same request unstreamed and streamed."""
    deltas = Deltas()

    async def calls() -> tuple[ModelReply, ModelReply]:
        plain = await complete(model, ASK, [], settings, **kwargs)
        streamed = await complete(model, ASK, [], settings, on_delta=deltas, **kwargs)
        return plain, streamed

    plain, streamed = run(calls())
    return plain, streamed, deltas


def run(coro: Coroutine[Any, Any, T]) -> T:
    """On the process's own loop, as executions call the model."""
    return runtime().run(coro, timeout=120)


def streamed(model: str, settings: dict[str, Any], on_delta: Any, **kwargs: Any) -> ModelReply:
    return run(complete(model, ASK, [], settings, on_delta=on_delta, **kwargs))


def scripted(script: Any, **kwargs: Any) -> ScriptedModel:
    return ScriptedModel(f"stream-{uuid.uuid4().hex[:8]}", script, **kwargs)


async def hung_up(server: Provider, timeout: float = 10.0) -> bool:
    """Whether the server sees the client hang up, waited for on the loop that
    read the stream (a loop that ends closes what was left open)."""
    deadline = time.monotonic() + timeout
    while server.disconnects == 0:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def varied(chars: int) -> str:
    """Text with no two equal pieces in a row (litellm stops a stream that
    repeats one chunk a hundred times, as a model caught in a loop)."""
    numbers = itertools.count()
    out = "".join(f"{next(numbers):09d} " for _ in range(chars // 10 + 1))
    return out[:chars]


# ---------------------------------------------------------------- the reply


@pytest.mark.parametrize("model", [MODEL, "openai/no-such-model"])
def test_streamed_text_is_the_unstreamed_reply_over_http(provider: Provider, model: str) -> None:
    plain, reply, deltas = both(model, via(provider))
    assert reply == plain  # message, usage, finish reason and cost alike
    assert reply.message == {"role": "assistant", "content": TEXT}
    assert reply.finish_reason == "stop" and reply.usage.input_tokens == 10
    # Priced from litellm's cost map; a model it does not know has no price.
    assert (reply.cost_usd is not None and reply.cost_usd > 0) is (model == MODEL)
    assert len(deltas.items) >= 2 and deltas.attempts == [1]
    assert deltas.text() == reply.message["content"]
    body = provider.requests[-1].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert provider.disconnects == 0  # read to its end


def test_streamed_text_is_the_unstreamed_reply_of_a_scripted_model() -> None:
    model = scripted([text(TEXT, usage=(31, 17))] * 2, price=(1e-6, 2e-6))
    plain, reply, deltas = both(model.model, {})
    assert reply == plain
    assert reply.usage.input_tokens == 31 and reply.usage.output_tokens == 17
    assert reply.cost_usd == pytest.approx(31e-6 + 34e-6)
    assert len(deltas.items) >= 2 and deltas.attempts == [1]
    assert deltas.text() == TEXT


def test_streamed_tool_calls_are_the_unstreamed_ones_over_http(provider: Provider) -> None:
    message = tool_calls(
        ("call_a1", "lookup", {"q": "cache key", "limit": 10}),
        ("call_b2", "file_issue", {"title": "Cache key ignores the lockfile", "labels": ["ci"]}),
    )
    message["content"] = "Let me check two things."
    provider.script = lambda step, body: message
    plain, reply, deltas = both(MODEL, via(provider))
    assert reply == plain
    assert reply.finish_reason == "tool_calls"
    calls = reply.message["tool_calls"]
    assert [(c["id"], c["function"]["name"]) for c in calls] == [
        ("call_a1", "lookup"),
        ("call_b2", "file_issue"),
    ]
    # The arguments came in four-character pieces and were put back together.
    assert json.loads(calls[1]["function"]["arguments"])["labels"] == ["ci"]
    assert deltas.text() == reply.message["content"] == "Let me check two things."


def test_streamed_tool_calls_are_the_unstreamed_ones_of_a_scripted_model() -> None:
    reply_ = tools(
        call("lookup", {"q": "cache"}, id="call_1"),
        call("broken", "{not json", id="call_2"),
    )
    model = scripted([reply_, reply_], strict=False)  # called with no tools: the adapter alone
    plain, reply, deltas = both(model.model, {})
    assert reply == plain
    assert reply.message["content"] is None and deltas.items == []
    assert [c["function"]["arguments"] for c in reply.message["tool_calls"]] == [
        '{"q": "cache"}',
        "{not json",
    ]


# ------------------------------------------------------------ cancelling


def test_cancelling_closes_the_stream_at_once(provider: Provider) -> None:
    provider.stream_delay = 0.02
    long = varied(400)  # 100 pieces: two seconds
    provider.script = lambda step, body: answer(long)
    deltas = Deltas()

    async def cancel_after_three() -> bool:
        three = asyncio.Event()

        def on_delta(text: str, attempt: int) -> None:
            deltas(text, attempt)
            if len(deltas.items) >= 3:
                three.set()

        task = asyncio.create_task(complete(MODEL, ASK, [], via(provider), on_delta=on_delta))
        await asyncio.wait_for(three.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await hung_up(provider)

    assert run(cancel_after_three()), "the stream's connection stayed open"
    assert provider.disconnects == 1
    assert 3 <= len(deltas.items) < 50
    assert long.startswith(deltas.text())


def test_a_scripted_stream_comes_over_time_and_stops_when_cancelled() -> None:
    model = scripted([text(varied(40))], chunk_delay=0.05)  # ten pieces
    deltas = Deltas()

    async def cancel_after_two() -> None:
        two = asyncio.Event()

        def on_delta(text: str, attempt: int) -> None:
            deltas(text, attempt)
            if len(deltas.items) >= 2:
                two.set()

        task = asyncio.create_task(complete(model.model, ASK, [], {}, on_delta=on_delta))
        await asyncio.wait_for(two.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(cancel_after_two())
    assert 2 <= len(deltas.items) < 10 and model.call_count == 1


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("status", [503, 429])
def test_a_transient_error_is_retried_as_the_next_attempt(provider: Provider, status: int) -> None:
    provider.fail(status, times=1)
    deltas = Deltas()
    reply = streamed(MODEL, via(provider), deltas, backoff_seconds=0)
    assert reply.message["content"] == TEXT
    assert [r.status for r in provider.requests] == [status, 200]
    assert deltas.attempts == [2] and deltas.text(2) == TEXT


def test_a_stream_cut_short_is_retried_and_its_text_told_apart(provider: Provider) -> None:
    provider.drop_stream(after=3)  # the role, then two pieces of text
    deltas = Deltas()
    reply = streamed(MODEL, via(provider), deltas, backoff_seconds=0)
    assert deltas.attempts == [1, 2]
    assert deltas.text(1) == TEXT[:8]  # what a reader would drop
    assert deltas.text(2) == reply.message["content"] == TEXT


@pytest.mark.parametrize("status", [400, 401])
def test_a_client_error_is_not_retried(provider: Provider, status: int) -> None:
    provider.fail(status)
    deltas = Deltas()
    with pytest.raises(ModelError) as raised:
        streamed(MODEL, via(provider), deltas, backoff_seconds=0)
    assert not raised.value.transient
    assert len(provider.requests) == 1 and deltas.items == []


def test_a_long_retry_after_ends_the_call_at_once(provider: Provider) -> None:
    provider.fail(429, retry_after=30)
    with pytest.raises(ModelError) as raised:
        streamed(MODEL, via(provider), Deltas())
    assert raised.value.transient and raised.value.retry_after == 30
    assert len(provider.requests) == 1


def test_a_scripted_transient_error_is_retried_and_a_bad_request_is_not() -> None:
    def script(request: Request) -> Reply:
        return Reply(error="unavailable") if model.call_count == 1 else text(TEXT)

    model = scripted(script)
    deltas = Deltas()
    reply = streamed(model.model, {}, deltas, backoff_seconds=0)
    assert reply.message["content"] == TEXT and model.call_count == 2
    assert deltas.attempts == [2]

    refused = scripted([Reply(error="bad_request")])
    with pytest.raises(ModelError) as raised:
        streamed(refused.model, {}, Deltas(), backoff_seconds=0)
    assert not raised.value.transient and refused.call_count == 1


# ----------------------------------------------------- a broken on_delta


def test_an_on_delta_that_raises_does_not_break_the_call(
    provider: Provider, caplog: pytest.LogCaptureFixture
) -> None:
    calls = Deltas()

    def broken(text: str, attempt: int) -> None:
        calls(text, attempt)
        raise RuntimeError("the feed is down")

    model = scripted([text(TEXT)])
    with caplog.at_level(logging.WARNING, logger="runner.core.model"):
        over_http = streamed(MODEL, via(provider), broken)
        of_script = streamed(model.model, {}, broken)
    assert over_http.message["content"] == of_script.message["content"] == TEXT
    # It was called with every piece of both replies, and logged once per call.
    assert calls.text() == TEXT * 2
    logged = [
        r for r in caplog.records if r.name == "runner.core.model" and "on_delta" in r.message
    ]
    assert len(logged) == 2


# ------------------------------------------------------------- too large


def test_a_streamed_message_over_the_limit_is_refused_while_streaming(
    provider: Provider,
) -> None:
    huge = varied(3 * MAX_MESSAGE_CHARS)
    provider.script = lambda step, body: answer(huge)
    provider.chunk_chars = 10_000
    provider.stream_delay = 0.005  # 300 pieces: a second and a half
    deltas = Deltas()

    async def refused() -> tuple[ModelError, bool]:
        try:
            await complete(MODEL, ASK, [], via(provider), on_delta=deltas)
        except ModelError as exc:
            # It stopped reading there and hung up, rather than take the rest in.
            return exc, await hung_up(provider)
        raise AssertionError("a message over the limit was taken")

    error, closed = run(refused())
    assert "limit" in str(error) and not error.transient
    assert closed, "the stream's connection stayed open"
    assert len(provider.requests) == 1 and len(deltas.text()) <= MAX_MESSAGE_CHARS


def test_a_scripted_message_over_the_limit_is_refused() -> None:
    model = scripted([text(varied(MAX_MESSAGE_CHARS + 10_000))])
    deltas = Deltas()
    with pytest.raises(ModelError, match="limit") as raised:
        streamed(model.model, {}, deltas)
    assert not raised.value.transient and model.call_count == 1
    assert 0 < len(deltas.text()) <= MAX_MESSAGE_CHARS
