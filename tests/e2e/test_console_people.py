"""Issue 29's console acceptance, with real ``celery worker`` processes in
real headless Chromium: the example's ``support_triage`` asks to refund order
A-1002's total, 125; an approver signs in to the Flask example, opens the
approval in the inbox, edits the amount to 100 (the page first refuses a box
that is not JSON, without sending it) and approves. The refund runs exactly
once, with 100; the run's page (followed live, then rendered again), the
approvals' history and the event feed all show the model's 125, the
person's 100 and who edited.

``RUNWRIGHT_SCREENSHOTS=docs/images`` keeps its screenshots for the docs
(console-edit.png, console-edited-run.png); otherwise they go to the test's
temporary directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from examples import agents  # noqa: F401  (the agent the workers run, known here too)
from examples.flask_app.app import create_app
from runner.console.accounts import add_account
from store.events import EventType
from store.models import Decision, EffectStatus, RunStatus, StepKind
from tests.conftest import csp_refusals
from tests.e2e.cluster import Cluster, wait_until
from tests.e2e.test_console_browser import screenshots, shoot
from tests.e2e.test_sse_http import serving

PASSWORD = "correct horse battery"
ASKED = {"order_id": "A-1002", "amount": 125}  # what the example's model asks for
EDITED = {"order_id": "A-1002", "amount": 100}  # what the approver approves


def _poll(predicate: Any, timeout: float, what: str) -> Any:
    return wait_until(predicate, timeout, what, interval=0.05)


@pytest.mark.timeout(240)
def test_an_approver_edits_the_refund_to_100_and_it_runs_once_with_100(
    cluster: Cluster,
    browser: webdriver.Chrome,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    users = tmp_path / "console-users"
    add_account(users, "alice", PASSWORD)
    monkeypatch.setenv("EXAMPLE_CONSOLE_USERS", str(users))
    engine = cluster.engine()
    images = screenshots(tmp_path)
    workers = {"RUNWRIGHT_AGENTS": "examples.agents", "EXAMPLE_INBOX": str(tmp_path / "inbox")}
    cluster.worker("w1", **workers)
    cluster.worker("w2", **workers)
    # The payload the example app's own form sends for A-1002.
    run = engine.start("support_triage", {"message": "Order A-1002 never arrived, please help"})
    _poll(lambda: engine.get_run(run.id).status is RunStatus.WAITING, 60, "the run to wait")
    [asked] = engine.approvals(run.id)
    assert (asked.tool_name, asked.input) == ("refund", ASKED)

    posts: list[str] = []
    app = create_app(engine)

    def counted(environ: Any, start_response: Any) -> Any:
        if environ["REQUEST_METHOD"] == "POST":
            posts.append(environ["PATH_INFO"])
        return app(environ, start_response)

    with serving(counted) as (port, _handlers):
        root = f"http://127.0.0.1:{port}"
        try:
            browser.set_window_size(1280, 900)
            browser.get(f"{root}/login")
            browser.find_element(By.NAME, "name").send_keys("alice")
            browser.find_element(By.NAME, "password").send_keys(PASSWORD)
            browser.find_element(By.CSS_SELECTOR, "form button").click()
            _poll(lambda: "/console/" in browser.current_url, 10, "the console")
            posts.clear()

            # The run's page, open in a tab of its own, follows the run from here.
            browser.get(f"{root}/console/runs/{run.id}")
            run_tab = browser.current_window_handle
            browser.execute_script("window.sameDocument = 1")
            browser.switch_to.new_window("tab")
            browser.get(f"{root}/console/approvals")
            section = browser.find_element(By.ID, f"a-{asked.approval_id}")
            assert (
                "I will refund its total" in browser.find_element(By.CSS_SELECTOR, "article").text
            )
            section.find_element(By.CSS_SELECTOR, "details.edit summary").click()
            box = section.find_element(By.NAME, "arguments")
            assert json.loads(box.get_attribute("value") or "") == ASKED
            problem = browser.find_element(By.ID, f"args-{asked.approval_id}-problem")

            # A slip (a missing quote) is caught in the page: nothing is sent.
            box.clear()
            box.send_keys('{"order_id": "A-1002", "amount: 100}')
            section.find_element(By.CSS_SELECTOR, "button.approve").click()
            _poll(problem.is_displayed, 5, "the page to refuse the slip")
            assert problem.text.startswith("This is not JSON: ")
            assert posts == [] and engine.approvals(run.id)[0].pending

            box.clear()
            box.send_keys(json.dumps(EDITED, indent=2))
            section.find_element(By.NAME, "reason").send_keys("They keep the charger.")
            shoot(browser, images / "console-edit.png", height=1400)
            section.find_element(By.CSS_SELECTOR, "button.approve").click()
            _poll(
                lambda: "Approved with your edited arguments." in browser.page_source,
                10,
                "the inbox after approving",
            )
            assert posts == [f"/console/approvals/{asked.approval_id}"]  # sent once

            # The run's page, never reloaded, follows the workers to completed.
            browser.close()
            browser.switch_to.window(run_tab)
            status = browser.find_element(By.ID, "status")
            _poll(lambda: status.text == "completed", 90, "the page to show completed")
            assert browser.execute_script("return window.sameDocument") == 1  # no reload
            live = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#timeline li")]
            browser.refresh()
            rendered = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#timeline li")]
            shoot(browser, images / "console-edited-run.png", height=2400)
            assert browser.execute_script("return window.pwned") is None
            assert csp_refusals(browser) == []
        finally:
            browser.get("about:blank")  # closes the page's EventSource

    done = engine.get_run(run.id)
    assert done.status is RunStatus.COMPLETED, done.error

    # Exactly once, with the person's 100, under the call's idempotency key.
    [effect] = engine.effects(run.id)
    assert (effect.tool, effect.input, effect.status, effect.attempts) == (
        "refund",
        EDITED,
        EffectStatus.COMPLETED,
        1,
    )
    assert effect.key == f"{run.id}:{asked.tool_call_id}"
    assert effect.output == {"refunded": 100, "order_id": "A-1002"}
    [ran] = [s for s in engine.steps(run.id) if s.kind is StepKind.TOOL and s.name == "refund"]
    assert ran.input == EDITED and ran.output == {"refunded": 100, "order_id": "A-1002"}
    assert '"refunded": 100' in str(done.output)  # what the model was told it did

    # The history: the model's 125 kept beside the person's 100, and who.
    [decided] = engine.approvals(run.id)
    assert (decided.decision, decided.decided_by, decided.reason) == (
        Decision.APPROVED,
        "alice",
        "They keep the charger.",
    )
    assert (decided.input, decided.arguments, decided.edited) == (ASKED, EDITED, True)

    # The event feed says the same.
    [event] = [
        e.data
        for e in engine.events(run.id, timeout=0)
        if e.type is EventType.APPROVAL and e.data["action"] == "decided"
    ]
    assert (event["input"], event["arguments"], event["edited"], event["decided_by"]) == (
        ASKED,
        EDITED,
        True,
        "alice",
    )

    # The run's page, live and rendered again: the model's 125, alice's 100,
    # who edited, and the refund that ran with 100.
    for items in (live, rendered):
        [approval] = [t for t in items if "approval approved" in t]
        assert "by alice with edited arguments · reason: They keep the charger." in approval
        model_said, alice_said = approval.split("the model asked for\n")[1].split(
            "alice approved\n"
        )
        assert json.loads(model_said) == ASKED and json.loads(alice_said) == EDITED
        [tool] = [t for t in items if "\ntool\nrefund" in t]
        assert '"amount": 100' in tool and '"refunded": 100' in tool and "125" not in tool
        assert items[-1] == "status completed"
