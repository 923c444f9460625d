"""The console mounted in a Django project (the example's, with the admin):
Django's sign-in, staff and permissions decide who sees and does what,
Django's CSRF token guards every form, and approval links stay open to
their token; the Django admin reads Runwright's tables in Postgres."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlencode

import pytest

from runner import ConfigurationError, Engine, RunStatus, set_default_engine
from store.models import Decision
from tests.console.conftest import (
    HOSTILE_IMG,
    HOSTILE_SCRIPT,
    Resolution,
    approval_agent,
    csrf_of,
    execute_all,
    hostile_agent,
    waiting_question,
)
from tests.console.django_support import (
    BASE,
    LOGIN,
    client_of,
    cookie_token,
    delete_users,
    location,
    make_user,
    page,
    post,
    runwright_database,
    send,
    text,
)
from tests.helpers import snapshot

INBOX = f"{BASE}/approvals"


@pytest.fixture
def console(django_console: Engine) -> Engine:
    return django_console


@pytest.fixture
def staff(console: Engine) -> Any:
    """A client signed in as staff with every permission of the console."""
    user = make_user()
    client = client_of(user)
    client.username = user.get_username()
    return client


def waiting_run(engine: Engine, queued: list[str], **options: Any) -> tuple[str, Any]:
    """A run of an approval agent, waiting for its approval; the run id and the agent."""
    agent = approval_agent(**options)
    run = engine.start(agent.name, {"customer": "Ada Lovelace"})
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.WAITING
    return run.id, agent


# ------------------------------------------------------------ staff


def test_staff_see_runs_a_run_and_the_inbox(staff: Any, console: Engine, queued: list[str]) -> None:
    run_id, agent = waiting_run(console, queued)
    [approval] = console.approvals(run_id)

    runs = page(staff, f"{BASE}/")
    assert run_id in runs and f'href="{BASE}/runs/{run_id}"' in runs
    assert f'<span class="user">{staff.username}</span>' in runs
    run = page(staff, f"{BASE}/runs/{run_id}")
    assert agent.name in run and "Ada Lovelace" in run and "arrived broken" in run
    inbox = page(staff, INBOX)
    assert f"{agent.name} asks to call refund" in inbox and "I will refund it" in inbox
    assert f'action="{BASE}/approvals/{approval.approval_id}"' in inbox
    # The form carries Django's token, and the response set Django's cookie.
    assert len(csrf_of(inbox)) == 64 and "csrftoken" in staff.cookies
    # A signed-in user sent to an approval's address finds it in the inbox.
    answer = staff.get(f"{INBOX}/{approval.approval_id}")
    assert answer.status_code == 303
    assert location(answer) == f"{INBOX}#a-{approval.approval_id}"


def test_approving_with_a_reason_records_the_username(
    staff: Any, console: Engine, queued: list[str]
) -> None:
    run_id, agent = waiting_run(console, queued)
    [approval] = console.approvals(run_id)
    answer = post(
        staff,
        f"{INBOX}/{approval.approval_id}",
        {"decision": "approve", "reason": "customer sent a photo", "next": "inbox"},
        csrf_from=INBOX,
    )
    assert answer.status_code == 303 and location(answer) == f"{INBOX}?note=approved"
    [decided] = console.approvals(run_id)
    assert (decided.decision, decided.decided_by, decided.reason) == (
        Decision.APPROVED,
        staff.username,
        "customer sent a photo",
    )
    assert queued == [run_id]
    execute_all(console, queued)
    assert console.get_run(run_id).status is RunStatus.COMPLETED and agent.refunds.done == [30]
    shown = page(staff, f"{BASE}/runs/{run_id}")
    assert f"by {staff.username}" in shown and "customer sent a photo" in shown
    # Deciding again answers 409 and changes nothing.
    again = post(
        staff,
        f"{INBOX}/{approval.approval_id}",
        {"decision": "deny"},
        csrf_from=f"{BASE}/runs/{run_id}",
    )
    assert again.status_code == 409
    assert console.approvals(run_id)[0].decision is Decision.APPROVED


def test_deciding_a_whole_step(staff: Any, console: Engine, queued: list[str]) -> None:
    run_id, _ = waiting_run(console, queued, calls=2)
    [first, second] = console.approvals(run_id)
    assert first.step_index == second.step_index
    answer = post(
        staff,
        f"{BASE}/runs/{run_id}/steps/{first.step_index}/decide",
        {"decision": "deny", "reason": "not this customer"},
        csrf_from=INBOX,
    )
    assert answer.status_code == 303 and location(answer) == f"{INBOX}?note=denied"
    decided = console.approvals(run_id)
    assert {(a.decision, a.decided_by, a.reason) for a in decided} == {
        (Decision.DENIED, staff.username, "not this customer")
    }


def test_an_edit_and_an_answer_go_through_django(
    staff: Any, console: Engine, queued: list[str]
) -> None:
    run_id, agent = waiting_run(console, queued)
    [approval] = console.approvals(run_id)
    edit = {
        "decision": "approve",
        "arguments": '{"amount": 12, "note": "from Django"}',
        "for_run": "1",
        "next": "inbox",
        "run": run_id,
    }
    before = snapshot(console.store)
    broken = post(
        staff,
        f"{INBOX}/{approval.approval_id}",
        {**edit, "arguments": '{"amount": "twelve"}'},
        csrf_from=INBOX,
    )
    assert broken.status_code == 400
    assert "at amount, &#x27;twelve&#x27; is not of type &#x27;integer&#x27;" in text(broken)
    assert snapshot(console.store) == before
    answer = post(staff, f"{INBOX}/{approval.approval_id}", edit, csrf_from=INBOX)
    assert answer.status_code == 303 and location(answer) == f"{INBOX}?note=for_run"
    [decided] = console.approvals(run_id)
    assert (decided.arguments, decided.for_run, decided.decided_by) == (
        {"amount": 12, "note": "from Django"},
        True,
        staff.username,
    )
    execute_all(console, queued)
    assert agent.refunds.done == [12]

    run, question = waiting_question(console, queued, ask_human=Resolution)
    fields = {"answer.action": "refund", "answer.amount": "7", "answer.urgent": "1"}
    answer = post(
        staff,
        f"{INBOX}/{question.approval_id}",
        {"decision": "answer", "run": run.id, **fields},
        csrf_from=INBOX,
    )
    assert answer.status_code == 303 and location(answer) == f"{BASE}/runs/{run.id}?note=answered"
    [answered] = console.approvals(run.id)
    assert (answered.answer, answered.decided_by) == (
        {"action": "refund", "amount": 7, "urgent": True},
        staff.username,
    )
    # A question's link answers it too, without a Django user.
    linked, asked = waiting_question(console, queued)
    holder = client_of()
    token = console.token(asked.approval_id)
    shown = page(holder, f"{INBOX}/{asked.approval_id}?token={token}")
    form = {"decision": "answer", "answer": "blue", "token": token, "csrf_token": csrf_of(shown)}
    done = send(holder, f"{INBOX}/{asked.approval_id}", form)
    assert done.status_code == 200 and "Answered. Thank you." in text(done)
    assert (console.approvals(linked.id)[0].answer, console.approvals(linked.id)[0].decided_by) == (
        "blue",
        "link",
    )


def test_cancel_then_retry(staff: Any, console: Engine, queued: list[str]) -> None:
    run_id, _ = waiting_run(console, queued)
    run_page = f"{BASE}/runs/{run_id}"
    cancelled = post(staff, f"{run_page}/cancel", {}, csrf_from=run_page)
    assert cancelled.status_code == 303 and location(cancelled) == f"{run_page}?note=cancel"
    assert console.get_run(run_id).status is RunStatus.CANCELLED
    retried = post(staff, f"{run_page}/retry", {}, csrf_from=run_page)
    assert retried.status_code == 303 and location(retried) == f"{run_page}?note=retried"
    assert console.get_run(run_id).status is RunStatus.QUEUED
    assert "queued again from its checkpoint" in page(staff, location(retried))


def test_the_run_stream_holds_no_transaction(
    staff: Any, console: Engine, queued: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example project has ATOMIC_REQUESTS; the console's views opt out,
    the stream above all (it may wait for a run for minutes)."""
    from django.conf import settings
    from django.db import connection

    import runner

    assert settings.DATABASES["default"]["ATOMIC_REQUESTS"] is True
    seen: list[bool] = []

    def engine() -> Engine:  # what RUNWRIGHT_CONSOLE_ENGINE names, watched
        seen.append(connection.in_atomic_block)
        return console

    monkeypatch.setattr(runner, "default_engine", engine)
    run_id, _ = waiting_run(console, queued)
    post(
        staff,
        f"{INBOX}/{console.approvals(run_id)[0].approval_id}",
        {"decision": "approve"},
        csrf_from=INBOX,
    )
    execute_all(console, queued)
    answer = staff.get(f"{BASE}/runs/{run_id}/events")
    assert answer.status_code == 200 and answer["Content-Type"] == "text/event-stream"
    assert answer["Cache-Control"] == "no-cache"
    frames = text(answer)
    assert seen and not any(seen)
    assert "event: approval" in frames and '"decided_by":"' + staff.username + '"' in frames
    assert frames.rstrip().endswith('data: {"reason":"settled"}')


