"""The application's own database connections in a real worker (docs/django.md).

A sync tool that reads a Django model, or a Flask-SQLAlchemy one, runs in a
thread of the worker's tool pool, where no request and no Celery task
brackets it. The test terminates the connections the application's ORM
holds (``pg_terminate_backend``, as a Postgres restart or an idle timeout
would) between two runs; the next call, and every one after it, must work.
Each worker has one tool thread, so that every call meets the connection
the one before left (with more, a call may land on a fresh thread by luck).

The runs are started here by name, from stand-ins with the workers' agent
names: this process must not set Django up with the test project's settings
(the suite's own Django tests configure it once per process) nor register a
Flask app for every tool call it makes.
"""

from __future__ import annotations

from typing import Any

import psycopg2
import pytest

from runner import Agent, Engine
from store.models import StepKind
from tests.agents import read_effect_log
from tests.e2e.cluster import Cluster, settled, wait_until

DJANGO_APP = "django-orm-tools"  # tests/django_orm/settings.py
FLASK_APP = "flask-orm-tools"  # tests/agents_flask_orm.py
PRODUCTS = {"A1": "anvil", "B2": "bucket", "C3": "crate"}

for _name in ("orm_lookup", "orm_notified", "flask_orm_lookup"):
    Agent(name=_name, model=f"scripted/{_name}")


def make_products(database_url: str) -> None:
    """The model's table, in the test's own database, with ``PRODUCTS``."""
    with psycopg2.connect(database_url) as conn, conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE orm_products (id bigserial PRIMARY KEY, "
            "sku varchar(40) UNIQUE NOT NULL, name varchar(200) NOT NULL)"
        )
        for sku, name in PRODUCTS.items():
            cur.execute("INSERT INTO orm_products (sku, name) VALUES (%s, %s)", (sku, name))
    conn.close()


def terminate(database_url: str, application_name: str) -> int:
    """Terminate the backends of the test's database opened under
    ``application_name``: how many there were."""
    conn = psycopg2.connect(database_url)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = %s",
                (application_name,),
            )
            row = cur.fetchone()
            assert row is not None
            killed: int = row[0]
        # Terminated means gone: wait until Postgres no longer lists them.
        wait_until(lambda: _backends(conn, application_name) == 0, 10, f"{application_name} to go")
        return killed
    finally:
        conn.close()


def _backends(conn: Any, application_name: str) -> int:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            (application_name,),
        )
        row = cur.fetchone()
        assert row is not None
        return int(row[0])


def look_up(cluster: Cluster, engine: Engine, agent: str, sku: str) -> dict[str, Any]:
    """Run ``agent`` to look ``sku`` up: its tool call's output and error."""
    run = engine.start(agent, {"sku": sku})
    done = settled(cluster, run.id)
    assert done.status == "completed", done  # a tool's error goes back to the model
    (step,) = [s for s in engine.steps(run.id) if s.kind is StepKind.TOOL]
    return {"output": step.output, "error": step.error}


def found(sku: str) -> dict[str, Any]:
    return {"output": PRODUCTS[sku], "error": None}


def django_worker(cluster: Cluster, **env: str) -> None:
    cluster.worker(
        "w1",
        RUNWRIGHT_AGENTS="tests.agents_django_orm",
        # As a Django project runs its workers: Celery's own Django fix-up
        # is on (it brackets each task, not the tools' threads).
        DJANGO_SETTINGS_MODULE="tests.django_orm.settings",
        RUNWRIGHT_TOOL_THREADS="1",
        **env,
    )


