"""The application's code that Runwright calls in threads of its own is one
unit of work on the application's databases (runner/core/appdb.py, docs/django.md).

With a Flask-SQLAlchemy app registered, a sync tool, a notifier, ``on_error``
and a schedule's concurrency key each run in an app context of it, and the
connection their session took is back in the app's pool once they return.
With Django set up (the suite's example project, ``django_db``), a call's
connection is closed after it under ``CONN_MAX_AGE`` 0, and a connection in
a caller's transaction is left alone. (Real workers, Postgres and a dropped
connection: tests/e2e/test_app_databases.py.)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from runner import Agent, ApprovalRequest, Engine, tool
from runner.core import appdb, faults
from runner.testing import ScriptedModel, call, text, tools
from store.models import RunStatus
from tests.helpers import unique


class FlaskApp:
    """A Flask app with Flask-SQLAlchemy on the test's database, registered
    with Runwright for the test (registration is per process)."""

    def __init__(self, database_url: str) -> None:
        from flask import Flask
        from flask_sqlalchemy import SQLAlchemy

        self.app = Flask(__name__)
        url = sa.engine.make_url(database_url).set(drivername="postgresql+psycopg2")
        self.app.config["SQLALCHEMY_DATABASE_URI"] = url
        self.db = SQLAlchemy()
        self.db.init_app(self.app)
        self.seen: list[tuple[str, bool]] = []

    def touch(self, what: str) -> None:
        """What a hook does with the app's database: a query, whose session
        then holds a connection until it is removed."""
        from flask import has_app_context

        self.seen.append((what, has_app_context()))
        self.db.session.execute(sa.text("SELECT 1"))

    def checked_out(self) -> int:
        with self.app.app_context():
            pool: Any = self.db.engine.pool
            return int(pool.checkedout())


@pytest.fixture
def flask_app(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FlaskApp]:
    monkeypatch.setattr(appdb, "_flask", None)  # put back after the test
    made = FlaskApp(database_url)
    appdb.register_flask_sqlalchemy(made.app, made.db)
    yield made
    with made.app.app_context():
        made.db.engine.dispose()


def test_a_tool_and_a_notifier_run_in_the_registered_app_and_give_back_its_connection(
    engine: Engine, flask_app: FlaskApp
) -> None:
    @tool
    def lookup(q: str) -> str:
        """Look it up."""
        flask_app.touch("tool")
        return q

    @tool
    def gated() -> str:
        """Needs a person."""
        return "done"

    def notify(request: ApprovalRequest) -> None:
        flask_app.touch("notifier")

    name = unique("appdb-tool")
    model = ScriptedModel(
        name, [tools(call("lookup", {"q": "x"})), tools(call("gated")), text("never")]
    )
    Agent(
        name=name,
        model=model.model,
        tools=[lookup, gated],
        approvals={"gated": True},
        notifier=notify,
    )
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.WAITING
    assert flask_app.seen == [("tool", True), ("notifier", True)]
    assert flask_app.checked_out() == 0


def test_on_error_runs_in_the_registered_app_and_gives_back_its_connection(
    engine: Engine, flask_app: FlaskApp
) -> None:
    def crash(point: str) -> None:
        raise RuntimeError("the execution breaks here")

    name = unique("appdb-on-error")
    model = ScriptedModel(name, [text("done")])
    Agent(name=name, model=model.model, on_error=lambda run_id, exc: flask_app.touch("on_error"))
    faults.arm(faults.AFTER_COMMIT, crash)
    run = engine.start(name)
    engine.execute(run.id)
    assert flask_app.seen == [("on_error", True)]
    assert flask_app.checked_out() == 0


def test_a_schedules_concurrency_key_runs_in_the_registered_app_and_gives_back_its_connection(
    engine: Engine, flask_app: FlaskApp
) -> None:
    from flask import has_app_context

    def key(trigger: Any) -> str:
        if has_app_context():
            flask_app.touch("tick")
        else:
            flask_app.seen.append(("caller", False))
        return "one-at-a-time"

    name = unique("appdb-key")
    Agent(name=name, model=ScriptedModel(name, [text("done")]).model, concurrency_key=key)
    made = engine.schedules.create(unique("appdb-schedule"), name, every=60)
    report = engine.tick(now=made.next_at + timedelta(seconds=1))
    assert report.firings == 1
    assert engine.get_run(report.fired[0]).concurrency_key == "one-at-a-time"
    # Checked when the schedule was made, in the caller's thread, which is
    # the caller's unit of work; then in tick(), Runwright's.
    assert flask_app.seen == [("caller", False), ("tick", True)]
    assert flask_app.checked_out() == 0


def test_without_a_registered_app_a_call_is_the_function_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flask import has_app_context

    monkeypatch.setattr(appdb, "_flask", None)
    assert appdb.call(has_app_context) is False


def test_a_registration_is_of_an_app_and_its_own_extension(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from store.errors import ConfigurationError

    monkeypatch.setattr(appdb, "_flask", None)
    one, other = FlaskApp(database_url), FlaskApp(database_url)
    with pytest.raises(ConfigurationError, match="initialised with"):
        appdb.register_flask_sqlalchemy(one.app, other.db)
    appdb.register_flask_sqlalchemy(one.app, one.db)
    appdb.register_flask_sqlalchemy(one.app, one.db)  # a module imported twice
    with pytest.raises(ConfigurationError, match="another Flask app is registered"):
        appdb.register_flask_sqlalchemy(other.app, other.db)


def in_a_thread(fn: Any) -> Any:
    """``fn()`` in a new thread (Django's connections are per thread), its result."""
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.update(result=fn()))
    thread.start()
    thread.join(30)
    return box["result"]


@pytest.mark.usefixtures("django_db")
def test_a_django_connection_is_closed_after_the_call_with_conn_max_age_0() -> None:
    from django.contrib.auth.models import User
    from django.db import connection

    def unit() -> tuple[int, bool]:
        count = appdb.call(User.objects.count)
        return count, connection.connection is None

    assert connection.settings_dict["CONN_MAX_AGE"] == 0
    assert in_a_thread(unit)[1] is True  # closed after the call, as after a request

    def bare() -> bool:
        User.objects.count()
        open_after = connection.connection is not None
        connection.close()
        return open_after

    assert in_a_thread(bare) is True  # without the unit, it stays open in its thread


@pytest.mark.usefixtures("django_db")
def test_a_connection_in_a_callers_transaction_is_left_alone() -> None:
    from django.contrib.auth.models import User
    from django.db import connection, transaction

    def unit() -> bool:
        with transaction.atomic():
            User.objects.count()
            appdb.call(lambda: None)
            still = connection.connection is not None and not connection.needs_rollback
        connection.close()
        return still

    assert in_a_thread(unit) is True


def test_on_error_runs_off_the_loop_on_a_thread_of_the_tool_pool(engine: Engine) -> None:
    # On the loop it would hold every run of the process while it ran, and
    # Django refuses its ORM there.
    from store.errors import LeaseLostError

    seen: list[str] = []
    name = unique("off-loop")
    model = ScriptedModel(name, [text("never")])
    Agent(
        name=name,
        model=model.model,
        on_error=lambda run_id, exc: seen.append(threading.current_thread().name),
    )
    run = engine.start(name)

    def lose(_: str) -> None:
        raise LeaseLostError("the test took the lease away")

    faults.arm(faults.AFTER_JOURNAL, lose)
    try:
        engine.execute(run.id)
    finally:
        faults.disarm()
    [where] = seen
    assert where.startswith("runwright-tool"), where
