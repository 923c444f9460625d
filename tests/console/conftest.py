"""The console mounted in a Flask app, on an engine of the test's own, with
agents that ask for approvals, agents that ask questions, and agents whose
model and tools write hostile text."""

from __future__ import annotations

import enum
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic
import pytest
from flask import Flask
from flask.testing import FlaskClient

from runner import Agent, Engine, Run, effect, tool
from runner.console.abilities import EVERY_ABILITY, Ability, abilities_of, parse_role
from runner.console.flask import console_blueprint
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from store.models import Approval
from store.postgres import PostgresStore

USER_HEADER = "X-Test-User"
BASE = "/console"
HOSTILE_SCRIPT = "<script>window.pwned = 1</script>"
HOSTILE_IMG = '<img src=x onerror="window.pwned = 1">'


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def queued() -> list[str]:
    """Run ids the engine handed to "workers": the tests execute them."""
    return []


@pytest.fixture
def engine(
    pg_store: PostgresStore, leases: Leases, settings: Settings, queued: list[str]
) -> Iterator[Engine]:
    """On this test's database, with Redis leases; the tests play the workers."""
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=queued.append)
    yield made
    made.close()


def guard(request: Any) -> str | None:
    """The host app's sign-in, as these tests stage it: a header names the user."""
    user = request.headers.get(USER_HEADER)
    return user or None


@pytest.fixture
def app(engine: Engine) -> Flask:
    made = Flask(__name__)
    made.secret_key = "console-tests-" + uuid.uuid4().hex
    made.register_blueprint(console_blueprint(engine, guard=guard, live_timeout=5), url_prefix=BASE)
    return made


@pytest.fixture
def client(app: Flask) -> Iterator[FlaskClient]:
    with app.test_client() as made:
        yield made


@pytest.fixture
def django_console(django_db: None, engine: Engine) -> Iterator[Engine]:
    """The Django console over the test's engine (the example project's
    RUNWRIGHT_CONSOLE_ENGINE is runner.default_engine); its users deleted after."""
    from runner import set_default_engine
    from tests.console.django_support import delete_users

    set_default_engine(engine)
    try:
        yield engine
    finally:
        set_default_engine(None)
        delete_users()


def as_user(name: str = "alice") -> dict[str, str]:
    return {USER_HEADER: name}


# A header that gives the request's user a role (runner/console/abilities.py);
# without it, every ability.
ROLE_HEADER = "X-Test-Role"


def role_abilities(request: Any) -> frozenset[Ability]:
    role = request.headers.get(ROLE_HEADER)
    return EVERY_ABILITY if role is None else abilities_of(parse_role(role))


def role_headers(user: str = "alice", role: str | None = None) -> dict[str, str]:
    """The headers of a request by ``user``, in ``role`` if given."""
    found = {USER_HEADER: user}
    if role is not None:
        found[ROLE_HEADER] = role
    return found


@pytest.fixture
def role_client(engine: Engine) -> Iterator[FlaskClient]:
    """The console in a Flask app whose users' abilities come with their role
    (``role_headers``)."""
    app = Flask(__name__)
    app.secret_key = "console-roles-" + uuid.uuid4().hex
    app.register_blueprint(
        console_blueprint(engine, guard=guard, abilities=role_abilities, live_timeout=0.5),
        url_prefix=BASE,
    )
    with app.test_client() as made:
        yield made


CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(page: str) -> str:
    found = CSRF.search(page)
    assert found is not None, "the page has no form"
    return found.group(1)


def page_text(client: FlaskClient, path: str, user: str | None = "alice", status: int = 200) -> str:
    answer = client.get(path, headers=as_user(user) if user else {})
    body = answer.get_data(as_text=True)
    assert answer.status_code == status, body.split("<main>")[-1][:2000]
    return answer.get_data(as_text=True)


@dataclass
class Refunds:
    done: list[int] = field(default_factory=list)


@dataclass
class ApprovalAgent:
    name: str
    refunds: Refunds


def approval_agent(
    *, calls: int = 1, says: str = "The order arrived broken; I will refund it.", note: str = ""
) -> ApprovalAgent:
    """Step 1 looks an order up; step 2 says ``says`` and asks to refund
    (``calls`` refunds at once, each needing approval, with ``note``); step 3
    answers."""
    name = unique("console")
    refunds = Refunds()

    @tool
    def lookup(order: str) -> dict[str, Any]:
        """Look an order up."""
        return {"order": order, "status": "arrived broken", "paid": 30}

    @effect
    def refund(amount: int, idempotency_key: str, note: str = "") -> dict[str, Any]:
        """Refund money."""
        refunds.done.append(amount)
        return {"refunded": amount}

    def script(request: Request) -> Any:
        if request.step == 1:
            return tools(call("lookup", {"order": "A-1001"}))
        if request.step == 2:
            asks = [call("refund", {"amount": 30 + i, "note": note}) for i in range(calls)]
            return Reply(says, asks)
        return text("finished: " + request.tool_results()[-1]["content"])

    model = ScriptedModel(name, script)
    Agent(
        name=name,
        model=model.model,
        tools=[lookup, refund],
        approvals={"refund": True},
    )
    return ApprovalAgent(name, refunds)


