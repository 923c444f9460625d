"""The runs list: filters, counts per status, cost, paging (issue 15)."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

from flask.testing import FlaskClient

from runner import Agent, Engine
from runner.testing import ScriptedModel, text
from store.postgres import PostgresStore
from tests.console.conftest import BASE, execute_all, page_text, plain_agent, unique
from tests.helpers import parked_run

ROW = re.compile(r'<tr><td><a href="/console/runs/([^"]+)">')
NEXT = re.compile(r'<a rel="next" href="([^"]+)">')


def listed(page: str) -> list[str]:
    return ROW.findall(page)


def test_the_list_filters_by_status_agent_and_thread(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    first, second = plain_agent(), plain_agent()
    done = engine.start(first, {"n": 1})
    execute_all(engine, queued)
    waiting_in_queue = engine.start(first, {"n": 2})
    threaded = engine.start(second, {"n": 3}, thread="ticket-7")

    assert listed(page_text(client, f"{BASE}/")) == [threaded.id, waiting_in_queue.id, done.id]
    assert listed(page_text(client, f"{BASE}/?status=completed")) == [done.id]
    assert listed(page_text(client, f"{BASE}/?status=queued&agent={first}")) == [
        waiting_in_queue.id
    ]
    assert listed(page_text(client, f"{BASE}/?thread=ticket-7")) == [threaded.id]
    # A run's page links to the runs of its thread.
    assert f'href="{BASE}/?thread=ticket-7"' in page_text(client, f"{BASE}/runs/{threaded.id}")
    assert listed(page_text(client, f"{BASE}/?agent=nobody")) == []


def test_paging_walks_every_run_once_newest_first(client: FlaskClient, engine: Engine) -> None:
    agent = plain_agent()
    started = [engine.start(agent, {"n": i}).id for i in range(5)]
    seen: list[str] = []
    path: str | None = f"{BASE}/?agent={agent}&limit=2"
    pages = 0
    while path is not None:
        page = page_text(client, path)
        seen += listed(page)
        found = NEXT.search(page)
        path = html.unescape(found.group(1)) if found else None
        pages += 1
    assert seen == started[::-1]
    assert pages == 3


def test_counts_per_status_and_the_cost_of_each_run(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    name = unique("priced")
    model = ScriptedModel(name, lambda request: text("hello"), price=(0.001, 0.002))
    Agent(name=name, model=model.model, tools=[])
    run = engine.start(name, {})
    execute_all(engine, queued)
    engine.start(name, {})
    engine.start(name, {})
    cost = engine.get_run(run.id).cost_usd
    assert cost > 0

    page = page_text(client, f"{BASE}/?agent={name}")
    assert f"${cost:.4f}" in page
    counts = re.search(r'<p class="counts">(.*?)</p>', page)
    assert counts is not None
    assert "queued 2</a>" in counts.group(1)
    assert "completed 1</a>" in counts.group(1)
    assert "all 3" in counts.group(1)


def test_the_time_window_filters_on_creation(client: FlaskClient, engine: Engine) -> None:
    agent = plain_agent()
    run = engine.start(agent, {})
    hour = timedelta(hours=1)
    later = (datetime.now(UTC) + hour).strftime("%Y-%m-%dT%H:%M")
    earlier = (datetime.now(UTC) - hour).strftime("%Y-%m-%dT%H:%M")
    assert listed(page_text(client, f"{BASE}/?since={later}")) == []
    assert listed(page_text(client, f"{BASE}/?since={earlier}&until={later}")) == [run.id]
    assert listed(page_text(client, f"{BASE}/?until={earlier}")) == []


def test_bad_filters_are_one_clear_400(client: FlaskClient, engine: Engine) -> None:
    for query, words in [
        ("status=finished", "unknown status"),
        ("limit=0", "limit must be"),
        ("limit=%EF%BC%91", "limit must be"),  # a full-width digit one
        ("since=yesterday", "since must be a time"),
        ("agent=" + "a" * 300, "longer than"),
    ]:
        page = page_text(client, f"{BASE}/?{query}", status=400)
        assert words in page, query


def test_a_parked_run_shows_its_key_and_when_it_may_go_in_the_list_and_on_its_page(
    client: FlaskClient, engine: Engine, pg_store: PostgresStore
) -> None:
    agent = plain_agent()
    parked = parked_run(pg_store, "openai/gpt-<busy>", agent=agent, tenant="acme")
    plain = engine.start(agent, {"n": 2})  # queued for a worker, not parked
    assert parked.parked_until is not None
    until = parked.parked_until.astimezone(UTC)

    page = page_text(client, f"{BASE}/?agent={agent}")
    assert listed(page) == [plain.id, parked.id]
    rows = dict(zip(listed(page), page.split("<tr><td>")[1:], strict=True))
    badge = (
        f'<span class="st st-parked" title="waiting: rate_limit on openai/gpt-&lt;busy&gt;, '
        f'may go at {until:%Y-%m-%d %H:%M:%S} UTC">parked on openai/gpt-&lt;busy&gt; '
        f"until {until:%H:%M:%S} UTC</span>"
    )
    assert badge in rows[parked.id]
    assert "st-parked" not in rows[plain.id]

    shown = page_text(client, f"{BASE}/runs/{parked.id}")
    why = re.search(r'<p class="note" id="why">(.*?)</p>', shown)
    assert why is not None, shown
    assert html.unescape(why.group(1)).startswith(
        f"Waiting: rate_limit on 'openai/gpt-<busy>', may go at {until:%Y-%m-%d %H:%M:%S} UTC"
    )
