"""The console in the example Django project, in real headless Chromium:
a staff member signs in through the admin's login form, judges a call in
the inbox, approves it with a reason, and the run's page shows who decided
and follows the run to ``completed``; someone signed in who is not staff
gets the console's 403."""

from __future__ import annotations

import secrets

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from runner import Engine, RunStatus
from store.models import Decision
from tests.conftest import csp_refusals
from tests.console.conftest import HOSTILE_IMG, HOSTILE_SCRIPT, approval_agent, execute_all
from tests.console.django_support import BASE, make_user
from tests.e2e.test_sse_http import serving
from tests.helpers import run_in_thread, wait_for


@pytest.fixture
def console(django_console: Engine) -> Engine:
    return django_console


def sign_in(browser: webdriver.Chrome, username: str, password: str) -> None:
    """Fill in the admin's login form (the browser is on it)."""
    browser.find_element(By.NAME, "username").send_keys(username)
    browser.find_element(By.NAME, "password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()


def test_staff_sign_in_and_approve_in_the_inbox(
    console: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    from django.core.handlers.wsgi import WSGIHandler
    from django.test import override_settings

    password = secrets.token_urlsafe(16)
    staff = make_user(password=password)
    agent = approval_agent(says="Refund? " + HOSTILE_SCRIPT, note=HOSTILE_IMG)
    run = console.start(agent.name, {"customer": "Ada Lovelace"})
    execute_all(console, queued)
    assert console.get_run(run.id).status is RunStatus.WAITING

    worker = None
    with (
        override_settings(RUNWRIGHT_CONSOLE_LIVE_TIMEOUT=20),
        serving(WSGIHandler()) as (port, _handlers),
    ):
        root = f"http://127.0.0.1:{port}"
        try:
            browser.get(f"{root}{BASE}/approvals")
            assert browser.current_url.startswith(f"{root}/admin/login/?next=")
            sign_in(browser, staff.get_username(), password)
            wait_for(lambda: browser.current_url == f"{root}{BASE}/approvals", 10)

            card = browser.find_element(By.CSS_SELECTOR, "article.ask")
            assert f"{agent.name} asks to call refund" in card.text
            assert "Refund? <script>" in card.text  # the model's text, as text
            assert "Ada Lovelace" in card.text and "arrived broken" in card.text
            card.find_element(By.NAME, "reason").send_keys("the photo shows it")
            card.find_element(By.CSS_SELECTOR, "button.approve").click()
            wait_for(lambda: "Approved." in browser.page_source, 10)
            [decided] = console.approvals(run.id)
            assert (decided.decision, decided.decided_by, decided.reason) == (
                Decision.APPROVED,
                staff.get_username(),
                "the photo shows it",
            )

            browser.get(f"{root}{BASE}/runs/{run.id}")
            timeline = browser.find_element(By.ID, "timeline").text
            assert f"by {staff.get_username()}" in timeline and "the photo shows it" in timeline
            status = browser.find_element(By.ID, "status")
            assert status.text == "queued"
            worker, box = run_in_thread(console, queued.pop())
            wait_for(lambda: status.text == "completed", 20)
            worker.join(15)
            assert box["run"].status is RunStatus.COMPLETED and agent.refunds.done == [30]
            assert browser.execute_script("return window.pwned") is None
            assert not browser.find_elements(By.CSS_SELECTOR, "main img, main script")
            assert csp_refusals(browser) == []
        finally:
            browser.get("about:blank")  # closes the page's EventSource
            if worker is not None:
                worker.join(15)


def test_a_signed_in_user_who_is_not_staff_gets_403(
    console: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler
    from django.test import Client

    password = secrets.token_urlsafe(16)
    outsider = make_user(staff=False, password=password)
    agent = approval_agent()
    run = console.start(agent.name, {"customer": "Ada Lovelace"})
    execute_all(console, queued)

    with serving(WSGIHandler()) as (port, _handlers):
        root = f"http://127.0.0.1:{port}"
        browser.get(f"{root}{BASE}/approvals")
        sign_in(browser, outsider.get_username(), password)
        # The admin's form signs in staff only; it says so and stays put. The
        # click returns before the form's answer has loaded: wait for it.
        wait_for(lambda: "staff account" in browser.page_source, 10)
        assert browser.current_url.startswith(f"{root}/admin/login/")

        # Signed in by the project some other way (its own login view): a session.
        elsewhere = Client()
        elsewhere.force_login(outsider)
        session = elsewhere.cookies[settings.SESSION_COOKIE_NAME].value
        browser.add_cookie({"name": settings.SESSION_COOKIE_NAME, "value": session, "path": "/"})
        for path in ("/approvals", f"/runs/{run.id}", "/"):
            browser.get(f"{root}{BASE}{path}")
            assert browser.title.startswith("Forbidden"), path
            body = browser.find_element(By.TAG_NAME, "main").text
            assert "The console is for staff" in body and run.id not in body
            assert "Ada Lovelace" not in browser.page_source
        assert console.approvals(run.id)[0].pending
        browser.get("about:blank")