def hostile_agent() -> str:
    """Model text, tool arguments and tool results that carry markup."""
    name = unique("hostile")

    @tool
    def echo(note: str) -> dict[str, Any]:
        """Echo a note."""
        return {"echo": note, "extra": HOSTILE_IMG}

    def script(request: Request) -> Any:
        if request.step == 1:
            return tools(call("echo", {"note": HOSTILE_SCRIPT + HOSTILE_IMG}))
        return text("Done " + HOSTILE_SCRIPT + " and " + HOSTILE_IMG)

    model = ScriptedModel(name, script)
    Agent(name=name, model=model.model, tools=[echo])
    return name


def plain_agent() -> str:
    name = unique("plain")
    model = ScriptedModel(name, lambda request: text("hello"))
    Agent(name=name, model=model.model, tools=[])
    return name


def execute_all(engine: Engine, queued: list[str]) -> None:
    """Run every queued run, as a worker would, until none is left."""
    while queued:
        engine.execute(queued.pop(0))


def post(
    client: FlaskClient,
    path: str,
    data: dict[str, str],
    *,
    csrf_from: str | None,
    user: str | None = "alice",
) -> Any:
    """POST a form as ``user``, carrying the CSRF token of the page at
    ``csrf_from`` (None: no token)."""
    form = dict(data)
    if csrf_from is not None:
        form["csrf_token"] = csrf_of(page_text(client, csrf_from, user))
    return client.post(path, data=form, headers=as_user(user) if user else {})


def waiting_run(
    engine: Engine, queued: list[str], payload: dict[str, Any] | None = None, **asks: Any
) -> tuple[ApprovalAgent, Run, Approval]:
    """A run of a new :func:`approval_agent` (``asks``: its arguments), executed
    until it waits for its one approval."""
    agent = approval_agent(**asks)
    run = engine.start(agent.name, payload or {})
    execute_all(engine, queued)
    [approval] = engine.approvals(run.id)
    return agent, run, approval


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Resolution(pydantic.BaseModel):
    """A structured answer with one field of each kind the console's form
    makes an input for (runner/console/answer_form.py)."""

    action: Literal["refund", "replace"]
    amount: int = pydantic.Field(ge=0, le=1000, description="in euros")
    ratio: float = 1.0
    urgent: bool = False
    colour: Colour = Colour.RED  # a $ref into $defs
    note: str = ""
    courier: str | None = None


class Parcel(pydantic.BaseModel):
    """An answer no plain form fits (a list): one JSON box."""

    items: list[str]


def question_agent(
    *, question: str = "Which order is it about?", ask_human: Any = True, refunds: int = 0
) -> str:
    """Step 1 asks ``question`` through ask_human (and, with ``refunds``,
    asks to refund that many times in the same step); step 2 answers with
    what it was told, as JSON of each result by call id."""
    name = unique("question")

    @effect
    def refund(amount: int, idempotency_key: str, note: str = "") -> dict[str, Any]:
        """Refund money."""
        return {"refunded": amount}

    def script(request: Request) -> Any:
        if request.step == 1:
            asks = [call("refund", {"amount": 10 + i}) for i in range(refunds)]
            return Reply("I need to ask.", [call("ask_human", {"question": question}), *asks])
        told = {m["tool_call_id"]: m["content"] for m in request.tool_results()}
        return text(json.dumps(told))

    model = ScriptedModel(name, script)
    Agent(
        name=name,
        model=model.model,
        tools=[refund],
        approvals={"refund": True},
        ask_human=ask_human,
    )
    return name


def waiting_question(
    engine: Engine, queued: list[str], payload: dict[str, Any] | None = None, **asks: Any
) -> tuple[Run, Approval]:
    """A run of a new :func:`question_agent`, executed until it waits; the
    run and its question."""
    run = engine.start(question_agent(**asks), payload or {})
    execute_all(engine, queued)
    [question] = [a for a in engine.approvals(run.id) if a.kind.value == "input"]
    return run, question


def told(engine: Engine, run_id: str, call_id: str) -> Any:
    """What the model of a :func:`question_agent` was sent for ``call_id``."""
    output = engine.get_run(run_id).output
    assert isinstance(output, str), output
    return json.loads(output)[call_id]
