"""The console in real headless Chromium (Debian's ``chromium`` and
``chromedriver``): an approver signs in, judges a call in the inbox, approves
it with a reason (a double click decides once), and the run's page follows
the run to ``completed`` with no reload, a streaming model's text growing in
place; hostile model and tool text stays text under the console's CSP."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from flask import Flask, redirect, request, session
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from werkzeug.wrappers import Response

from runner import Agent, Engine, RunStatus, tool
from runner.console.flask import console_blueprint
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import Decision
from tests.conftest import csp_refusals
from tests.console.conftest import (
    BASE,
    HOSTILE_IMG,
    HOSTILE_SCRIPT,
    approval_agent,
    execute_all,
    waiting_run,
)
from tests.e2e.test_sse_http import serving
from tests.helpers import run_in_thread, unique


def signed_in_app(engine: Engine) -> Flask:
    """A host app whose sign-in is a session field (``/login?user=``)."""
    app = Flask(__name__)
    app.secret_key = uuid.uuid4().hex

    @app.get("/login")
    def login() -> Response:
        session["user"] = request.args["user"]
        return redirect(f"{BASE}/approvals")

    def guard(flask_request: Any) -> str | None:
        user = session.get("user")
        return user if isinstance(user, str) else None

    app.register_blueprint(console_blueprint(engine, guard=guard, live_timeout=30), url_prefix=BASE)
    return app


def _poll(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_approve_in_the_inbox_and_watch_the_run_complete(
    engine: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    agent = approval_agent(says="Refund? " + HOSTILE_SCRIPT, note=HOSTILE_IMG)
    run = engine.start(agent.name, {"customer": HOSTILE_SCRIPT})
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.WAITING
    with serving(signed_in_app(engine)) as (port, _handlers):
        root = f"http://127.0.0.1:{port}"
        worker = None
        try:
            browser.get(f"{root}/login?user=alice")
            card = browser.find_element(By.CSS_SELECTOR, "article.ask")
            assert "Refund? <script>" in card.text  # the model's text, as text
            assert "arrived broken" in card.text  # the result it had seen
            expiry = card.find_element(By.CSS_SELECTOR, "[data-expires]")
            assert expiry.text.startswith("expires in ")
            card.find_element(By.NAME, "reason").send_keys("the photo shows it")
            approve = card.find_element(By.CSS_SELECTOR, "button.approve")
            browser.execute_script("arguments[0].click(); arguments[0].click();", approve)
            _poll(lambda: "Approved." in browser.page_source, 10, "the inbox after deciding")
            [decided] = engine.approvals(run.id)
            assert (decided.decision, decided.decided_by, decided.reason) == (
                Decision.APPROVED,
                "alice",
                "the photo shows it",
            )

            browser.get(f"{root}{BASE}/runs/{run.id}")
            status = browser.find_element(By.ID, "status")
            assert status.text == "queued"
            shown = len(browser.find_elements(By.CSS_SELECTOR, "#timeline li"))
            worker, box = run_in_thread(engine, queued.pop())
            _poll(lambda: status.text == "completed", 20, "the page to show completed")
            worker.join(15)
            assert box["run"].status is RunStatus.COMPLETED
            items = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#timeline li")]
            live = items[shown:]  # what the script appended, from the stream
            assert live[0].startswith("execution 2") and live[-1] == "status completed"
            [tool_item] = [t for t in live if t.startswith("2\ntool\nrefund")]
            assert HOSTILE_IMG.replace('"', '\\"') in tool_item  # arguments, as text
            assert any(t.startswith("3\nmodel") and "finished:" in t for t in live)
            assert browser.find_element(By.ID, "cancel").is_displayed() is False
            assert browser.execute_script("return window.pwned") is None
            assert not browser.find_elements(By.CSS_SELECTOR, "main img, main script")
            assert csp_refusals(browser) == []
        finally:
            browser.get("about:blank")  # closes the page's EventSource
            if worker is not None:
                worker.join(15)


# Model output that would run script if the page ever put it in as HTML.
HOSTILE_ANSWER = (
    'Done. <img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
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
        return text(HOSTILE_ANSWER)

    model = ScriptedModel(name, script, chunk_delay=0.02)
    Agent(name=name, model=model.model, tools=[inspect_order], stream=True)
    return name


def test_the_run_page_shows_steps_as_they_happen_and_the_text_as_it_streams(
    engine: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    gate = threading.Event()
    run = engine.start(streaming_agent(gate))
    with serving(signed_in_app(engine)) as (port, _handlers):
        root = f"http://127.0.0.1:{port}"
        worker: threading.Thread | None = None
        try:
            browser.get(f"{root}/login?user=alice")
            browser.get(f"{root}{BASE}/runs/{run.id}")

            def texts(selector: str) -> list[str]:
                # The streaming item goes when its step is journaled, maybe
                # between finding it and reading it: then read again.
                for _ in range(20):
                    try:
                        return [
                            node.text for node in browser.find_elements(By.CSS_SELECTOR, selector)
                        ]
                    except StaleElementReferenceException:
                        continue
                raise AssertionError(f"{selector} kept changing under the reader")

            def items() -> list[str]:
                return texts("#timeline li")

            assert items() == ["status queued"]
            worker, box = run_in_thread(engine, queued.pop())
            # Mid-run (step 2's model call waits): step 1 is on the page already.
            _poll(lambda: any(t.startswith("1\ntool\ninspect_order") for t in items()), 10, "1")
            assert not any(t.startswith("2\n") for t in items())
            assert browser.find_element(By.ID, "status").text == "running"

            gate.set()
            seen: list[str] = []
            deadline = time.monotonic() + 30
            while browser.find_element(By.ID, "status").text != "completed":
                assert time.monotonic() < deadline, f"the run did not complete: {items()}"
                seen.extend(texts("li.kind-streaming pre"))
                time.sleep(0.01)
            worker.join(15)
            assert box["run"].status is RunStatus.COMPLETED

            # The text grew in place while the model streamed it, and gave way
            # to the journaled step once that was written.
            partial = {t for t in seen if t and t != HOSTILE_ANSWER}
            assert len(partial) >= 2 and all(HOSTILE_ANSWER.startswith(t) for t in partial)
            assert not browser.find_elements(By.CSS_SELECTOR, "li.kind-streaming")
            final = items()
            [answer] = [t for t in final if t.startswith("3\nmodel")]
            assert HOSTILE_ANSWER in answer  # as text: the markup is visible, not rendered
            assert final[-1] == "status completed"
            assert any("<b>arrived broken</b>" in t for t in final)  # tool output, as text
            assert browser.execute_script("return window.pwned") is None
            assert not browser.find_elements(By.CSS_SELECTOR, "main img, main script")
            assert csp_refusals(browser) == []
        finally:
            gate.set()
            browser.get("about:blank")  # closes the page's EventSource
            if worker is not None:
                worker.join(15)


def test_cancel_and_retry_from_the_run_page(
    engine: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    _agent, run, _approval = waiting_run(engine, queued)
    with serving(signed_in_app(engine)) as (port, _handlers):
        root = f"http://127.0.0.1:{port}"
        try:
            browser.get(f"{root}/login?user=alice")
            browser.get(f"{root}{BASE}/runs/{run.id}")
            assert browser.find_element(By.ID, "retry").is_displayed() is False
            browser.find_element(By.CSS_SELECTOR, "#cancel button").click()
            _poll(lambda: "The run is cancelled." in browser.page_source, 10, "the cancel")
            assert browser.find_element(By.ID, "status").text == "cancelled"
            assert engine.get_run(run.id).status is RunStatus.CANCELLED
            assert engine.approvals(run.id)[0].decision is Decision.WITHDRAWN

            browser.find_element(By.CSS_SELECTOR, "#retry button").click()
            _poll(lambda: "queued again" in browser.page_source, 10, "the retry")
            assert browser.find_element(By.ID, "status").text == "queued"
            assert engine.get_run(run.id).status is RunStatus.QUEUED and queued == [run.id]
        finally:
            browser.get("about:blank")


def test_a_token_link_opens_its_approval_and_nothing_else_in_a_browser(
    engine: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    _agent, run, approval = waiting_run(engine, queued, {"customer": "c-one"}, note="mine")
    _other_agent, other, _ = waiting_run(engine, queued, {"customer": "c-two"}, note="n-two")
    token = engine.token(approval.approval_id)
    with serving(signed_in_app(engine)) as (port, _handlers):
        root = f"http://127.0.0.1:{port}"
        browser.get(f"{root}{BASE}/approvals/{approval.approval_id}?token={token}")
        shown = browser.find_element(By.TAG_NAME, "main").text
        assert "Approve refund?" in shown and '"note": "mine"' in shown
        assert not browser.find_elements(By.CSS_SELECTOR, "header.top")  # no console around it
        for path in ("/approvals", f"/runs/{run.id}", f"/runs/{other.id}", "/"):
            browser.get(f"{root}{BASE}{path}")
            assert browser.title == "Forbidden", path
            assert "n-two" not in browser.page_source and "c-two" not in browser.page_source
        other_approval = engine.approvals(other.id)[0].approval_id
        browser.get(f"{root}{BASE}/approvals/{other_approval}?token={token}")
        assert browser.title == "Forbidden" and "n-two" not in browser.page_source


def _other_site(target: str) -> Any:
    """A page of another origin whose form posts a decision to ``target``,
    as a cross-site request forgery would (it cannot know the CSRF token)."""
    html = (
        f'<!doctype html><form method="post" action="{target}">'
        '<input type="hidden" name="decision" value="approve">'
        '<input type="hidden" name="reason" value="forged">'
        '<button id="go">go</button></form>'
    ).encode()

    def app(environ: Any, start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/html")])
        return [html]

    return app


def test_a_forged_post_from_another_site_is_refused_and_changes_nothing(
    engine: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    with serving(signed_in_app(engine)) as (port, _handlers):
        root = f"http://127.0.0.1:{port}"
        target = f"{root}{BASE}/approvals/{approval.approval_id}"
        with serving(_other_site(target)) as (evil_port, _evil_handlers):
            browser.get(f"{root}/login?user=alice")  # the victim is signed in
            browser.get(f"http://127.0.0.1:{evil_port}/")
            browser.find_element(By.ID, "go").click()
            _poll(lambda: browser.current_url == target, 10, "the forged post")
            assert browser.title == "Not done" and "CSRF" in browser.page_source
    assert engine.approvals(run.id)[0].pending
    assert engine.get_run(run.id).status is RunStatus.WAITING and queued == []
