"""A run's page: trigger, timeline, decisions, usage, cost; escaping; the
live stream; cancel and retry (issue 15)."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from typing import Any

import pytest
from flask.testing import FlaskClient

from runner import Engine, RunStatus
from store.models import Decision
from tests.console.conftest import (
    BASE,
    HOSTILE_SCRIPT,
    approval_agent,
    as_user,
    execute_all,
    hostile_agent,
    page_text,
    post,
    waiting_run,
)


def test_the_page_shows_trigger_timeline_decisions_usage_and_cost(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(
        engine, queued, {"order": "A-1001", "customer": "Ada Lovelace"}
    )
    answer = post(
        client,
        f"{BASE}/approvals/{approval.approval_id}",
        {"decision": "approve", "reason": "the photo shows it"},
        csrf_from=f"{BASE}/runs/{run.id}",
        user="bob",
    )
    assert answer.status_code == 303
    execute_all(engine, queued)
    done = engine.get_run(run.id)
    assert done.status is RunStatus.COMPLETED

    page = page_text(client, f"{BASE}/runs/{run.id}")
    assert "Ada Lovelace" in page  # the trigger payload
    assert "I will refund it" in page  # the model's text
    assert "calls refund" in page and "&quot;amount&quot;: 30" in page  # a call, its arguments
    assert "arrived broken" in page  # a tool's result
    # ... with its keys in the order the tool returned them (json columns).
    looked_up = {"order": "A-1001", "status": "arrived broken", "paid": 30}
    assert html.escape(json.dumps(looked_up, indent=2)) in page
    assert "waits for approval" in page
    assert "<b>approved</b> by bob" in page and "the photo shows it" in page
    assert "approval approved" in page  # the decision in the event order
    assert "execution 1" in page and "execution 2" in page  # one before the wait, one after
    assert f"{done.usage.input_tokens} in, {done.usage.output_tokens} out" in page
    assert "finished: " in page  # the output
    assert 'id="status" class="st st-completed"' in page
    assert " ms</span>" in page  # step timings


def test_hostile_model_and_tool_text_is_escaped(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run = engine.start(hostile_agent(), {"note": HOSTILE_SCRIPT})
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED

    page = page_text(client, f"{BASE}/runs/{run.id}")
    assert page.count("<script") == 1  # the console's own
    assert "<img" not in page
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=" in page
    # In the trigger, the tool's arguments and result, and the model's text.
    assert page.count("&lt;script&gt;") >= 4


def test_every_page_has_a_strict_csp_that_names_its_one_script(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run = engine.start(hostile_agent(), {})
    execute_all(engine, queued)
    answer = client.get(f"{BASE}/runs/{run.id}", headers=as_user())
    policy = answer.headers["Content-Security-Policy"]
    assert "unsafe-inline" not in policy and "default-src 'none'" in policy
    page = answer.get_data(as_text=True)
    [script] = re.findall(r"<script>(.*?)</script>", page, re.S)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy
    [style] = re.findall(r"<style>(.*?)</style>", page, re.S)
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in policy and page.count("<script") == 1
    # Whatever the script adds to the page goes in as text.
    assert "innerHTML" not in page and "outerHTML" not in page
    assert "insertAdjacentHTML" not in page and "document.write" not in page
    markup = page.replace(script, "")  # the hostile text is in it, escaped
    assert re.search(r"<[^>]*\son\w+\s*=", markup) is None  # no inline handlers
    assert "textContent" in script
    assert answer.headers["Referrer-Policy"] == "no-referrer"
    assert answer.headers["Cache-Control"] == "no-store"


def test_the_live_page_streams_the_events_after_those_it_shows(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent = approval_agent()
    run = engine.start(agent.name, {})
    execute_all(engine, queued)
    page = page_text(client, f"{BASE}/runs/{run.id}")
    found = re.search(r'data-events="([^"]+)" data-after="(\d+)"', page)
    assert found is not None
    events_url, after = found.group(1), int(found.group(2))
    assert events_url == f"{BASE}/runs/{run.id}/events"

    [approval] = engine.approvals(run.id)
    engine.decide(approval.approval_id, True, trusted=True, by="carol")
    execute_all(engine, queued)
    answer = client.get(f"{events_url}?after={after}", headers=as_user())
    assert answer.status_code == 200
    assert answer.mimetype == "text/event-stream"
    stream = answer.get_data(as_text=True)
    ids = [int(i) for i in re.findall(r"^id: (\d+)$", stream, re.M)]
    assert ids and min(ids) > after  # nothing the page showed comes again
    assert "event: approval" in stream and '"decision":"approved"' in stream
    assert '"status":"completed"' in stream
    assert stream.rstrip().endswith('data: {"reason":"settled"}')

    # A settled run's page has nothing to follow.
    assert "data-events" not in page_text(client, f"{BASE}/runs/{run.id}")
    bad = client.get(events_url, headers={**as_user(), "Last-Event-ID": "x1"})
    assert bad.status_code == 400


def test_a_run_that_settles_while_its_page_is_read_still_reaches_the_page(
    client: FlaskClient, engine: Engine, queued: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker finishes the run between the page's reads of the run and of its
    events (CI saw it: the page stayed at its old status). Whichever it reads
    first, the page ends at the run's last status: shown at once, or brought by
    its stream, which resumes after the last event the page shows."""
    _agent, run, approval = waiting_run(engine, queued)
    engine.decide(approval.approval_id, True, trusted=True, by="carol")
    read_once: list[str] = []

    def then_finish(read: Any) -> Any:
        def reading(*args: Any, **kwargs: Any) -> Any:
            got = read(*args, **kwargs)
            got = list(got) if read.__name__ == "events" else got  # read it now
            if not read_once:
                read_once.append(read.__name__)
                execute_all(engine, queued)  # the worker, right after the page's first read
            return got

        return reading

    monkeypatch.setattr(engine, "get_run", then_finish(engine.get_run))
    monkeypatch.setattr(engine, "events", then_finish(engine.events))
    page = page_text(client, f"{BASE}/runs/{run.id}")
    monkeypatch.undo()
    assert read_once and engine.get_run(run.id).status is RunStatus.COMPLETED

    shown = re.search(r'id="status" class="st st-(\w+)"', page)
    assert shown is not None
    statuses = [shown.group(1)]
    follow = re.search(r'data-events="([^"]+)" data-after="(\d+)"', page)
    if follow is not None:  # what the page's EventSource brings
        stream = client.get(f"{follow.group(1)}?after={follow.group(2)}", headers=as_user())
        statuses += re.findall(
            r'^data: .*"type":"status".*"status":"(\w+)"', stream.get_data(as_text=True), re.M
        )
    assert statuses[-1] == "completed", (read_once, statuses)