# ------------------------------------------------------------ refused


def everything(run_id: str, approval: Any) -> tuple[list[str], list[tuple[str, dict[str, str]]]]:
    """Every console page, and every form, for one waiting run."""
    pages = [
        f"{BASE}/",
        INBOX,
        f"{BASE}/runs/{run_id}",
        f"{BASE}/runs/{run_id}/events",
        f"{INBOX}/{approval.approval_id}",
    ]
    forms = [
        (f"{BASE}/runs/{run_id}/cancel", {}),
        (f"{BASE}/runs/{run_id}/retry", {}),
        (f"{INBOX}/{approval.approval_id}", {"decision": "approve"}),
        (f"{BASE}/runs/{run_id}/steps/{approval.step_index}/decide", {"decision": "approve"}),
    ]
    return pages, forms


def test_a_post_without_the_csrf_token_changes_nothing(
    staff: Any, console: Engine, queued: list[str]
) -> None:
    run_id, _ = waiting_run(console, queued)
    [approval] = console.approvals(run_id)
    before = snapshot(console.store)
    _, forms = everything(run_id, approval)
    for path, form in forms:
        good = csrf_of(page(staff, INBOX))
        altered = good[:-1] + ("B" if good.endswith("A") else "A")
        for token in (None, "x" * 64, altered):
            sent = form if token is None else {**form, "csrf_token": token}
            answer = send(staff, path, sent)
            assert answer.status_code == 403, (path, token)
            assert "did not carry this session&#x27;s CSRF token" in text(answer)
    assert snapshot(console.store) == before
    # The control: the same form with the page's token is taken.
    answer = post(staff, forms[0][0], {}, csrf_from=INBOX)
    assert answer.status_code == 303
    assert console.get_run(run_id).status is RunStatus.CANCELLED