@pytest.mark.parametrize(
    "conn_settings",
    [
        pytest.param({}, id="conn-max-age-0"),
        pytest.param(
            {"RUNWRIGHT_TEST_CONN_MAX_AGE": "600", "RUNWRIGHT_TEST_CONN_HEALTH_CHECKS": "1"},
            id="persistent-with-health-checks",
        ),
        pytest.param({"RUNWRIGHT_TEST_CONN_MAX_AGE": "none"}, id="persistent-unlimited"),
    ],
)
def test_a_django_tool_reads_its_model_after_the_database_dropped_its_connection(
    cluster: Cluster, conn_settings: dict[str, str]
) -> None:
    make_products(cluster.database_url)
    django_worker(cluster, **conn_settings)
    engine = cluster.engine()
    assert look_up(cluster, engine, "orm_lookup", "A1") == found("A1")

    killed = terminate(cluster.database_url, DJANGO_APP)

    after = look_up(cluster, engine, "orm_lookup", "B2")
    if conn_settings.get("RUNWRIGHT_TEST_CONN_HEALTH_CHECKS") or not conn_settings:
        # A health check before the call finds the connection dead and opens
        # another; with CONN_MAX_AGE 0 there was none left to find.
        assert after == found("B2")
    else:
        # Without health checks the call meets the dead connection, as a
        # request would; it is closed after the call, and never met again.
        assert after["output"] is None and "OperationalError" in str(after["error"]), after
    assert [look_up(cluster, engine, "orm_lookup", sku) for sku in ("C3", "A1")] == [
        found("C3"),
        found("A1"),
    ]
    if conn_settings:
        assert killed == 1  # the tool thread's connection, kept between calls
    else:
        assert killed == 0  # CONN_MAX_AGE 0: closed after each call, as after a request


def test_a_notifier_reads_the_orm_after_the_database_dropped_its_connection(
    cluster: Cluster,
) -> None:
    """The notifier runs in the tool pool too, with no tool call between two
    of its deliveries (the run waits for a person before its tool runs)."""
    make_products(cluster.database_url)
    django_worker(cluster, RUNWRIGHT_TEST_CONN_MAX_AGE="600", RUNWRIGHT_TEST_CONN_HEALTH_CHECKS="1")
    engine = cluster.engine()
    effects = cluster.workdir / "effects.jsonl"

    def delivered(run_id: str) -> dict[str, Any]:
        def entry() -> dict[str, Any] | None:
            for line in read_effect_log(str(effects)):
                if line["tool"] == "notifier" and line["run_id"] == run_id:
                    return line
            return None

        line: dict[str, Any] = wait_until(entry, 60, f"the notification of {run_id}")
        return line

    first = engine.start("orm_notified", {"sku": "A1"})
    assert delivered(first.id).get("product") == "anvil"
    assert terminate(cluster.database_url, DJANGO_APP) == 1
    second = engine.start("orm_notified", {"sku": "B2"})
    line = delivered(second.id)
    assert line.get("product") == "bucket", line


@pytest.mark.parametrize("pre_ping", [True, False], ids=["pool-pre-ping", "no-pre-ping"])
def test_a_flask_sqlalchemy_tool_reads_its_model_after_the_database_dropped_its_connection(
    cluster: Cluster, pre_ping: bool
) -> None:
    make_products(cluster.database_url)
    cluster.worker(
        "w1",
        RUNWRIGHT_AGENTS="tests.agents_flask_orm",
        RUNWRIGHT_TOOL_THREADS="1",
        RUNWRIGHT_TEST_POOL_PRE_PING="1" if pre_ping else "0",
    )
    engine = cluster.engine()
    assert look_up(cluster, engine, "flask_orm_lookup", "A1") == found("A1")

    # The session was removed after the call: its connection waits in the
    # app's pool, idle, where the database drops it.
    assert terminate(cluster.database_url, FLASK_APP) == 1

    after = look_up(cluster, engine, "flask_orm_lookup", "B2")
    if pre_ping:
        assert after == found("B2")
    else:
        # SQLAlchemy's pool hands out the dead connection once, then
        # invalidates it (and the rest of the pool).
        assert after["output"] is None and "OperationalError" in str(after["error"]), after
    assert [look_up(cluster, engine, "flask_orm_lookup", sku) for sku in ("C3", "A1")] == [
        found("C3"),
        found("A1"),
    ]
