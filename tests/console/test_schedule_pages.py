"""The console's schedules pages (issue 30): each schedule's next firing or
that it is paused, and its last firings with their runs and why a firing has
none; text from a schedule is shown as text."""

from __future__ import annotations

from datetime import timedelta

from flask.testing import FlaskClient

from runner import Engine
from tests.console.conftest import (
    BASE,
    HOSTILE_SCRIPT,
    execute_all,
    page_text,
    plain_agent,
)


def test_the_list_and_a_schedules_page_show_its_firings_and_their_runs(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent = plain_agent()
    made = engine.schedules.create(
        "pulse", agent, every=60, payload={"note": HOSTILE_SCRIPT}, keys={"team": "ops"}
    )
    engine.schedules.create("nightly", agent, cron="30 2 * * *", timezone="Europe/Berlin")
    engine.schedules.pause("nightly")
    engine.tick(now=made.next_at)
    engine.tick(now=made.next_at + timedelta(seconds=60))  # the first run has not settled
    [skipped, started] = engine.schedules.firings("pulse")
    execute_all(engine, queued)

    listing = page_text(client, f"{BASE}/schedules")
    assert f'<a href="{BASE}/schedules/pulse">pulse</a>' in listing
    assert "every 60 s" in listing and "<code>30 2 * * *</code> in Europe/Berlin" in listing
    assert '<span class="st st-interrupted">paused</span>' in listing  # nightly
    assert f'<a href="{BASE}/schedules">Schedules</a>' in listing  # in the navigation
    assert "skipped" in listing  # pulse's last firing

    page = page_text(client, f"{BASE}/schedules/pulse")
    assert f'<a href="{BASE}/runs/{started.run_id}">{started.run_id}</a>' in page
    assert '<span class="st st-completed">completed</span>' in page  # its run's status
    assert f"the schedule&#x27;s run {started.run_id} has not ended" in page
    assert "<h2>Next firings</h2>" in page and page.count("<li><time") == 5
    assert HOSTILE_SCRIPT not in page and "&lt;script&gt;" in page
    assert "team=ops" in page
    assert skipped.run_id is None


def test_an_unknown_schedule_is_a_clear_answer_and_nobody_signed_in_sees_none(
    client: FlaskClient, engine: Engine
) -> None:
    page = page_text(client, f"{BASE}/schedules/absent", status=404)
    assert "no schedule named &#x27;absent&#x27;" in page
    page_text(client, f"{BASE}/schedules", user=None, status=403)
    assert "No schedules" in page_text(client, f"{BASE}/schedules")