def test_the_console_checks_csrf_in_a_project_without_the_middleware(
    console: Engine, queued: list[str]
) -> None:
    from django.conf import settings
    from django.test import override_settings

    without = [m for m in settings.MIDDLEWARE if "Csrf" not in m]
    assert len(without) == len(settings.MIDDLEWARE) - 1
    run_id, _ = waiting_run(console, queued)
    with override_settings(MIDDLEWARE=without):
        staff = client_of(make_user())
        before = snapshot(console.store)
        assert send(staff, f"{BASE}/runs/{run_id}/cancel", {}).status_code == 403
        assert snapshot(console.store) == before
        # The console set the cookie its token needs, with no middleware to do it.
        answer = post(staff, f"{BASE}/runs/{run_id}/cancel", {}, csrf_from=INBOX)
        assert answer.status_code == 303
    assert console.get_run(run_id).status is RunStatus.CANCELLED


def test_a_foreign_origin_is_refused(staff: Any, console: Engine, queued: list[str]) -> None:
    """Django's own checks, trusted origins included: a valid token sent from
    another site's page does not pass."""
    run_id, _ = waiting_run(console, queued)
    path = f"{BASE}/runs/{run_id}/cancel"
    token = csrf_of(page(staff, INBOX))
    answer = send(staff, path, {"csrf_token": token}, headers={"Origin": "https://evil.example"})
    assert answer.status_code == 403
    assert console.get_run(run_id).status is RunStatus.WAITING


