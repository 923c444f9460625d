"""The console's reads of payloads and its actions in the audit log
(docs/security.md, "The audit log"): the run page, the inbox, an approval
link's page and the event stream append ``viewed_payloads`` once per person
and run per window; a decision and a cancel name the person and the
client's address."""

from __future__ import annotations

from flask.testing import FlaskClient

from runner import Engine
from runner.core.audit import AuditAction, ViewWindow
from store.pg.audit import AuditEntry
from tests.console.conftest import BASE, as_user, page_text, plain_agent, post, waiting_run

SOURCE = "console 127.0.0.1"  # the Flask test client's address


def views(engine: Engine) -> list[tuple[str, str | None, str | None]]:
    return [
        (e.actor, e.run_id, e.source)
        for e in engine.audit_log()
        if e.action == AuditAction.VIEWED_PAYLOADS
    ]


def acted(engine: Engine) -> list[AuditEntry]:
    return [e for e in engine.audit_log() if e.action != AuditAction.VIEWED_PAYLOADS]


def test_the_run_page_and_its_stream_are_one_view_per_person_and_run_per_window(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run = engine.start(plain_agent(), {})
    other = engine.start(plain_agent(), {})
    for _ in range(3):
        page_text(client, f"{BASE}/runs/{run.id}")
    for user in ("alice", "dan"):  # the page's stream; dan's alone
        stream = client.get(f"{BASE}/runs/{run.id}/events?after=0", headers=as_user(user))
        assert stream.status_code == 200
        stream.close()
    page_text(client, f"{BASE}/runs/{run.id}", user="bob")
    page_text(client, f"{BASE}/runs/{other.id}")
    assert views(engine) == [
        ("alice", run.id, SOURCE),
        ("dan", run.id, SOURCE),
        ("bob", run.id, SOURCE),
        ("alice", other.id, SOURCE),
    ]
    # A page that is refused (no such run) is no view.
    page_text(client, f"{BASE}/runs/00000000-0000-4000-8000-000000000000", status=404)
    assert len(views(engine)) == 4


def test_the_inbox_and_a_link_page_are_views_and_a_decision_names_the_address(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _, run, approval = waiting_run(engine, queued)
    page_text(client, f"{BASE}/approvals", user="carol")
    token = engine.token(approval.approval_id)
    page_text(client, f"{BASE}/approvals/{approval.approval_id}?token={token}", user=None)
    assert views(engine) == [("carol", run.id, SOURCE), ("link", run.id, SOURCE)]
    answer = post(
        client,
        f"{BASE}/approvals/{approval.approval_id}",
        {"decision": "approve", "next": "inbox"},
        csrf_from="/console/approvals",
        user="carol",
    )
    assert answer.status_code == 303
    (decided,) = acted(engine)
    assert (decided.actor, decided.action, decided.run_id, decided.source) == (
        "carol",
        AuditAction.DECIDED,
        run.id,
        SOURCE,
    )


def test_a_cancel_in_the_console_names_the_person_and_the_address(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run = engine.start(plain_agent(), {})
    answer = post(client, f"{BASE}/runs/{run.id}/cancel", {}, csrf_from=f"/console/runs/{run.id}")
    assert answer.status_code == 303
    (cancelled,) = acted(engine)
    assert (cancelled.actor, cancelled.action, cancelled.source) == (
        "alice",
        AuditAction.CANCELLED,
        SOURCE,
    )


def test_a_view_window_lets_one_view_through_per_window() -> None:
    now = [100.0]
    window = ViewWindow(seconds=600, clock=lambda: now[0])
    assert window.claim("ana", "r1") and not window.claim("ana", "r1")
    assert window.claim("bo", "r1") and window.claim("ana", "r2")
    now[0] += 599
    assert not window.claim("ana", "r1")
    now[0] += 1
    assert window.claim("ana", "r1")
    window.release("ana", "r1")  # not recorded: the next view tries again
    assert window.claim("ana", "r1")
