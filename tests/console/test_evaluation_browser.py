"""The console's evaluations in headless Chromium, on the standalone console
with a viewer's and a reader's accounts: two evaluations of one dataset
(made through the store), the list, an evaluation's page and their
comparison picked with the list's form. The viewer reads the summaries and
which cases changed, every payload and output masked, and the audit log
records no read; the reader sees them, and each page that showed them is a
``viewed_payloads`` entry. No page trips the CSP."""

from __future__ import annotations

from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from runner import Engine
from runner.console.accounts import add_account
from runner.console.masking import MASK
from runner.console.standalone import StandaloneConsole
from runner.core.audit import AuditAction
from runner.core.settings import Settings
from tests.conftest import csp_refusals
from tests.console.test_evaluation_pages import (
    BETTER,
    CASES,
    SECRET,
    WORSE,
    interval_text,
    output_summary,
    two_evaluations,
)
from tests.console.test_roles_browser import sign_in
from tests.console.test_standalone_browser import _wait_for, served

VIEWER = ("vera", "vera's long password")
READER = ("rita", "rita's long password")


def compare_in_the_list(browser: webdriver.Chrome, root: str, new: str, baseline: str) -> None:
    """Pick the two in the list's form and send it."""
    browser.get(f"{root}/ops/evaluations")
    _wait_for(browser, 'id="compare"')
    form = browser.find_element(By.ID, "compare")
    Select(form.find_element(By.NAME, "evaluation")).select_by_value(new)
    Select(form.find_element(By.NAME, "against")).select_by_value(baseline)
    form.find_element(By.CSS_SELECTOR, "button").click()
    _wait_for(browser, f"Evaluation {new} against {baseline}")


def changed_rows(browser: webdriver.Chrome) -> dict[int, str]:
    """The comparison's marked rows, in the page's order: each case's class."""
    return {
        int(str(row.get_attribute("id")).removeprefix("case-")): str(row.get_attribute("class"))
        for row in browser.find_elements(By.CSS_SELECTOR, "#comparison tr.changed")
    }


def test_evaluations_compared_in_a_browser_masked_for_a_viewer_and_shown_to_a_reader(
    engine: Engine, settings: Settings, tmp_path: Path, browser: webdriver.Chrome
) -> None:
    pair = two_evaluations(engine)
    interval = interval_text(output_summary(engine, pair.new))
    users = tmp_path / "users"
    add_account(users, *VIEWER, role="viewer")
    add_account(users, *READER, role="reader")
    assert settings.secret_key
    app = StandaloneConsole(
        engine, accounts=users, secret_key=settings.secret_key, prefix="/ops", live_timeout=5
    )
    with served(app) as root:
        try:
            sign_in(browser, root, VIEWER, "/")
            browser.find_element(By.LINK_TEXT, "Evaluations").click()
            _wait_for(browser, 'id="evaluations"')
            listed = [
                row.get_attribute("id")
                for row in browser.find_elements(By.CSS_SELECTOR, "#evaluations tbody tr")
            ]
            assert listed[:2] == [f"e-{pair.new}", f"e-{pair.baseline}"]
            browser.find_element(By.LINK_TEXT, pair.new).click()
            _wait_for(browser, f"Evaluation {pair.new}")
            summary = browser.find_element(By.ID, "scorer-output").text
            assert interval in summary and "75%" in summary and "50%" in summary
            assert MASK in browser.page_source and SECRET not in browser.page_source
            compare_in_the_list(browser, root, pair.new, pair.baseline)
            assert interval in browser.find_element(By.ID, "scorer-output").text
            marked = changed_rows(browser)
            assert list(marked) == sorted(BETTER + WORSE)  # first, in order
            assert {n for n, css in marked.items() if "better" in css} == set(BETTER)
            assert {n for n, css in marked.items() if "worse" in css} == set(WORSE)
            assert browser.find_element(By.ID, "changed-count").text.startswith(
                f"{len(BETTER) + len(WORSE)} of {CASES} cases"
            )
            assert MASK in browser.page_source and SECRET not in browser.page_source
            assert [e for e in engine.audit_log() if e.actor == "vera"] == []
            assert csp_refusals(browser) == []
            browser.find_element(By.CSS_SELECTOR, "form.signout button").click()
            _wait_for(browser, "Sign in to the Runwright console")

            sign_in(browser, root, READER, f"/evaluations/{pair.new}")
            _wait_for(browser, f"Evaluation {pair.new}")
            first = browser.find_element(By.ID, "case-6")
            assert f"{SECRET}6" in first.text and MASK not in browser.page_source
            first.find_element(By.CSS_SELECTOR, "details.report summary").click()
            assert f"v2 answers {SECRET}6" in first.text  # the report, unfolded
            compare_in_the_list(browser, root, pair.new, pair.baseline)
            row = browser.find_element(By.ID, f"case-{BETTER[0]}")
            assert f"v2 answers {SECRET}{BETTER[0]}" in row.text
            assert f"v1 answers {SECRET}{BETTER[0]}" in row.text
            assert "better: output" in row.text
            assert changed_rows(browser) == marked
            assert csp_refusals(browser) == []
        finally:
            browser.get("about:blank")

    views = [
        (e.actor, e.run_id, e.detail, e.source)
        for e in engine.audit_log()
        if e.action == AuditAction.VIEWED_PAYLOADS
    ]
    assert views == [
        ("rita", None, {"evaluation": pair.new}, "console 127.0.0.1"),
        ("rita", None, {"evaluation": pair.new, "against": pair.baseline}, "console 127.0.0.1"),
    ]
    assert engine.verify_audit().ok