def test_anonymous_users_are_sent_to_sign_in(console: Engine, queued: list[str]) -> None:
    run_id, _ = waiting_run(console, queued)
    [approval] = console.approvals(run_id)
    nobody = client_of()
    pages, forms = everything(run_id, approval)
    for path in [*pages, f"{BASE}/?status=waiting"]:
        answer = nobody.get(path)
        assert answer.status_code == 302, path
        found = LOGIN.match(location(answer))
        assert found is not None and unquote(found.group(1)) == path
    before = snapshot(console.store)
    token = cookie_token(nobody)
    for path, form in forms:
        answer = send(nobody, path, {**form, "csrf_token": token})
        assert answer.status_code == 403 and "Sign in" in text(answer), path
    assert snapshot(console.store) == before


def test_signed_in_users_who_are_not_staff_get_403_everywhere(
    console: Engine, queued: list[str]
) -> None:
    run_id, _ = waiting_run(console, queued)
    [approval] = console.approvals(run_id)
    pages, forms = everything(run_id, approval)
    before = snapshot(console.store)
    # Not staff: with the console's permissions, or even a superuser.
    for user in (make_user(staff=False), make_user(staff=False, superuser=True)):
        client = client_of(user)
        for path in pages:
            answer = client.get(path)
            body = text(answer)
            assert answer.status_code == 403, path
            assert "The console is for staff" in body and run_id not in body
        token = cookie_token(client)
        for path, form in forms:
            answer = send(client, path, {**form, "csrf_token": token})
            assert answer.status_code == 403, path
    assert snapshot(console.store) == before


def test_each_action_wants_its_permission(console: Engine, queued: list[str]) -> None:
    run_id, _ = waiting_run(console, queued)
    [approval] = console.approvals(run_id)
    before = snapshot(console.store)
    # decide_runs shows the forms; each action's own permission still refuses them.
    viewer = client_of(make_user(permissions=("view_run", "view_approval", "decide_runs")))
    assert run_id in page(viewer, f"{BASE}/runs/{run_id}")
    assert approval.approval_id in page(viewer, INBOX)
    _, forms = everything(run_id, approval)
    for path, form in forms:
        answer = post(viewer, path, form, csrf_from=INBOX)
        body = text(answer)
        assert answer.status_code == 403 and "that takes the" in body, path
    refusals = {
        ("decide_approval",): [f"{BASE}/", INBOX],
        ("view_approval",): [f"{BASE}/", f"{BASE}/runs/{run_id}", f"{BASE}/runs/{run_id}/events"],
        ("view_run",): [INBOX],
    }
    for permissions, paths in refusals.items():
        client = client_of(make_user(permissions=permissions))
        for path in paths:
            assert "permission" in page(client, path, status=403), (permissions, path)
    assert snapshot(console.store) == before
    # A superuser (staff) has every permission without being granted one.
    root = client_of(make_user(superuser=True, permissions=()))
    answer = post(root, f"{INBOX}/{approval.approval_id}", {"decision": "approve"}, csrf_from=INBOX)
    assert answer.status_code == 303
    assert console.approvals(run_id)[0].decision is Decision.APPROVED