def test_cancel_then_retry_from_the_buttons(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent = approval_agent()
    run = engine.start(agent.name, {})
    execute_all(engine, queued)
    page_path = f"{BASE}/runs/{run.id}"
    page = page_text(client, page_path)
    assert '<form id="retry" class="once" method="post"' in page
    assert re.search(r'<form id="retry"[^>]* hidden>', page)  # a waiting run: no retry
    assert not re.search(r'<form id="cancel"[^>]* hidden>', page)

    answer = post(client, f"{page_path}/cancel", {}, csrf_from=page_path)
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"{page_path}?note=cancel"
    cancelled = engine.get_run(run.id)
    assert cancelled.status is RunStatus.CANCELLED
    assert cancelled.cancelled_by == "alice"  # the console's signed-in user
    assert [a.decision for a in engine.approvals(run.id)] == [Decision.WITHDRAWN]
    again = post(client, f"{page_path}/cancel", {}, csrf_from=page_path)
    assert again.status_code == 409 and "already cancelled" in again.get_data(as_text=True)
    assert engine.get_run(run.id) == cancelled  # nothing changed

    page = page_text(client, f"{page_path}?note=cancel")
    assert "The run is cancelled." in page
    assert "<dt>cancelled by</dt><dd>alice</dd>" in page
    assert not re.search(r'<form id="retry"[^>]* hidden>', page)
    answer = post(client, f"{page_path}/retry", {}, csrf_from=page_path)
    assert answer.status_code == 303
    assert engine.get_run(run.id).status is RunStatus.QUEUED
    assert queued == [run.id]
    again = post(client, f"{page_path}/retry", {}, csrf_from=page_path)
    assert again.status_code == 409 and "only a failed or cancelled run" in again.get_data(
        as_text=True
    )


def test_a_completed_run_is_not_retried_and_an_unknown_one_is_404(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run = engine.start(hostile_agent(), {})
    execute_all(engine, queued)
    path = f"{BASE}/runs/{run.id}"
    assert post(client, f"{path}/retry", {}, csrf_from=path).status_code == 409
    assert post(client, f"{path}/cancel", {}, csrf_from=path).status_code == 409
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    page_text(client, f"{BASE}/runs/0190a0a0-0000-7000-8000-000000000000", status=404)
    missing = page_text(client, f"{BASE}/runs/%3Cscript%3E", status=404)
    assert missing.count("<script") == 1  # only the console's own
