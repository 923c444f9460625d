"""A tool that changed under a waiting decision, in real headless Chromium
(docs/approvals.md): the approval link's page marks the call and says what
changed, refuses to approve it as it is with the reason, and takes an edit
that fits the tool now, which the tool then runs with."""

from __future__ import annotations

from typing import Any

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from runner import Agent, Engine, RunStatus, effect
from runner.testing import Request, ScriptedModel, call, text, tools
from tests.console.conftest import BASE, execute_all
from tests.console.test_browser import signed_in_app
from tests.e2e.test_sse_http import serving
from tests.helpers import unique


def _script(request: Request) -> Any:
    if request.step == 1:
        return tools(call("refund", {"order": "A-1"}))
    return text("told: " + str(request.tool_results()[-1]["content"]))


def test_a_tool_that_gained_a_required_parameter_is_marked_refused_as_is_and_edited(
    engine: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    name, done = unique("changed-page"), []
    model = ScriptedModel(unique("changed-page-model"), _script)

    @effect
    def refund(order: str, idempotency_key: str) -> dict[str, Any]:
        """Refund an order."""
        done.append({"order": order})
        return {"refunded": order}

    Agent(name=name, model=model.model, tools=[refund], approvals={"refund": True})
    run = engine.start(name, {})
    execute_all(engine, queued)
    [approval] = engine.approvals(run.id)
    assert approval.pending

    # A deploy while the call waits: refund now needs a reason.
    @effect  # type: ignore[no-redef]
    def refund(order: str, reason: str, idempotency_key: str) -> dict[str, Any]:
        """Refund an order."""
        done.append({"order": order, "reason": reason})
        return {"refunded": order, "reason": reason}

    Agent(name=name, model=model.model, tools=[refund], approvals={"refund": True}, replace=True)
    token = engine.token(approval.approval_id)
    with serving(signed_in_app(engine)) as (port, _handlers):
        link = f"http://127.0.0.1:{port}{BASE}/approvals/{approval.approval_id}?token={token}"
        browser.get(link)
        mark = browser.find_element(By.CSS_SELECTOR, "div.changed")
        assert "Tool changed since requested" in mark.text
        assert "tool refund: parameter reason added (required)" in mark.text
        # The edit box is open, holds the call's arguments, and shows the tool's schema now.
        box = browser.find_element(By.CSS_SELECTOR, "details.edit[open] textarea")
        assert '"order": "A-1"' in box.get_attribute("value")
        params = browser.find_element(By.CSS_SELECTOR, "details.edit ul.params").text
        assert "reason string, required" in params and "order string, required" in params

        browser.find_element(By.CSS_SELECTOR, "button.approve").click()
        WebDriverWait(browser, 10).until(lambda b: b.title == "Not decided")
        refused = browser.find_element(By.TAG_NAME, "main").text
        assert "tool refund changed since the call was requested" in refused
        assert "'reason' is a required property" in refused
        assert engine.approvals(run.id)[0].pending

        browser.get(link)
        box = browser.find_element(By.CSS_SELECTOR, "details.edit[open] textarea")
        box.clear()
        box.send_keys('{"order": "A-1", "reason": "arrived broken"}')
        browser.find_element(By.CSS_SELECTOR, "button.approve").click()
        WebDriverWait(browser, 10).until(lambda b: b.title == "Approved")
        assert "Approved: refund, with your arguments" in browser.page_source
    decided = engine.approvals(run.id)[0]
    assert decided.arguments == {"order": "A-1", "reason": "arrived broken"}
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    assert done == [{"order": "A-1", "reason": "arrived broken"}]
