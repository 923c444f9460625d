"""A run's page and the runs list say what is known: an approval that expired
reads as expired, not as a reviewer's denial (issue 26, item 6); a cost the
model's price list could not give reads as unknown, not as $0 (item 14)."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient

from runner import Agent, Engine, RunStatus, tool
from runner.console.assets import SCRIPT
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import utcnow
from tests.console.conftest import BASE, as_user, execute_all, page_text, post, unique, waiting_run
from tests.unpriced import leave_unpriced

USAGE = (1000, 500)
PRICE = (0.000_01, 0.000_02)  # USD per input and output token: 0.02 USD a step
STEP_USD = 0.02


@pytest.fixture
def unpriced(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    return leave_unpriced(monkeypatch, set())


@tool
def weigh(parcel: str) -> str:
    """Weigh a parcel."""
    return f"{parcel}: 2 kg"


def test_an_expired_approval_reads_as_expired_on_the_run_page(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    assert engine.tick(now=utcnow() + timedelta(days=2)).expired == 1
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED

    page = page_text(client, f"{BASE}/runs/{run.id}")
    when = f"{approval.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    assert f"<b>expired</b> at {when} with no decision" in page  # the wait step
    assert "<b>approval expired</b>" in page  # the decision in the event order
    assert f"not approved: the approval expired at {when} with no decision" in page  # the tool
    assert "approval denied" not in page and "<b>denied</b>" not in page
    assert "denied by a human reviewer" not in page


def approval_events(client: FlaskClient, run_id: str) -> list[dict[str, Any]]:
    """The approval events of the run's live stream, as the page's script gets them."""
    answer = client.get(f"{BASE}/runs/{run_id}/events", headers=as_user("alice"))
    assert answer.status_code == 200
    frames = answer.get_data(as_text=True)
    events = [json.loads(line[6:]) for line in frames.splitlines() if line.startswith("data: ")]
    return [ev for ev in events if ev.get("type") == "approval"]  # not the end frame


def test_the_live_stream_marks_an_expiry_as_the_page_reads_it(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    engine.tick(now=utcnow() + timedelta(days=2))
    execute_all(engine, queued)
    decided = [
        ev["data"] for ev in approval_events(client, run.id) if ev["data"]["action"] == "decided"
    ]
    assert len(decided) == 1 and decided[0]["expired"] is True, decided
    assert decided[0]["expired_at"] == f"{approval.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    # The script renders what the server marked (runner/console/assets.py),
    # "approval expired" or "question expired".
    assert "if (d.expired)" in SCRIPT and 'noun + " expired"' in SCRIPT


def test_a_reviewer_who_types_expired_reads_as_a_denial(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, _approval = waiting_run(engine, queued)
    answer = post(
        client,
        f"{BASE}/approvals/{_approval.approval_id}",
        {"decision": "deny", "reason": "expired"},
        csrf_from=f"{BASE}/runs/{run.id}",
        user="bob",
    )
    assert answer.status_code == 303
    execute_all(engine, queued)

    # The rendered page, without its script (which names both, for live events).
    page = re.sub(
        r"<script.*?</script>", "", page_text(client, f"{BASE}/runs/{run.id}"), flags=re.S
    )
    assert "<b>denied</b> by bob" in page and "reason: expired" in page
    assert "<b>approval denied</b>" in page
    assert "denied by a human reviewer" in page
    assert "approval expired" not in page and "with no decision" not in page
    decided = [
        ev["data"] for ev in approval_events(client, run.id) if ev["data"]["action"] == "decided"
    ]
    assert len(decided) == 1 and "expired" not in decided[0], decided


def test_a_cost_reads_as_known_only_when_every_model_step_was_priced(
    client: FlaskClient, engine: Engine, unpriced: set[str]
) -> None:
    runs = {}
    for kind in ("priced", "unpriced", "mixed", "free"):
        name = unique(f"cost-{kind}")
        if kind == "unpriced":
            unpriced.add(name)

        def script(request: Request, name: str = name, kind: str = kind) -> Any:
            if request.step == 1:
                return tools(call("weigh", {"parcel": "p1"}), usage=USAGE)
            if kind == "mixed":
                unpriced.add(name)  # the second call has no price
            return text("2 kg", usage=USAGE)

        price = None if kind == "free" else PRICE
        model = ScriptedModel(name, script, price=price)
        Agent(name=name, model=model.model, tools=[weigh])
        run = engine.start(name)
        done = engine.execute(run.id)
        assert done is not None and done.status is RunStatus.COMPLETED
        runs[kind] = done
    assert runs["priced"].cost_usd == pytest.approx(2 * STEP_USD)
    assert runs["mixed"].cost_usd == pytest.approx(STEP_USD)
    assert runs["unpriced"].cost_usd == 0.0 == runs["free"].cost_usd

    def cost_on_page(kind: str) -> str:
        page = page_text(client, f"{BASE}/runs/{runs[kind].id}")
        found = re.search(r"<dt>cost</dt><dd>([^<]*)</dd>", page)
        assert found is not None, page
        return html.unescape(found.group(1))

    assert cost_on_page("priced") == "$0.0400"
    assert cost_on_page("mixed") == "≥ $0.0200 (some steps unpriced)"
    assert cost_on_page("unpriced") == "—"
    assert cost_on_page("free") == "$0.0000"
    # The runs list reads the same, from the run's own mark (no steps read).
    listed = page_text(client, f"{BASE}/")
    for kind, shown in (
        ("priced", "$0.0400"),
        ("mixed", "≥ $0.0200 (some steps unpriced)"),
        ("unpriced", "—"),
        ("free", "$0.0000"),
    ):
        row = re.search(rf"{runs[kind].id}.*?</tr>", listed, re.S)
        assert row is not None and html.escape(shown, quote=False) in row.group(0), (kind, row)
    page = page_text(client, f"{BASE}/runs/{runs['unpriced'].id}")
    assert "cost unknown" in page  # each unpriced model step says so
    # A completed run says when it finished.
    finished = runs["priced"].finished_at
    assert finished is not None
    assert f'<dt>finished</dt><dd><time datetime="{finished.isoformat()}"' in page_text(
        client, f"{BASE}/runs/{runs['priced'].id}"
    )

    listing = page_text(client, f"{BASE}/?limit=50")
    rows = {
        run_id: html.unescape(cells[-2])
        for run_id, cells in (
            (m.group(1), re.findall(r"<td[^>]*>(.*?)</td>", m.group(0)))
            for m in re.finditer(r'<tr><td><a href="[^"]*/runs/([^"]+)">.*?</tr>', listing)
        )
    }
    assert rows[runs["priced"].id] == "$0.0400"
    assert rows[runs["unpriced"].id] == "—"
