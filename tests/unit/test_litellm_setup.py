"""How Runwright sets litellm up (issue 16).

A worker's warm-up takes one mocked call through litellm's call path: litellm
imports more of itself on its first call, which would hold the event loop of
every run the worker executes. That call must reach no provider and no logging
callback of the host's. And litellm's copy of every call's message list for
its logging payload is off unless the host asked for it.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest

from runner.core import model


def test_warm_up_takes_a_mocked_call_that_reaches_no_provider_and_no_callback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    litellm = model._load()
    from litellm.integrations.custom_logger import CustomLogger

    logged: list[str] = []

    class HostLogger(CustomLogger):  # type: ignore[misc]
        def log_success_event(self, *args: Any, **kwargs: Any) -> None:
            logged.append("success")

        async def async_log_success_event(self, *args: Any, **kwargs: Any) -> None:
            logged.append("async success")

        async def async_log_failure_event(self, *args: Any, **kwargs: Any) -> None:
            logged.append("async failure")

    replies: list[Any] = []
    real_call = litellm.acompletion

    async def spied(*args: Any, **kwargs: Any) -> Any:
        reply = await real_call(*args, **kwargs)
        replies.append(reply)
        return reply

    connects: list[Any] = []
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        connects.append(address)
        real_connect(self, address)

    monkeypatch.setattr(litellm, "acompletion", spied)
    monkeypatch.setattr(litellm, "callbacks", [HostLogger()])
    monkeypatch.setattr(socket.socket, "connect", connect)
    with caplog.at_level(logging.DEBUG, logger="runner.core.model"):
        model.warm_up()
    assert [r.choices[0].message.content for r in replies] == ["ready"]  # the call was taken
    assert "warm-up call failed" not in caplog.text
    # No provider: nothing off this machine (other tests' threads may still
    # reach the loopback Postgres and Redis meanwhile).
    assert [a for a in connects if not _loopback(a)] == []
    assert logged == []  # the host's callbacks saw nothing


def _loopback(address: Any) -> bool:
    if not isinstance(address, tuple):
        return True  # a Unix socket
    return str(address[0]) in {"127.0.0.1", "::1", "localhost"}


_PROBE = (
    "from runner.core import model\n"
    "model._load()\n"
    "from litellm.litellm_core_utils import logging_utils\n"
    "print(logging_utils.MAX_BASE64_LENGTH_FOR_LOGGING)\n"
)
