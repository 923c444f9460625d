"""Roles through the Django adapter (runner/console/django/views.py): the
abilities come from the app's permissions ``view_payloads`` and
``decide_runs`` (app label ``runwright_console``), beside each route's own."""

from __future__ import annotations

import pytest

from runner import Engine, RunStatus
from runner.console.abilities import EVERY_ABILITY, Ability
from runner.console.masking import MASK
from runner.core.audit import AuditAction
from tests.console.conftest import approval_agent, execute_all
from tests.console.django_support import (
    BASE,
    STAFF_PERMISSIONS,
    client_of,
    cookie_token,
    make_user,
    page,
    send,
    text,
)
from tests.helpers import snapshot

INBOX = f"{BASE}/approvals"
# Every per-route permission, and neither of the two abilities'.
ROUTES_ONLY = tuple(p for p in STAFF_PERMISSIONS if p not in ("view_payloads", "decide_runs"))


@pytest.fixture
def console(django_console: Engine) -> Engine:
    return django_console


def test_the_permissions_map_to_abilities(console: Engine) -> None:
    from runner.console.django.views import abilities_of  # once Django is set up

    assert abilities_of(make_user(permissions=ROUTES_ONLY)) == {Ability.SEE_RUNS}
    reader = make_user(permissions=("view_run", "view_payloads"))
    assert abilities_of(reader) == {Ability.SEE_RUNS, Ability.SEE_PAYLOADS}
    assert abilities_of(make_user(permissions=())) == frozenset()
    assert abilities_of(make_user(superuser=True, permissions=())) == EVERY_ABILITY


def test_without_view_payloads_and_decide_runs_staff_see_masked_and_may_not_decide(
    console: Engine, queued: list[str]
) -> None:
    agent = approval_agent()
    run = console.start(agent.name, {"customer": "Ada Lovelace"})
    execute_all(console, queued)
    [approval] = console.approvals(run.id)
    client = client_of(make_user(permissions=ROUTES_ONLY))
    shown = page(client, f"{BASE}/runs/{run.id}")
    assert "waiting" in shown and MASK in shown and "Ada Lovelace" not in shown
    inbox = page(client, INBOX)
    assert MASK in inbox and "Ada Lovelace" not in inbox and 'class="approve"' not in inbox
    from django.test import override_settings

    with override_settings(RUNWRIGHT_CONSOLE_LIVE_TIMEOUT=0.5):  # the waiting run's stream ends
        stream = text(client.get(f"{BASE}/runs/{run.id}/events?after=0"))
    assert MASK in stream and "arrived broken" not in stream
    before = snapshot(console.store)
    form = {"decision": "approve", "csrf_token": cookie_token(client)}
    refused = send(client, f"{INBOX}/{approval.approval_id}", form)
    assert refused.status_code == 403 and "may not decide" in text(refused)
    refused = send(client, f"{BASE}/runs/{run.id}/cancel", form)
    assert refused.status_code == 403
    assert snapshot(console.store) == before
    assert not [e for e in console.audit_log() if e.action == AuditAction.VIEWED_PAYLOADS]

    # With both, the same user's kind sees and decides.
    full = client_of(make_user())
    assert "Ada Lovelace" in page(full, f"{BASE}/runs/{run.id}")
    form = {"decision": "approve", "csrf_token": cookie_token(full)}
    assert send(full, f"{INBOX}/{approval.approval_id}", form).status_code == 303
    execute_all(console, queued)
    assert console.get_run(run.id).status is RunStatus.COMPLETED