def test_a_token_link_opens_its_approval_and_nothing_else(
    console: Engine, queued: list[str]
) -> None:
    mine, _ = waiting_run(console, queued, note="for the broken mug")
    theirs, _ = waiting_run(console, queued)
    [approval] = console.approvals(mine)
    [other] = console.approvals(theirs)
    token = console.token(approval.approval_id)
    link = f"{INBOX}/{approval.approval_id}?token={token}"
    holder = client_of()

    shown = page(holder, link)
    assert "Approve refund?" in shown and "for the broken mug" in shown
    assert mine not in shown and "Ada Lovelace" not in shown
    assert f'href="{BASE}/' not in shown  # no way into the console
    for path in (
        f"{INBOX}/{other.approval_id}?token={token}",
        f"{INBOX}/{approval.approval_id}?token={token[:-2]}xx",
        f"{INBOX}/{approval.approval_id}?token=",
    ):
        assert "This approval link is not valid" in page(holder, path, status=403)
    for path in (f"{BASE}/", INBOX, f"{BASE}/runs/{mine}", f"{BASE}/runs/{theirs}"):
        assert holder.get(path).status_code == 302  # to sign in: the token opens none of them

    before = snapshot(console.store)
    form = {"decision": "approve", "reason": "ok from the link", "token": token}
    assert send(holder, link, form).status_code == 403  # no CSRF token
    wrong = send(holder, f"{INBOX}/{other.approval_id}", {**form, "csrf_token": csrf_of(shown)})
    assert wrong.status_code == 403
    assert snapshot(console.store) == before

    answer = send(holder, link, {**form, "csrf_token": csrf_of(shown)})
    assert answer.status_code == 200 and "Approved" in text(answer)
    [decided] = console.approvals(mine)
    assert (decided.decision, decided.decided_by) == (Decision.APPROVED, "link")
    assert console.approvals(theirs)[0].pending


def test_hostile_text_is_escaped(staff: Any, console: Engine, queued: list[str]) -> None:
    agent = approval_agent(says="Refund " + HOSTILE_SCRIPT, note=HOSTILE_IMG)
    waiting = console.start(agent.name, {"customer": HOSTILE_SCRIPT})
    done = console.start(hostile_agent(), {})
    execute_all(console, queued)
    assert console.get_run(done.id).status is RunStatus.COMPLETED
    for path in (INBOX, f"{BASE}/runs/{waiting.id}", f"{BASE}/runs/{done.id}", f"{BASE}/"):
        shown = page(staff, path)
        assert shown.count("<script") == 1 and "<img" not in shown, path
    run_page = page(staff, f"{BASE}/runs/{done.id}")
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in run_page
    assert "&lt;img src=x onerror=" in run_page
    # The stream is JSON, not HTML: the page puts it in through textContent.
    frames = text(staff.get(f"{BASE}/runs/{done.id}/events"))
    data = [json.loads(line[6:]) for line in frames.splitlines() if line.startswith("data: ")]
    assert any(HOSTILE_SCRIPT in json.dumps(frame, ensure_ascii=False) for frame in data)


# ------------------------------------------------------------ mounting


def test_mounted_under_another_prefix_and_namespace(
    staff: Any, console: Engine, queued: list[str]
) -> None:
    from django.test import override_settings

    run_id, _ = waiting_run(console, queued)
    with override_settings(ROOT_URLCONF="tests.console.django_urls"):
        shown = page(staff, "/ops/runwright/approvals")
        assert f'href="/ops/runwright/runs/{run_id}"' in shown
        assert f'href="{BASE}/' not in shown
        answer = post(
            staff,
            f"/ops/runwright/runs/{run_id}/cancel",
            {},
            csrf_from=f"/ops/runwright/runs/{run_id}",
        )
        assert location(answer) == f"/ops/runwright/runs/{run_id}?note=cancel"
    assert console.get_run(run_id).status is RunStatus.CANCELLED


