"""The console shows a run that needs a person (issue 26, items 1 and 2): a
badge and a filter in the runs list, a section on the run's page naming the
effect of unknown outcome, and a form that records what the signed-in user
found; the flag clears, and who said what is kept."""

from __future__ import annotations

import uuid
from typing import Any

from flask import Flask

from runner.console.flask import console_blueprint
from runner.testing import TestEngine
from store.models import EffectOutcome
from tests.conftest import csp_refusals
from tests.console.conftest import BASE, guard, page_text, post
from tests.integration.test_unknown_effects import Refunds, crashed_mid_refund


def console_on(rw: TestEngine) -> Flask:
    app = Flask(__name__)
    app.secret_key = "console-tests-" + uuid.uuid4().hex
    app.register_blueprint(console_blueprint(rw.engine, guard=guard), url_prefix=BASE)
    return app


def test_the_console_flags_the_run_and_records_who_resolved_it(
    runwright_engine: TestEngine,
) -> None:
    flagged_id = crashed_mid_refund(runwright_engine, Refunds())
    fine = runwright_engine.run(Refunds().agent)
    client = console_on(runwright_engine).test_client()

    listed = page_text(client, f"{BASE}/?attention=1")
    assert flagged_id in listed and fine.id not in listed
    assert 'name="attention" value="1" checked' in listed
    everything = page_text(client, f"{BASE}/")
    assert everything.count("needs attention</span>") == 1 and fine.id in everything

    path = f"{BASE}/runs/{flagged_id}"
    page = page_text(client, path)
    assert "Effects of unknown outcome" in page and "needs attention</span>" in page
    assert f"{flagged_id}:call_refund" in page  # the idempotency key, to check with the service
    action = f"{path}/effects/call_refund/resolve"
    assert f'action="{action}"' in page

    refused = post(client, action, {"outcome": "maybe"}, csrf_from=path)
    assert refused.status_code == 400
    assert runwright_engine.get_run(flagged_id).needs_attention
    no_token = post(client, action, {"outcome": "done"}, csrf_from=None)
    assert no_token.status_code in (400, 403)
    assert runwright_engine.get_run(flagged_id).needs_attention

    answer = post(client, action, {"outcome": "done", "note": "in the ledger"}, csrf_from=path)
    assert answer.status_code == 303
    assert not runwright_engine.get_run(flagged_id).needs_attention
    (effect,) = runwright_engine.engine.unknown_effects(flagged_id)
    assert (effect.resolved_outcome, effect.resolved_by) == (EffectOutcome.DONE, "alice")
    assert effect.resolved_note == "in the ledger"
    page = page_text(client, f"{path}?note=resolved")
    assert "Resolved: it took place, by alice" in page and "in the ledger" in page
    assert "needs attention</span>" not in page

    again = post(client, action, {"outcome": "not_done"}, csrf_from=path)
    assert again.status_code == 409 and "already resolved done by alice" in again.get_data(
        as_text=True
    )


def test_resolving_in_headless_chromium_clears_the_badge(
    runwright_engine: TestEngine, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    from tests.console.test_browser import _poll, signed_in_app
    from tests.e2e.test_sse_http import serving

    run_id = crashed_mid_refund(runwright_engine, Refunds())
    with serving(signed_in_app(runwright_engine.engine)) as (port, _handlers):
        root = f"http://127.0.0.1:{port}"
        browser.get(f"{root}/login?user=bea")
        browser.get(f"{root}{BASE}/?attention=1")
        row = browser.find_element(By.XPATH, f"//tr[td/a[text()='{run_id}']]")
        assert "needs attention" in row.text
        row.find_element(By.LINK_TEXT, run_id).click()
        form = _poll(
            lambda: next(iter(browser.find_elements(By.CSS_SELECTOR, "form.resolve")), None),
            30,
            "the run's page",
        )
        form.find_element(By.CSS_SELECTOR, "input[value='not_done']").click()
        form.find_element(By.NAME, "note").send_keys("no charge in the ledger")
        form.find_element(By.TAG_NAME, "button").click()
        # The POST's redirect lands on the run's page again, now with the resolution.
        resolved = _poll(
            lambda: next(iter(browser.find_elements(By.CSS_SELECTOR, "p.resolved")), None),
            30,
            "the page to show the resolution",
        )
        assert "did not take place, by bea" in resolved.text
        assert "no charge in the ledger" in resolved.text
        assert not browser.find_elements(By.CSS_SELECTOR, "h1 .st-attention")
        assert csp_refusals(browser) == []
    run = runwright_engine.get_run(run_id)
    assert not run.needs_attention
    (effect,) = runwright_engine.engine.unknown_effects(run_id)
    assert (effect.resolved_outcome, effect.resolved_by) == (EffectOutcome.NOT_DONE, "bea")
