"""``default_engine()`` builds one engine, even when several threads of a web
app ask first at once (issue 50, item 6): each engine holds pools of its own,
and a second one built by a race would be leaked."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import runner
from runner.core.engine.engine import Engine


def test_threads_that_ask_first_at_once_get_one_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []

    def slow_from_env(cls: Any) -> Any:
        time.sleep(0.05)  # long enough for every thread to be inside
        made = object()
        built.append(made)
        return made

    monkeypatch.setattr(Engine, "from_env", classmethod(slow_from_env))
    monkeypatch.setattr(runner, "_default_engine", None)
    start = threading.Barrier(8)
    got: list[object] = []

    def ask() -> None:
        start.wait()
        got.append(runner.default_engine())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert len(built) == 1
    assert got == built * 8
