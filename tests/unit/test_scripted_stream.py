"""How a scripted reply is streamed: litellm's chunks of a custom provider."""

from __future__ import annotations

import json

import pytest

from runner.core.errors import InvalidInput
from runner.testing import ScriptedModel, call, text, tools


@pytest.mark.parametrize("length", [2, 3, 5, 8, 1_000, 1_000_000])
def test_text_comes_in_pieces_that_make_it_up(length: int) -> None:
    content = "".join(chr(ord("a") + i % 26) for i in range(length))
    chunks = text(content).chunks()
    pieces = [c["text"] for c in chunks if c["text"]]
    assert "".join(pieces) == content
    assert 2 <= len(pieces) <= 257  # a few characters each, bounded for long texts
    assert max(len(p) for p in pieces) <= max(4, -(-length // 256))


def test_tool_calls_follow_the_text_and_the_usage_comes_last() -> None:
    reply = tools(call("lookup", {"q": "x"}, id="c1"), call("broken", "{no", id="c2"), usage=(7, 3))
    chunks = reply.chunks()
    *body, last = chunks
    assert [c["tool_use"]["index"] for c in body] == [0, 1]
    assert [c["tool_use"]["id"] for c in body] == ["c1", "c2"]
    assert json.loads(body[0]["tool_use"]["function"]["arguments"]) == {"q": "x"}
    assert body[1]["tool_use"]["function"]["arguments"] == "{no"
    assert not any(c["is_finished"] for c in body)
    assert last["is_finished"] and last["finish_reason"] == "tool_calls"
    assert last["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def test_every_chunk_has_the_fields_litellm_requires() -> None:
    for chunk in text("Hello there").chunks():
        assert {"text", "is_finished", "finish_reason", "usage"} <= chunk.keys()


def test_chunk_delay_is_checked() -> None:
    assert ScriptedModel("delayed", [], chunk_delay=0.01).chunk_delay == 0.01
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidInput):
            ScriptedModel("delayed", [], chunk_delay=bad)