# ------------------------------------------------------------ the admin


@pytest.fixture
def admin_db(django_db: None, engine: Engine, database_url: str) -> Iterator[Engine]:
    """Runwright's Postgres as the project's ``runwright`` database, and an
    engine on it (the admin reads the tables themselves)."""
    set_default_engine(engine)
    try:
        with runwright_database(database_url):
            yield engine
    finally:
        set_default_engine(None)
        delete_users()


def test_the_admin_lists_runs_and_approvals_read_only(admin_db: Engine) -> None:
    from django.contrib.auth.models import Permission

    from runner.console.django.models import Approval, Run

    engine = admin_db
    agent = approval_agent()
    waiting = engine.start(agent.name, {"customer": "Ada"}, thread="thread-7")
    other = engine.start(agent.name, {"customer": "Grace"})
    engine.execute(waiting.id)
    [approval] = engine.approvals(waiting.id)
    staff = client_of(make_user(permissions=("view_run", "view_approval")))
    runs = "/admin/runwright_console/run/"
    approvals = "/admin/runwright_console/approval/"

    listed = page(staff, runs)
    assert waiting.id in listed and other.id in listed
    assert f'href="{BASE}/runs/{waiting.id}"' in listed  # to the console
    assert "Add run" not in listed and 'name="action"' not in listed  # no delete action
    only_waiting = page(staff, runs + "?status=waiting")
    assert waiting.id in only_waiting and other.id not in only_waiting
    for term in (waiting.id, "thread-7"):
        found = page(staff, runs + "?" + urlencode({"q": term}))
        assert waiting.id in found and other.id not in found, term
    nothing = page(staff, runs + "?q=thread")  # whole values only
    assert waiting.id not in nothing and other.id not in nothing
    by_agent = page(staff, runs + "?" + urlencode({"agent": agent.name}))
    assert waiting.id in by_agent

    listed = page(staff, approvals)
    assert approval.approval_id in listed and "pending" in listed
    assert page(staff, approvals + "?decision=approved").count(approval.approval_id) == 0
    assert approval.approval_id in page(staff, approvals + "?decision=pending")
    assert approval.approval_id in page(staff, approvals + "?" + urlencode({"q": waiting.id}))

    # A run opens read-only, with its trigger (a json column) decoded.
    detail = page(staff, f"{runs}{waiting.id}/change/")
    assert "Ada" in detail and 'name="_save"' not in detail and "thread-7" in detail
    shown = page(staff, f"{approvals}{approval.approval_id}/change/")
    assert "refund" in shown and 'name="_save"' not in shown
    before = snapshot(engine.store)
    root = client_of(make_user(superuser=True, permissions=()))
    for client in (staff, root):
        token = cookie_token(client)
        for path in (f"{runs}add/", f"{runs}{waiting.id}/delete/", f"{approvals}add/"):
            assert client.get(path).status_code == 403, path
        for path in (f"{runs}{waiting.id}/change/", f"{runs}{waiting.id}/delete/"):
            answer = send(
                client, path, {"csrfmiddlewaretoken": token, "status": "completed", "post": "yes"}
            )
            assert answer.status_code == 403, path
        bulk = {
            "csrfmiddlewaretoken": token,
            "action": "delete_selected",
            "_selected_action": waiting.id,
            "post": "yes",
        }
        listed_again = text(send(client, runs, bulk))  # the list has no actions: it ignores it
        assert "Select run to view" in listed_again and waiting.id in listed_again
        # The control: the token is good (the refusals above were not CSRF's).
        assert send(client, "/admin/logout/", {"csrfmiddlewaretoken": token}).status_code == 200
    assert snapshot(engine.store) == before
    # The ORM reads Runwright's database and the models map what it holds.
    assert Run.objects.get(pk=waiting.id).trigger["payload"] == {"customer": "Ada"}
    assert Approval.objects.get(pk=approval.approval_id).run_id == uuid.UUID(waiting.id)
    # An approval's arguments (json too) in the order the model wrote them.
    assert list(Approval.objects.get(pk=approval.approval_id).input) == ["amount", "note"]
    # Without view permissions, staff see neither list.
    blind = client_of(make_user(permissions=("decide_approval",)))
    assert blind.get(runs).status_code == 403 and blind.get(approvals).status_code == 403
    assert Permission.objects.filter(content_type__app_label="runwright_console").count() == 8


