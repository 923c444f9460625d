"""Issue 53's "who may see what", in headless Chromium against the standalone
console with two accounts: a viewer sees a run's status and its payload
masked, and the audit log shows no payload read; an approver sees the
payload and decides; each action is in the audit log, and ``verify_audit``
finds a row deleted with SQL."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from selenium import webdriver
from selenium.webdriver.common.by import By

from runner import Engine
from runner.console.accounts import add_account
from runner.console.masking import MASK
from runner.console.standalone import StandaloneConsole
from runner.core.audit import AuditAction
from runner.core.settings import Settings
from store.models import Decision
from store.postgres import PostgresStore
from tests.conftest import csp_refusals
from tests.console.conftest import approval_agent, execute_all
from tests.console.test_standalone_browser import _wait_for, served

VIEWER = ("vera", "vera's long password")
APPROVER = ("ann", "ann's long password")


def sign_in(browser: webdriver.Chrome, root: str, account: tuple[str, str], page: str) -> None:
    browser.get(f"{root}/ops/login?next=/ops{page}")
    browser.find_element(By.NAME, "name").send_keys(account[0])
    browser.find_element(By.NAME, "password").send_keys(account[1])
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    _wait_for(browser, f'<span class="user">{account[0]}</span>')


def test_a_viewer_sees_masked_payloads_an_approver_decides_and_the_log_holds(
    engine: Engine,
    queued: list[str],
    settings: Settings,
    pg_store: PostgresStore,
    tmp_path: Path,
    browser: webdriver.Chrome,
) -> None:
    agent = approval_agent()
    run = engine.start(agent.name, {"customer": "Ada Lovelace"})
    execute_all(engine, queued)
    users = tmp_path / "users"
    add_account(users, *VIEWER, role="viewer")
    add_account(users, *APPROVER, role="approver")
    assert settings.secret_key
    app = StandaloneConsole(
        engine, accounts=users, secret_key=settings.secret_key, prefix="/ops", live_timeout=5
    )
    with served(app) as root:
        try:
            sign_in(browser, root, VIEWER, f"/runs/{run.id}")
            assert browser.find_element(By.ID, "status").text == "waiting"
            assert MASK in browser.page_source and "Ada Lovelace" not in browser.page_source
            assert "arrived broken" not in browser.page_source  # a tool's result
            assert browser.find_elements(By.ID, "cancel") == []
            browser.get(f"{root}/ops/approvals")
            _wait_for(browser, '<article class="ask"')
            assert MASK in browser.page_source and "Ada Lovelace" not in browser.page_source
            assert browser.find_elements(By.CSS_SELECTOR, "button.approve") == []
            assert [e for e in engine.audit_log() if e.actor == "vera"] == []
            browser.find_element(By.CSS_SELECTOR, "form.signout button").click()
            _wait_for(browser, "Sign in to the Runwright console")

            sign_in(browser, root, APPROVER, f"/runs/{run.id}")
            assert "Ada Lovelace" in browser.page_source and MASK not in browser.page_source
            browser.get(f"{root}/ops/approvals")
            _wait_for(browser, '<article class="ask"')
            card = browser.find_element(By.CSS_SELECTOR, "article.ask")
            card.find_element(By.NAME, "reason").send_keys("checked the order")
            card.find_element(By.CSS_SELECTOR, "button.approve").click()
            _wait_for(browser, "Approved.")
            assert csp_refusals(browser) == []
        finally:
            browser.get("about:blank")

    [decided] = engine.approvals(run.id)
    assert (decided.decision, decided.decided_by) == (Decision.APPROVED, "ann")
    log = engine.audit_log()
    assert [(e.actor, e.action, e.run_id) for e in log] == [
        ("ann", AuditAction.VIEWED_PAYLOADS, run.id),
        ("ann", AuditAction.DECIDED, run.id),
    ]
    assert all(e.source == "console 127.0.0.1" for e in log)
    assert engine.verify_audit().ok

    with pg_store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM audit WHERE id = :id"), {"id": log[0].id})
    check = engine.verify_audit()
    assert not check.ok and check.broken_at == log[1].id and "missing" in (check.why or "")
