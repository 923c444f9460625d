"""The loopback provider's own limits (tests/provider.py), which the flow
control tests and bench/flow.py count on: a provider's buckets, its 429 with
``retry-after``, its ``x-ratelimit-*`` headers."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from tests.provider import Provider, ProviderLimits, answer


def _post(provider: Provider, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
    request = urllib.request.Request(
        f"{provider.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def _body(max_tokens: int = 20) -> dict[str, Any]:
    return {
        "model": "openai/x",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
    }


def _eight(body: dict[str, Any]) -> int:
    return 8


def test_past_its_requests_a_minute_it_answers_429_with_the_wait() -> None:
    with Provider(lambda step, body: answer("ok")) as provider:
        provider.limit(rpm=2, count=_eight)
        first, headers, reply = _post(provider, _body())
        assert first == 200 and reply["usage"]["prompt_tokens"] == 8
        assert headers["x-ratelimit-limit-requests"] == "2"
        assert headers["x-ratelimit-remaining-requests"] == "1"
        assert _post(provider, _body())[0] == 200
        status, headers, _ = _post(provider, _body())
        assert status == 429 and int(headers["retry-after"]) >= 1
        assert provider.throttled == 1 and [r.status for r in provider.requests] == [200, 200, 429]


def test_tokens_are_the_prompt_plus_max_tokens_and_the_unused_come_back() -> None:
    limits = ProviderLimits(None, 100, count=_eight)
    prompt, taken, _ = limits.admit(_body(max_tokens=50))
    assert (prompt, taken) == (8, 58)
    limits.settle(taken, used=8 + 5)  # the answer used 5 of its 50
    assert limits.tokens is not None and 86 < limits.tokens.level <= 87 + 1e-6
    # An estimate past what is left is refused, and nothing is taken.
    level = limits.tokens.level
    assert limits.admit(_body(max_tokens=95))[1] == 0
    assert limits.throttled == 1 and limits.tokens.level >= level and limits.overdrawn == 0
