"""The console's acceptance 1 with real ``celery worker`` processes, in real
headless Chromium: an approver signs in to the Flask example, opens the
approvals inbox, judges the call by what it shows (the agent, the trigger
payload, the model's message, the results the run had seen, the arguments,
the expiry counting down), approves it with a reason, and the run's page
follows the run to ``completed`` with no reload while a worker finishes it.

The screenshots of docs/images/ come from here: ``make screenshots`` runs
these tests with ``RUNWRIGHT_SCREENSHOTS=docs/images`` (otherwise they go to
the test's temporary directory)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from examples import agents  # noqa: F401  (the agent the workers run, known here too)
from examples.flask_app.app import create_app
from runner.console.accounts import add_account
from store.models import Decision, RunStatus
from tests.e2e.cluster import Cluster, wait_until
from tests.e2e.test_sse_http import serving

PASSWORD = "correct horse battery"


def screenshots(tmp_path: Path) -> Path:
    where = os.environ.get("RUNWRIGHT_SCREENSHOTS")
    path = Path(where) if where else tmp_path / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def shoot(browser: webdriver.Chrome, path: Path, height: int | None = None) -> None:
    """The whole page (the window made as tall as the page, up to ``height``)."""
    tall = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, min(int(tall), height or 4000))
    browser.save_screenshot(str(path))
    browser.set_window_size(1280, 900)


def _poll(predicate: Any, timeout: float, what: str) -> Any:
    return wait_until(predicate, timeout, what, interval=0.05)


@pytest.fixture
def signed_in_app(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Any]:
    users = tmp_path / "console-users"
    add_account(users, "alice", PASSWORD)
    monkeypatch.setenv("EXAMPLE_CONSOLE_USERS", str(users))
    engine = cluster.engine()
    return create_app(engine), engine


def test_an_approver_approves_in_the_inbox_and_the_run_page_follows_to_completed(
    cluster: Cluster,
    signed_in_app: tuple[Any, Any],
    browser: webdriver.Chrome,
    tmp_path: Path,
) -> None:
    app, engine = signed_in_app
    images = screenshots(tmp_path)
    workers = {"RUNWRIGHT_AGENTS": "examples.agents", "EXAMPLE_INBOX": str(tmp_path / "inbox")}
    cluster.worker("w1", **workers)
    cluster.worker("w2", **workers)
    run = engine.start("support_triage", {"message": "Order A-1002 never arrived, please help"})
    _poll(lambda: engine.get_run(run.id).status is RunStatus.WAITING, 60, "the run to wait")

    with serving(app) as (port, _handlers):
        root = f"http://127.0.0.1:{port}"
        try:
            browser.set_window_size(1280, 900)
            browser.get(f"{root}/console/approvals")  # not signed in: to the login page
            assert browser.current_url.startswith(f"{root}/login?next=")
            browser.find_element(By.NAME, "name").send_keys("alice")
            browser.find_element(By.NAME, "password").send_keys(PASSWORD)
            browser.find_element(By.CSS_SELECTOR, "form button").click()
            _poll(lambda: browser.current_url == f"{root}/console/approvals", 10, "the inbox")

            card = browser.find_element(By.CSS_SELECTOR, "article.ask")
            shown = card.text
            assert "support_triage asks to call refund" in shown  # the agent
            assert "Order A-1002 never arrived, please help" in shown  # the trigger payload
            assert "I will refund its total" in shown  # the model's message that made the call
            assert "lookup_order" in shown and "never arrived" in shown  # what it had seen
            assert '"amount": 125' in shown  # the arguments
            expiry = card.find_element(By.CSS_SELECTOR, "[data-expires]")
            assert expiry.text.startswith("expires in 23 h")  # a day, as the agent asks
            # The page counts it down every second from data-expires: what is
            # written over it now is the countdown again a second later.
            browser.execute_script("arguments[0].textContent = 'stale'", expiry)
            _poll(lambda: expiry.text.startswith("expires in 23 h"), 5, "the countdown")
            shoot(browser, images / "console-inbox.png")

            card.find_element(By.NAME, "reason").send_keys("The carrier confirms the loss.")
            card.find_element(By.CSS_SELECTOR, "button.approve").click()
            _poll(lambda: "Approved." in browser.page_source, 10, "the inbox after deciding")
            [approval] = engine.approvals(run.id)
            assert (approval.decision, approval.decided_by, approval.reason) == (
                Decision.APPROVED,
                "alice",
                "The carrier confirms the loss.",
            )

            # The run page, opened now, follows the workers with no reload.
            browser.get(f"{root}/console/runs/{run.id}")
            status = browser.find_element(By.ID, "status")
            marker = browser.execute_script("window.sameDocument = 1; return 1")
            _poll(lambda: status.text == "completed", 60, "the page to show completed")
            assert browser.execute_script("return window.sameDocument") == marker  # no reload
            assert engine.get_run(run.id).status is RunStatus.COMPLETED
            items = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#timeline li")]
            assert any("approval approved" in t and "by alice" in t for t in items)
            assert items[-1] == "status completed"
            browser.refresh()  # the facts at the top (finished, steps, cost) as they end
            shoot(browser, images / "console-run.png")
        finally:
            browser.get("about:blank")  # closes the page's EventSource


def test_a_long_runs_timeline(
    cluster: Cluster,
    signed_in_app: tuple[Any, Any],
    browser: webdriver.Chrome,
    tmp_path: Path,
) -> None:
    """A 40-step run's page: every step in order, long results collapsed."""
    app, engine = signed_in_app
    cluster.worker("w1")
    run = engine.start("steady", {"steps": 40, "latency": 0})
    _poll(lambda: engine.get_run(run.id).ended, 90, "the run to settle")
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    with serving(app) as (port, _handlers):
        root = f"http://127.0.0.1:{port}"
        try:
            browser.get(f"{root}/login")
            browser.find_element(By.NAME, "name").send_keys("alice")
            browser.find_element(By.NAME, "password").send_keys(PASSWORD)
            browser.find_element(By.CSS_SELECTOR, "form button").click()
            _poll(lambda: "/console/" in browser.current_url, 10, "the console")
            browser.get(f"{root}/console/runs/{run.id}")
            steps = browser.find_elements(By.CSS_SELECTOR, "#timeline li .idx")
            indexes = [int(s.text) for s in steps]
            assert indexes == sorted(indexes) and max(indexes) >= 40
            time.sleep(0.2)  # let the page settle its layout
            shoot(browser, screenshots(tmp_path) / "console-long-run.png", height=2400)
        finally:
            browser.get("about:blank")
