"""``runner.celery.install`` on a project's app, without a worker: Runwright's
route goes ahead of the app's own, the tick joins the app's beat entries, the
tasks carry their options, the app's configuration is not read early, and
the signal handlers leave apps that did not install Runwright alone. With real
workers and beat: tests/e2e/test_celery_install.py."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, signals

from runner import celery as runwright_celery
from runner.celery import EXECUTE, TICK, TICK_ENTRY, install, installed


@pytest.fixture(autouse=True)
def _process_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # install() makes its app the one this process enqueues through: put
    # Runwright's own back afterwards.
    monkeypatch.setattr(runwright_celery, "_execute_task", runwright_celery._execute_task)
    monkeypatch.setattr(runwright_celery, "_apps", weakref.WeakSet(runwright_celery._apps))
    yield


class ProjectConfig:
    broker_url = "memory://"
    task_routes = [{"proj.reports.*": {"queue": "reports"}}]
    beat_schedule = {"nightly": {"task": "proj.reports.nightly", "schedule": 86400.0}}


def _queue(app: Any, task: str) -> str:
    return str(app.amqp.router.route({}, task)["queue"].name)


def test_install_routes_runwrights_tasks_and_keeps_the_apps_own_routes_and_beat() -> None:
    app = Celery("proj", set_as_current=False)
    app.config_from_object(ProjectConfig)
    install(app)
    assert not app.configured  # a lazy configuration (Django's settings) stays lazy
    assert _queue(app, EXECUTE) == _queue(app, TICK) == "runwright"
    assert _queue(app, "proj.reports.nightly") == "reports"
    assert _queue(app, "proj.mail.send") == "celery"  # the app's default queue
    assert set(app.conf.beat_schedule) == {"nightly", TICK_ENTRY}
    assert app.conf.beat_schedule[TICK_ENTRY]["task"] == TICK
    assert app.conf.task_acks_late is False  # the app's own defaults are unchanged


def test_the_tasks_carry_runwrights_options_on_an_app_configured_before_install() -> None:
    app = Celery("proj", set_as_current=False)
    app.conf.update(broker_url="memory://", task_routes={"proj.*": {"queue": "proj"}})
    execute, tick = install(app)
    assert _queue(app, EXECUTE) == "runwright" and _queue(app, "proj.x") == "proj"
    assert execute.name == EXECUTE and tick.name == TICK
    assert execute.acks_late and execute.reject_on_worker_lost and execute.ignore_result
    assert execute.throws == (runwright_celery.RunFailed,)
    assert tick.ignore_result and not tick.send_events
    assert installed(app) and not installed(Celery("other", set_as_current=False))


class Sender:
    """What a worker or beat sends its signals as, as far as the handlers read it."""

    def __init__(self, app: Any, pool_cls: str = "threads") -> None:
        self.app = app
        self.pool_cls = pool_cls


def test_the_signal_handlers_act_only_for_an_app_that_installed_runwright() -> None:
    ours = Celery("proj", set_as_current=False, broker="memory://")
    install(ours)
    other = Celery("other", set_as_current=False, broker="memory://")
    for app in (ours, other):
        app.conf.task_send_sent_event = True
        signals.beat_init.send(sender=Sender(app))
    assert ours.conf.task_send_sent_event is False
    assert other.conf.task_send_sent_event is True
    # A prefork worker of Runwright's queue is refused; one of another app,
    # or of the project's own queues only, is left to start.
    ours.amqp.queues.select(["runwright"])
    other.amqp.queues.select(["runwright"])
    signals.worker_init.send(sender=Sender(other, "prefork"))
    with pytest.raises(SystemExit, match="prefork pool cannot drain running agents"):
        signals.worker_init.send(sender=Sender(ours, "prefork"))
    ours.amqp.queues.select(["celery"])
    signals.worker_init.send(sender=Sender(ours, "prefork"))
