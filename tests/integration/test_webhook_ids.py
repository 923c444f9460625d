"""A delivery's run is named by its route and its id (docs/triggers.md): the
trigger id is ``webhook:<route>:<webhook-id>``, so that two routes to one agent
never share a run, and a redelivery on the same route still finds the first.
A ``webhook-id`` that begins as the engine's own trigger ids do (a schedule's
firing, a child run, a delivery's) is refused with one 400 that writes
nothing: it could otherwise name, or pre-empt, a run of another source."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from standardwebhooks import Webhook

from runner import Agent, Engine
from runner.core.children import child_trigger_id
from runner.core.errors import ConfigurationError
from runner.core.schedules.times import trigger_id as firing_trigger_id
from runner.testing import ScriptedModel, text
from runner.webhooks import WebhookReceiver, new_secret
from runner.webhooks.receiver import RESERVED_ID_PREFIXES, delivery_trigger_id
from store.models import FiringOutcome
from store.postgres import PostgresStore
from store.validate import MAX_ID_CHARS
from tests.helpers import snapshot

GITHUB, STRIPE = new_secret(), new_secret()
PARENT = "0190a8e2-1f4b-7c3d-9e5f-6a7b8c9d0e1f"  # a run id, as a child's trigger id names one


@pytest.fixture
def agent() -> str:
    name = f"hooked-{uuid.uuid4().hex[:8]}"
    Agent(name=name, model=ScriptedModel(name, lambda request: text("ok")).model)
    return name


@pytest.fixture
def engine(pg_store: PostgresStore) -> Iterator[Engine]:
    made = Engine(pg_store, enqueue=None)
    yield made
    made.close()


@pytest.fixture
def receiver(engine: Engine, agent: str) -> WebhookReceiver:
    """Two senders, each on its own route, to the same agent."""
    return WebhookReceiver(
        engine,
        routes={"github": agent, "stripe": agent},
        secrets={"github": [GITHUB], "stripe": [STRIPE]},
    )


def signed(body: Any, secret: str, msg_id: str) -> tuple[dict[str, str], bytes]:
    data = json.dumps(body).encode()
    when = datetime.fromtimestamp(time.time(), UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, when, data.decode()),
    }, data


def test_two_routes_sending_one_id_start_a_run_each_with_its_own_payload(
    engine: Engine, receiver: WebhookReceiver
) -> None:
    first = receiver.handle("github", *signed({"from": "github"}, GITHUB, "evt_1"))
    second = receiver.handle("stripe", *signed({"from": "stripe"}, STRIPE, "evt_1"))
    assert first.status == second.status == 200
    assert first.body["run_id"] != second.body["run_id"]
    for answer, route in ((first, "github"), (second, "stripe")):
        run = engine.get_run(answer.body["run_id"])
        trigger = run.trigger
        assert (trigger.source, trigger.trigger, trigger.payload) == (
            "webhook",
            route,
            {"from": route},
        )
        assert trigger.id == f"webhook:{route}:evt_1" == delivery_trigger_id(route, "evt_1")
        assert trigger.keys == {"webhook_id": "evt_1"}  # the sender's id, as it sent it


def test_a_redelivery_on_the_same_route_finds_the_first_run(
    engine: Engine, receiver: WebhookReceiver
) -> None:
    first = receiver.handle("github", *signed({"n": 1}, GITHUB, "evt_2"))
    again = receiver.handle("github", *signed({"n": 1}, GITHUB, "evt_2"))  # the sender retries
    assert (first.status, again.status) == (200, 200)
    assert again.body["run_id"] == first.body["run_id"]
    assert len(engine.list_runs(limit=10)) == 1


def test_a_delivery_named_as_a_schedule_s_firing_is_refused_and_the_schedule_fires(
    engine: Engine, receiver: WebhookReceiver, agent: str
) -> None:
    made = engine.schedules.create("nightly", agent, every=3600, payload={"report": "daily"})
    taken = firing_trigger_id("nightly", made.next_at)
    before = snapshot(engine.store)
    answer = receiver.handle("github", *signed({"report": "forged"}, GITHUB, taken))
    assert answer.status == 400
    assert answer.body == {
        "error": "webhook-id begins with 'schedule:', which names runs the engine starts "
        "itself (schedule:, child:, webhook:); give the delivery another id"
    }
    assert snapshot(engine.store) == before

    report = engine.tick(now=made.next_at + timedelta(seconds=1))
    [firing] = engine.schedules.firings("nightly")
    assert firing.outcome is FiringOutcome.STARTED and report.fired == [firing.run_id]
    run = engine.get_run(firing.run_id)  # type: ignore[arg-type]
    assert (run.trigger.source, run.trigger.id, run.trigger.payload) == (
        "schedule",
        taken,
        {"report": "daily"},
    )


@pytest.mark.parametrize(
    "msg_id",
    [
        child_trigger_id(PARENT, "call_1_0"),
        child_trigger_id(PARENT, "call_1_0", attempt=2),
        "webhook:stripe:evt_1",
        "schedule:x",
    ],
)
def test_an_id_in_another_source_s_namespace_is_refused(
    engine: Engine, receiver: WebhookReceiver, msg_id: str
) -> None:
    before = snapshot(engine.store)
    answer = receiver.handle("github", *signed({"n": 1}, GITHUB, msg_id))
    assert (
        answer.status == 400
        and "which names runs the engine starts itself" in (answer.body["error"])
    )
    assert snapshot(engine.store) == before


def test_every_derived_trigger_id_falls_in_a_reserved_namespace() -> None:
    """The prefixes the receiver refuses are those the engine derives ids
    with: a schedule's firing, a child run, a delivery."""
    derived = [
        firing_trigger_id("nightly", datetime(2026, 1, 1, tzinfo=UTC)),
        child_trigger_id(PARENT, "call_1_0"),
        delivery_trigger_id("github", "evt_1"),
    ]
    assert [next(p for p in RESERVED_ID_PREFIXES if d.startswith(p)) for d in derived] == [
        "schedule:",
        "child:",
        "webhook:",
    ]


