"""A project's own Celery app on a RabbitMQ broker that installed Runwright,
as ``runwright doctor -A tests.celery_app_rabbitmq`` and ``celery -A
tests.celery_app_rabbitmq worker`` load it (tests/e2e/test_doctor_app.py),
with the settings docs/celery.md advises for RabbitMQ. Its broker and its own
default queue come from the environment: on a shared node, a test consumes
only queues of its own."""

from __future__ import annotations

import os

from celery import Celery

from runner.celery import install

app = Celery("project-on-rabbitmq")
app.conf.broker_url = os.environ["PROJECT_BROKER_URL"]
app.conf.broker_connection_retry_on_startup = True
app.conf.broker_heartbeat = 10
app.conf.worker_enable_prefetch_count_reduction = False
app.conf.task_default_queue = os.environ.get("PROJECT_QUEUE", "celery")


@app.task(name="project.add")
def add(x: int, y: int) -> int:
    return x + y


install(app)
