"""A run's move to another version reaches its open page live, in a real
browser: the page's script renders the ``version`` event as the server does."""

from __future__ import annotations

from selenium import webdriver
from selenium.webdriver.common.by import By

from runner import Engine, RunStatus
from tests.conftest import csp_refusals
from tests.console.conftest import BASE, execute_all, unique
from tests.console.test_browser import _poll, signed_in_app
from tests.console.test_version_page import approve_all, define
from tests.e2e.test_sse_http import serving


def test_a_move_to_another_version_appears_on_the_open_page(
    engine: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    name = unique("ver-live")
    old = define(name, "a", policy="pin")
    run = engine.start(name, {})
    execute_all(engine, queued)
    new = define(name, "b", policy="pin")
    approve_all(engine, run.id)
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.QUEUED  # parked for a worker of a
    with serving(signed_in_app(engine)) as (port, _handlers):
        root = f"http://127.0.0.1:{port}"
        try:
            browser.get(f"{root}/login?user=alice")
            browser.get(f"{root}{BASE}/runs/{run.id}")
            assert f"Waiting for a worker of version {old}" in browser.page_source
            assert not browser.find_elements(By.CSS_SELECTOR, "li.kind-version")

            engine.versions_loaded()  # a worker of b records it
            assert engine.upgrade_runs(name, "a", by="ops").moved == [run.id]
            item = _poll(
                lambda: browser.find_elements(By.CSS_SELECTOR, "li.kind-version"),
                10,
                "the version event",
            )[0]
            assert item.find_element(By.TAG_NAME, "b").text == f"version {old} \u2192 {new}"
            assert item.find_element(By.CSS_SELECTOR, ".meta").text == "by ops"
            changes = [li.text for li in item.find_elements(By.CSS_SELECTOR, "ul.changes li")]
            assert changes == ["label: a \u2192 b", "instructions changed"]
            assert csp_refusals(browser) == []
        finally:
            browser.get("about:blank")
