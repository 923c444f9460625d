"""Runwright's Celery preset. Its values come from ``runner.core.settings.Settings``, so
every one can be set from the environment.

Executions mostly wait on the model, so a worker process runs many of them on
threads (``worker_pool = "threads"``) rather than one per core.
"""

from __future__ import annotations

from runner.celery import MAX_BROKER_PRIORITY, broker_priority_options
from runner.core.settings import Settings, resolve
from store.errors import ConfigurationError

# Checked, and never starting servers: with no URLs the local stack must
# already be up (`runwright local up`). A `celery` command with a bad
# configuration stops with one line. (A web process has met the same checks
# earlier, in Engine.from_env, as a ConfigurationError.)
try:
    _settings = resolve(Settings.from_env(), start=False)
except ConfigurationError as exc:
    raise SystemExit(f"runwright: {exc.message}") from None


# A message is only a wake-up hint: Postgres decides who executes. A message
# redelivered while its run is still executing is refused by the claim.
broker_url = _settings.broker
# kombu's Redis transport, with channels that survive a broker restart (a
# restart otherwise stops busy workers; see docs/redis-broker.md). Only for
# redis://: a named transport hides the URL's scheme from kombu, which derives
# its TLS defaults from rediss://. Other brokers keep the transport their URL names.
if broker_url.startswith("redis://"):
    broker_transport = "tasks.broker:Transport"
broker_connection_retry_on_startup = True
task_default_queue = _settings.queue
task_serializer = "json"
accept_content = ["json"]

task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1
task_ignore_result = True

# Longer than any execution, so Redis never hands a running task's message to
# another worker; recovery of dead workers is tick()'s job, not the broker's.
_visibility = _settings.visibility_timeout_seconds
broker_transport_options: dict[str, object] = {"visibility_timeout": _visibility}
# A run's priority on the broker (RUNWRIGHT_BROKER_PRIORITIES, docs/flow-control.md).
if _settings.broker_priorities:
    if broker_url.startswith(("redis://", "rediss://")):
        broker_transport_options.update(broker_priority_options())
    else:  # AMQP: queues declared with x-max-priority (a queue made before keeps its own)
        task_queue_max_priority = MAX_BROKER_PRIORITY
result_backend_transport_options = {"visibility_timeout": _visibility}
visibility_timeout = _visibility

worker_pool = _settings.worker_pool
worker_concurrency = _settings.worker_concurrency
# Warm shutdown (SIGTERM) drains executions: they settle `interrupted` and are
# enqueued again. A cold shutdown still gets the drain window first.
worker_soft_shutdown_timeout = _settings.drain_seconds + 2
worker_enable_soft_shutdown_on_idle = False
worker_cancel_long_running_tasks_on_connection_loss = False
# After a lost broker connection Celery lowers the prefetch count by the tasks
# still running, then raises it by one with the ack of each task received
# since. That raise (a basic.qos round trip on the consumer's channel) runs on
# the thread that acked: with the threads pool, a task's thread, which then
# reads the AMQP socket while the consumer's thread reads it too. Frames go to
# the wrong reader (UnexpectedFrame, deliveries nobody dispatches) and the
# worker sits on its prefetched messages without executing them. Off, the new
# channel starts at the full prefetch count and nothing but the consumer's
# thread touches it; a worker may then hold a few more messages than it has
# free threads until the executions that outlived the connection end.
# See docs/rabbitmq-broker.md (tests/e2e/test_rabbitmq_restart.py).
worker_enable_prefetch_count_reduction = False
# RabbitMQ pushes messages to a worker until its prefetch is full, frozen or
# not; it takes them back when it closes that worker's connection, which the
# AMQP heartbeat decides (Celery's default, 120 s, left them there for
# minutes). Only AMQP brokers use it.
broker_heartbeat = _settings.broker_heartbeat_seconds
# A worker that lost its broker tries again every second or so (Celery's own
# back-off grows to 30 s between tries): tasks/consumer.py.
worker_consumer = "tasks.consumer:Consumer"
# And keeps trying for as long as the broker is away (Celery's 100 tries would
# be five minutes at that pace; a worker that gave up would stop for good).
broker_connection_max_retries = None

# Task events (Flower's task list) are sent while a monitor asks for them:
# Flower does, every few seconds, unless started with --enable_events=False.
# RUNWRIGHT_TASK_EVENTS=true sends them always, and the task-sent event with
# every message (docs/celery.md, "What Flower shows").
worker_send_task_events = _settings.task_events
task_send_sent_event = _settings.task_events

# The tick's entry in beat_schedule, and the routes of the two tasks, come
# with runner.celery.install(app), as on any project's app (tasks/app.py).
beat_schedule_filename = str(_settings.beat_schedule or _settings.home / "celerybeat-schedule")
# Creates the schedule file's folder, so beat starts in a fresh directory.
beat_scheduler = "tasks.beat:Scheduler"
