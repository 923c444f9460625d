"""The Flask example's live run page in real headless Chromium (Debian's
``chromium`` and ``chromedriver``, installed by ``make browser``): the steps
appear as the run makes them, a streaming model's text grows on the page,
and hostile model output stays text, under the page's CSP."""

from __future__ import annotations

import threading
import time
from typing import Any

from selenium import webdriver
from selenium.webdriver.common.by import By

from examples.flask_app.app import create_app
from runner import Agent, Engine, RunStatus, tool
from runner.testing import Request, ScriptedModel, call, text, tools
from tests.e2e.test_sse_http import serving
from tests.helpers import run_in_thread, unique

# Model output that would run script if the page ever put it in as HTML.
HOSTILE = (
    'Done. <img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    " and a long tail so that the text streams in many pieces over a second or so."
)


@tool
def inspect_order(order_id: str) -> str:
    """Look an order up."""
    return f"{order_id}: <b>arrived broken</b>"


def streaming_agent(gate: threading.Event) -> str:
    """Two tool steps, then the hostile answer, streamed slowly; the model
    call of step 2 waits for ``gate``, so the test sees the page mid-run."""
    name = unique("live-page")

    def script(request: Request) -> Any:
        if request.step == 2:
            assert gate.wait(30), "the test never opened the gate"
        if request.step <= 2:
            return tools(call("inspect_order", {"order_id": f"A-{request.step}"}))
        return text(HOSTILE)

    model = ScriptedModel(name, script, chunk_delay=0.02)
    Agent(name=name, model=model.model, tools=[inspect_order], stream=True)
    return name


def _poll(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_the_live_page_shows_steps_as_they_happen_and_the_text_as_it_streams(
    engine: Engine, browser: webdriver.Chrome
) -> None:
    gate = threading.Event()
    run = engine.start(streaming_agent(gate))
    app = create_app(engine)
    with serving(app) as (port, _handlers):
        worker: threading.Thread | None = None
        try:
            browser.get(f"http://127.0.0.1:{port}/runs/{run.id}/live")

            def steps() -> list[str]:
                return [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#steps li")]

            _poll(lambda: any("status: queued" in s for s in steps()), 10, "the replayed status")
            worker, box = run_in_thread(engine, run.id)
            # Mid-run (step 2's model call waits): step 1 is on the page already.
            _poll(lambda: any(s.startswith("1. inspect_order") for s in steps()), 10, "step 1")
            assert not any(s.startswith("2.") for s in steps())
            assert browser.find_element(By.ID, "status").text == "running"

            gate.set()
            answer = browser.find_element(By.ID, "answer")
            seen: list[str] = []
            deadline = time.monotonic() + 30
            while browser.find_element(By.ID, "status").text != "completed":
                assert time.monotonic() < deadline, f"the run did not complete: {steps()}"
                seen.append(answer.text)
                time.sleep(0.01)
            worker.join(15)
            assert box["run"].status is RunStatus.COMPLETED

            # The text grew in place while the model streamed it.
            partial = {t for t in seen if t and t != HOSTILE}
            assert partial and all(HOSTILE.startswith(t) for t in partial), partial
            assert answer.text == HOSTILE  # as text: the markup is visible, not rendered
            assert browser.execute_script("return window.__pwned") is None
            assert not browser.find_elements(By.CSS_SELECTOR, "#answer img, #answer script")
            lines = steps()
            assert any(s.startswith("2. inspect_order") for s in lines)
            assert "3. model: answers" in lines
            assert lines[-1] == "status: completed"
            assert "<b>arrived broken</b>" in " ".join(lines)  # tool output, as text
            refused = [
                entry["message"]
                for entry in browser.get_log("browser")
                if "Content Security Policy" in entry.get("message", "")
            ]
            assert refused == []  # the page's own script and style were allowed
        finally:
            gate.set()
            browser.get("about:blank")  # closes the page's EventSource
            if worker is not None:
                worker.join(15)