def test_the_models_map_columns_that_exist_and_their_migration_is_current(
    django_db: None,
) -> None:
    from io import StringIO

    from django.apps import apps
    from django.core.management import call_command

    from store import schema

    models = apps.get_app_config("runwright_console").get_models()
    for model in models:
        table = schema.metadata.tables[model._meta.db_table]
        for field in model._meta.concrete_fields:
            assert field.column in table.c, (model.__name__, field.column)
        assert model._meta.managed is False
    out = StringIO()
    call_command("makemigrations", "runwright_console", check=True, dry_run=True, stdout=out)
    assert "No changes detected" in out.getvalue()


def test_django_never_migrates_runwright_s_database(admin_db: Engine) -> None:
    from django.db import connections, router

    runwright = connections["runwright"]
    assert runwright.introspection.django_table_names() == []  # nothing flush would empty
    assert "runs" not in connections["default"].introspection.django_table_names()
    for app in ("auth", "runwright_console", "tickets"):
        assert router.allow_migrate("runwright", app) is False
    assert router.allow_migrate("default", "auth") is True


def test_the_database_entry_of_a_url() -> None:
    from runner.console.django.db import runwright_database as entry

    made = entry("postgresql+psycopg2://rw:p%40ss%2Fw@db.internal:6543/runs?sslmode=require")
    assert made["ENGINE"] == "django.db.backends.postgresql"
    assert (made["USER"], made["PASSWORD"], made["HOST"], made["PORT"], made["NAME"]) == (
        "rw",
        "p@ss/w",
        "db.internal",
        "6543",
        "runs",
    )
    assert made["OPTIONS"] == {"sslmode": "require"} and made["ATOMIC_REQUESTS"] is False
    socket = entry("postgresql:///runs?host=/var/run/postgresql")
    assert (socket["HOST"], socket["PORT"], socket["OPTIONS"]) == ("/var/run/postgresql", "", {})
    for bad in ("mysql://u@h/db", "postgresql://u@h:port/db", "postgresql://u@h/"):
        with pytest.raises(ConfigurationError):
            entry(bad)


def test_the_app_checks_what_it_needs(django_db: None) -> None:
    from django.conf import settings
    from django.test import override_settings

    from runner.console.django.apps import check_settings

    assert check_settings() == []
    without = [m for m in settings.MIDDLEWARE if not m.endswith("AuthenticationMiddleware")]
    with override_settings(MIDDLEWARE=without, RUNWRIGHT_CONSOLE_ENGINE="runner.no_such_engine"):
        assert {c.id for c in check_settings()} == {
            "runwright_console.E002",
            "runwright_console.E003",
        }


def test_without_runwright_s_postgres_the_admin_hides_the_lists(django_db: None) -> None:
    """A project on the local stack has no URL to give: the models would read
    Django's own SQLite, which holds no runs, so the admin offers no list."""
    from django.test import override_settings

    root = client_of(make_user(superuser=True, permissions=()))
    try:
        with override_settings(RUNWRIGHT_CONSOLE_DATABASE="default"):
            assert root.get("/admin/runwright_console/run/").status_code == 403
            assert root.get("/admin/runwright_console/approval/").status_code == 403
            assert "runwright_console/run/" not in page(root, "/admin/")
    finally:
        delete_users()
