"""People beyond yes and no in real headless Chromium (issue 29): the page's
one script refuses an edit that is not a JSON object before anything is
sent, and says why beside the box; a structured question is answered in the
form made from its schema; the run page's live timeline tells edits,
answers and standing approvals as its server-rendered page does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from runner import Engine, RunStatus
from store.models import Decision, RequestKind
from tests.conftest import csp_refusals
from tests.console.conftest import (
    BASE,
    HOSTILE_IMG,
    HOSTILE_SCRIPT,
    Resolution,
    execute_all,
    question_agent,
    waiting_question,
    waiting_run,
)
from tests.console.test_browser import _poll, signed_in_app
from tests.e2e.test_sse_http import serving
from tests.helpers import run_in_thread, snapshot


@contextmanager
def served(engine: Engine) -> Iterator[tuple[str, list[str]]]:
    """The signed-in Flask app on a free port, and the paths of the POSTs it got."""
    app = signed_in_app(engine)
    posts: list[str] = []

    def counted(environ: Any, start_response: Any) -> Any:
        if environ["REQUEST_METHOD"] == "POST":
            posts.append(environ["PATH_INFO"])
        return app(environ, start_response)

    with serving(counted) as (port, _handlers):
        yield f"http://127.0.0.1:{port}", posts


def test_the_page_refuses_an_edit_that_is_not_a_json_object_without_a_request(
    engine: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    agent, run, approval = waiting_run(engine, queued, note="mug")
    with served(engine) as (root, posts):
        try:
            browser.get(f"{root}/login?user=alice")
            section = browser.find_element(By.ID, f"a-{approval.approval_id}")
            box = section.find_element(By.NAME, "arguments")
            assert not box.is_displayed()  # folded away until wanted
            section.find_element(By.CSS_SELECTOR, "details.edit summary").click()
            assert json.loads(box.get_attribute("value") or "") == {"amount": 30, "note": "mug"}
            problem = browser.find_element(By.ID, f"args-{approval.approval_id}-problem")
            assert not problem.is_displayed()
            before = snapshot(engine.store)

            for typed, says, button in (
                ("{amount: 5", "This is not JSON: ", "button.approve"),
                ("[5]", "This must be a JSON object", "button.approve"),
                ("null", "This must be a JSON object", "button.deny"),
                ("", "This is not JSON: ", "button.approve"),
            ):
                box.clear()
                if typed:
                    box.send_keys(typed)
                section.find_element(By.CSS_SELECTOR, button).click()
                _poll(problem.is_displayed, 5, f"the page to refuse {typed!r}")
                assert problem.text.startswith(says), problem.text
                assert box.get_attribute("aria-invalid") == "true"
                assert browser.current_url == f"{root}{BASE}/approvals"
            assert posts == []  # nothing was sent
            assert snapshot(engine.store) == before

            # Fixed, the message goes, and the same form may now be sent once.
            box.clear()
            box.send_keys('{"amount": 25, "note": "half of it"}')
            assert not problem.is_displayed()
            section.find_element(By.NAME, "reason").send_keys("a partial refund")
            section.find_element(By.CSS_SELECTOR, "button.approve").click()
            _poll(lambda: "Approved with your edited arguments." in browser.page_source, 10, "done")
            assert posts == [f"{BASE}/approvals/{approval.approval_id}"]
            [decided] = engine.approvals(run.id)
            assert (decided.decided_by, decided.arguments, decided.reason) == (
                "alice",
                {"amount": 25, "note": "half of it"},
                "a partial refund",
            )
            execute_all(engine, queued)
            assert agent.refunds.done == [25]
            assert csp_refusals(browser) == []
        finally:
            browser.get("about:blank")


def test_a_structured_question_is_answered_in_the_form_made_from_its_schema(
    engine: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    run, question = waiting_question(
        engine, queued, ask_human=Resolution, question="Refund or replace? " + HOSTILE_SCRIPT
    )
    with served(engine) as (root, posts):
        try:
            browser.get(f"{root}/login?user=alice")
            section = browser.find_element(By.ID, f"a-{question.approval_id}")
            assert f"Refund or replace? {HOSTILE_SCRIPT}" in section.text  # as text
            Select(section.find_element(By.NAME, "answer.action")).select_by_value("replace")
            section.find_element(By.NAME, "answer.amount").send_keys("12")
            section.find_element(By.NAME, "answer.urgent").click()
            Select(section.find_element(By.NAME, "answer.colour")).select_by_value("blue")
            section.find_element(By.NAME, "answer.note").send_keys(HOSTILE_IMG)
            section.find_element(By.CSS_SELECTOR, "button.answer").click()
            _poll(lambda: "Answered." in browser.page_source, 10, "the inbox after answering")
            assert posts == [f"{BASE}/approvals/{question.approval_id}"]
            [answered] = engine.approvals(run.id)
            assert (answered.decision, answered.decided_by) == (Decision.ANSWERED, "alice")
            assert answered.answer == {
                "action": "replace",
                "amount": 12,
                "ratio": 1.0,  # its default, as the form showed it
                "urgent": True,
                "colour": "blue",
                "note": HOSTILE_IMG,
            }
            assert browser.execute_script("return window.pwned") is None
            assert csp_refusals(browser) == []
        finally:
            browser.get("about:blank")


def timeline(browser: webdriver.Chrome, kinds: str = "") -> list[str]:
    """The timeline's items as text (``kinds``: of these classes only)."""
    selector = ", ".join(f"#timeline li.kind-{k}" for k in kinds.split()) or "#timeline li"
    for _ in range(20):
        try:
            return [li.text for li in browser.find_elements(By.CSS_SELECTOR, selector)]
        except StaleElementReferenceException:
            continue
    raise AssertionError("the timeline kept changing under the reader")


