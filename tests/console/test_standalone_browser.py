"""The standalone console in headless Chromium, on its own server
(runner/console/server.py): a visitor is sent to the sign-in page, signs in,
lands on the page they asked for, decides, and signs out; the sign-in page
runs under the console's CSP like every other page."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.by import By

from runner import Engine
from runner.console.accounts import add_account
from runner.console.server import make_server
from runner.console.standalone import StandaloneConsole
from runner.core.settings import Settings
from store.models import Decision
from tests.conftest import csp_refusals
from tests.console.conftest import approval_agent, execute_all

PASSWORD = "alice's long password"


@contextmanager
def served(app: StandaloneConsole) -> Iterator[str]:
    server = make_server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _wait_for(browser: webdriver.Chrome, text: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while text not in browser.page_source:
        assert time.monotonic() < deadline, f"the page never said {text!r}"
        time.sleep(0.05)


def test_sign_in_decide_and_sign_out_in_a_browser(
    engine: Engine,
    queued: list[str],
    settings: Settings,
    tmp_path: Path,
    browser: webdriver.Chrome,
) -> None:
    agent = approval_agent()
    run = engine.start(agent.name, {})
    execute_all(engine, queued)
    users = tmp_path / "users"
    add_account(users, "alice", PASSWORD)
    assert settings.secret_key
    app = StandaloneConsole(
        engine, accounts=users, secret_key=settings.secret_key, prefix="/ops", live_timeout=5
    )
    with served(app) as root:
        try:
            browser.get(f"{root}/ops/approvals")
            assert browser.current_url.startswith(f"{root}/ops/login?next=")
            browser.find_element(By.NAME, "name").send_keys("alice")
            browser.find_element(By.NAME, "password").send_keys(PASSWORD)
            browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
            # The sign-in page's own stylesheet names `article`: wait for a card.
            _wait_for(browser, '<article class="ask"')
            assert browser.current_url == f"{root}/ops/approvals"
            card = browser.find_element(By.CSS_SELECTOR, "article.ask")
            assert browser.find_element(By.CSS_SELECTOR, "header .user").text == "alice"
            card.find_element(By.NAME, "reason").send_keys("from the browser")
            card.find_element(By.CSS_SELECTOR, "button.approve").click()
            _wait_for(browser, "Approved.")
            [decided] = engine.approvals(run.id)
            assert (decided.decision, decided.decided_by, decided.reason) == (
                Decision.APPROVED,
                "alice",
                "from the browser",
            )

            browser.find_element(By.CSS_SELECTOR, "form.signout button").click()
            _wait_for(browser, "Sign in to the Runwright console")
            browser.get(f"{root}/ops/")
            assert browser.current_url.startswith(f"{root}/ops/login")
            # The cookies were the console's own, and scripts cannot read them.
            assert browser.execute_script("return document.cookie") == ""
            assert csp_refusals(browser) == []
        finally:
            browser.get("about:blank")
