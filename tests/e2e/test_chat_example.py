"""The chat example (examples/chat/), started as its README says, with one
command (``python -m examples.chat``: the page, and a Celery worker of its
own), driven in headless Chromium: a message sent, its answer streamed into
the page, a refund approved in the chat, the run completed."""

from __future__ import annotations

import sys
import time
from typing import Any

from selenium.webdriver.common.by import By

from store.local import free_port
from store.models import RunStatus
from tests.e2e.cluster import Cluster, Proc


def _poll(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _idle_thread(engine: Any) -> str | None:
    """The browser's thread (its session's), once no run of it is in progress."""
    found = [t.thread for t in engine.threads() if t.thread.startswith("chat-guest-")]
    if len(found) == 1 and engine.thread(found[0]).active is None:
        return str(found[0])
    return None


def _say(browser: Any, text: str) -> None:
    box = browser.find_element(By.ID, "text")
    box.send_keys(text)
    browser.find_element(By.ID, "send").click()


def test_send_watch_it_stream_and_approve_a_refund_in_the_chat(
    cluster: Cluster, browser: Any
) -> None:
    port = free_port()
    example = Proc(
        "chat-example", [sys.executable, "-m", "examples.chat", "--port", str(port)],
        cluster.env(), cluster.workdir,
    )  # fmt: skip
    cluster.procs.append(example)
    example.wait_for("Running on", timeout=90)
    browser.get(f"http://127.0.0.1:{port}/")
    _say(browser, "hello there")

    def assistant() -> list[str]:
        return [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".msg.assistant")]

    said = _poll(lambda: [t for t in assistant() if "Ask me to refund" in t], 60, "the answer")
    assert said[0].startswith("You said: hello there")
    engine = cluster.engine()
    try:
        # The example's agent interrupts a run in progress: the first ends first.
        _poll(lambda: _idle_thread(engine), 30, "the first run to end")

        _say(browser, "please refund A-1001")
        approve = _poll(lambda: browser.find_elements(By.CSS_SELECTOR, "button.approve"), 60, "ask")
        asked = browser.find_element(By.CSS_SELECTOR, ".msg.ask").text
        assert "refund_order" in asked and "A-1001" in asked
        approve[0].click()
        _poll(lambda: [t for t in assistant() if t.startswith("Done:")], 60, "the refund's answer")
        assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".msg.user")] == [
            "hello there",
            "please refund A-1001",
        ]

        # What the page showed is what the thread's runs did.
        thread = _poll(lambda: _idle_thread(engine), 30, "the refund's run to end")
        view = engine.thread(thread)
        assert [r.status for r in view.runs] == [RunStatus.COMPLETED] * 2
        [request] = engine.approvals(view.runs[1].id)
        assert request.addressed_to == "requester" and request.decided_by == thread[5:]
    finally:
        engine.close()