def test_the_live_timeline_tells_a_question_and_its_answer_as_the_page_does(
    engine: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    asked = "Which colour?\n" + HOSTILE_SCRIPT
    run = engine.start(question_agent(question=asked), {})
    with served(engine) as (root, _posts):
        worker = None
        try:
            browser.get(f"{root}/login?user=alice")
            browser.get(f"{root}{BASE}/runs/{run.id}")
            assert timeline(browser) == ["status queued"]
            worker, box = run_in_thread(engine, queued.pop())
            worker.join(15)
            assert box["run"].status is RunStatus.WAITING
            _poll(
                lambda: any("waits for a person's answer" in t for t in timeline(browser)),
                10,
                "the wait step",
            )
            [question] = engine.approvals(run.id)
            engine.answer(question.approval_id, HOSTILE_IMG + " blue", trusted=True, by="cy")
            _poll(
                lambda: any(t.startswith("1\nquestion answered") for t in timeline(browser)),
                10,
                "the answer",
            )
            live = timeline(browser, "approval")
            [answered] = [t for t in live if t.startswith("1\nquestion answered")]
            assert answered == (
                f"1\nquestion answered\nby cy\nquestion\n{asked}\nanswer\n{HOSTILE_IMG} blue"
            )
            assert f"1\nquestion asked\nquestion\n{asked}" in live
            # The page rendered by the server says the same, item for item (and
            # under its wait step, how the question stands).
            browser.refresh()
            assert timeline(browser, "approval") == live
            [wait] = timeline(browser, "wait")
            assert wait.startswith("1\nwaits for a person's answer\nquestion: answered by cy at ")
            assert browser.execute_script("return window.pwned") is None
            assert csp_refusals(browser) == []
        finally:
            browser.get("about:blank")
            if worker is not None:
                worker.join(15)


def test_the_live_timeline_tells_an_edit_and_a_standing_approval_as_the_page_does(
    engine: Engine, queued: list[str], browser: webdriver.Chrome
) -> None:
    run, _question = waiting_question(engine, queued, refunds=2)
    first, second = [a for a in engine.approvals(run.id) if a.kind is RequestKind.APPROVAL]
    with served(engine) as (root, _posts):
        try:
            browser.get(f"{root}/login?user=alice")
            browser.get(f"{root}{BASE}/runs/{run.id}")
            shown = len(timeline(browser, "approval"))
            engine.decide(
                first.approval_id,
                True,
                "one is enough",
                trusted=True,
                by="ada",
                arguments={"amount": 99, "note": HOSTILE_SCRIPT},
                for_run=True,
            )
            _poll(lambda: len(timeline(browser, "approval")) >= shown + 2, 10, "both decisions")
            live = timeline(browser, "approval")
            edited, standing = live[shown:]
            assert edited.startswith(
                "1\napproval approved\nrefund\n"
                "by ada with edited arguments, approved for the rest of the run"
                " · reason: one is enough\nthe model asked for\n"
            )
            model_said, ada_said = edited.split("\nada approved\n")
            assert json.loads(model_said.split("the model asked for\n")[1]) == first.input
            assert json.loads(ada_said) == {"amount": 99, "note": HOSTILE_SCRIPT}
            assert standing == "1\napproval approved\nrefund\nby a standing approval from ada"
            decided = {a.approval_id: a for a in engine.approvals(run.id)}
            assert decided[second.approval_id].standing_from == first.approval_id

            browser.refresh()
            assert timeline(browser, "approval") == live
            assert browser.execute_script("return window.pwned") is None
            assert csp_refusals(browser) == []
        finally:
            browser.get("about:blank")