def test_an_id_too_long_once_namespaced_is_refused_with_400(
    engine: Engine, receiver: WebhookReceiver
) -> None:
    room = MAX_ID_CHARS - len("webhook:github:")
    assert receiver.handle("github", *signed({}, GITHUB, "e" * (room + 1))).status == 400
    answer = receiver.handle("github", *signed({}, GITHUB, "e" * room))
    assert answer.status == 200
    assert len(engine.get_run(answer.body["run_id"]).trigger.id) == MAX_ID_CHARS


@pytest.mark.parametrize("route", ["git:hub", ""])
def test_a_route_name_that_would_blur_the_namespace_is_refused(
    engine: Engine, agent: str, route: str
) -> None:
    with pytest.raises(ConfigurationError, match="webhook route"):
        WebhookReceiver(engine, routes={route: agent}, secrets={route: [GITHUB]})


def test_a_redelivery_of_a_delivery_taken_before_ids_were_namespaced_finds_its_run(
    engine: Engine, receiver: WebhookReceiver, agent: str
) -> None:
    # A deployment before the namespacing started this run with the sender's bare id.
    before = engine.start(agent, {"n": 1}, source="webhook", trigger="github", id="evt_old")
    again = receiver.handle("github", *signed({"n": 1}, GITHUB, "evt_old"))
    assert again.status == 200 and again.body["run_id"] == before.id
    assert [r.id for r in engine.list_runs(agent=agent)] == [before.id]
    # The same id on another route is that route's own delivery: a run of its own.
    other = receiver.handle("stripe", *signed({"n": 2}, STRIPE, "evt_old"))
    assert other.status == 200 and other.body["run_id"] != before.id
    # A run of another source with that id is no delivery of this route.
    assert engine.run_by_trigger(agent, "evt_old") == engine.get_run(before.id)
    assert engine.run_by_trigger(agent, "evt_never") is None
