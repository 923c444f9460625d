"""A project's own Celery app on a Redis broker that installed Runwright, as
``runwright doctor -A tests.celery_app_redis`` and ``celery -A
tests.celery_app_redis worker`` load it (tests/e2e/test_doctor_app.py). Its
broker and its own default queue come from the environment, so that each
test has its own."""

from __future__ import annotations

import os

from celery import Celery

from runner.celery import install

app = Celery("project-on-redis")
app.conf.broker_url = os.environ["PROJECT_BROKER_URL"]
app.conf.broker_connection_retry_on_startup = True
app.conf.broker_transport_options = {"visibility_timeout": 43200}
app.conf.task_default_queue = os.environ.get("PROJECT_QUEUE", "celery")


@app.task(name="project.add")
def add(x: int, y: int) -> int:
    return x + y


install(app)
