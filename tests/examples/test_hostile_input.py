"""Hostile input at the example apps' front doors: each is one clear 400 (never a
500) and writes nothing, neither in Runwright's store nor in Django's tables."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import pytest
from flask.testing import FlaskClient

from examples import agents
from runner import Engine, RunStatus
from store.postgres import PostgresStore
from tests.helpers import snapshot

DEEP = 500  # parses, but is nested past any documented trigger limit
TOO_DEEP = 50_000  # past what the JSON parser itself can take


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def bad_approval_ids(approval_id: str) -> list[str]:
    """Ids no approval has: spellings of a UUID that Python's parser takes (and
    Postgres may not), 20 KB, non-ASCII, NUL. The spellings name another UUID,
    so the answer is a refusal whether the engine refuses or normalizes them."""
    other = str(uuid.uuid4())
    return [
        f"urn:uuid:{other}",
        "{" + other + "}",
        "a" * 20_000,
        "äpprövål-ïd",
        approval_id + "\u0000",
    ]


# ------------------------------------------------------------------ Flask


def flask_start(client: FlaskClient, body: bytes | str) -> Any:
    return client.post("/runs", data=body, content_type="application/json")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"agent": "support_triage", "payload": {"m": "\xff\xfe"}}', id="not-utf8"),
        pytest.param(b'{"agent": "support_triage\xc0", "payload": {}}', id="agent-not-utf8"),
        pytest.param('{"agent": "support_triage", "payload": {"m": NaN}}', id="nan"),
        pytest.param(
            '{"agent": "support_triage", "payload": {"m": ' + nested(TOO_DEEP) + "}}",
            id="too-deep-to-parse",
        ),
        pytest.param('{"agent": "support_triage", "payload": {"m": 1e400}}', id="float-overflow"),
        pytest.param(
            '{"agent": "support_triage", "payload": {"m": ' + "1" * 5000 + "}}", id="huge-int"
        ),
    ],
)
def test_flask_start_refuses_bodies_it_cannot_read(
    flask_client: FlaskClient, pg_store: PostgresStore, body: bytes | str
) -> None:
    before = snapshot(pg_store)
    response = flask_start(flask_client, body)
    assert response.status_code == 400, response.get_data(as_text=True)
    assert response.json is not None and response.json["error"]
    assert snapshot(pg_store) == before


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"payload": {"m": "a\u0000b"}}, id="payload-nul"),
        pytest.param({"payload": {"m\u0000": 1}}, id="payload-key-nul"),
        pytest.param({"payload": {"m": "\ud800"}}, id="payload-lone-surrogate"),
        pytest.param({"payload": {"m": json.loads(nested(DEEP))}}, id="payload-deep"),
        pytest.param({"id": "evt\u0000"}, id="id-nul"),
        pytest.param({"id": "evt\udc80"}, id="id-lone-surrogate"),
        pytest.param({"id": "e" * 20_000}, id="id-20kb"),
        pytest.param({"agent": "support_triage\u0000"}, id="agent-nul"),
    ],
)
def test_flask_start_refuses_hostile_triggers(
    flask_client: FlaskClient, pg_store: PostgresStore, fields: dict[str, Any]
) -> None:
    body = {"agent": "support_triage", "payload": {"message": "A-1001"}, **fields}
    before = snapshot(pg_store)
    # ensure_ascii: lone surrogates travel as \ud800 escapes, as a client would send them
    response = flask_start(flask_client, json.dumps(body))
    assert response.status_code == 400, response.get_data(as_text=True)
    assert response.json is not None and response.json["error"]
    assert snapshot(pg_store) == before


def test_flask_run_ids_are_not_found(flask_client: FlaskClient) -> None:
    for bad in ("a" * 20_000, "rün", "x\u0000", "urn:uuid:0190a5f2-0000-7000-8000-000000000000"):
        response = flask_client.get("/runs/" + quote(bad, safe=""))
        assert response.status_code == 404, response.get_data(as_text=True)
        assert response.json is not None and "no run" in response.json["error"]


START = json.dumps({"agent": "support_triage", "payload": {"message": "A-1001"}})


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        # What an HTML form on another site can send without a preflight.
        pytest.param("text/plain", START, id="text-plain"),
        pytest.param("text/plain; charset=utf-8", START, id="text-plain-charset"),
        pytest.param("application/x-www-form-urlencoded", START, id="urlencoded"),
        pytest.param("multipart/form-data; boundary=x", START, id="multipart"),
        pytest.param(None, START, id="no-type"),
        pytest.param("application/jsonp", START, id="not-quite-json"),
    ],
)
def test_flask_start_takes_json_only(
    flask_client: FlaskClient, engine: Engine, content_type: str | None, body: str
) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = flask_client.post("/runs", data=body, headers=headers)
    assert response.status_code == 415, response.get_data(as_text=True)
    assert response.json is not None and "application/json" in response.json["error"]
    assert engine.list_runs() == []


def test_flask_start_takes_json_with_a_charset(flask_client: FlaskClient, engine: Engine) -> None:
    headers = {"Content-Type": "Application/JSON; charset=utf-8"}
    response = flask_client.post("/runs", data=START, headers=headers)
    assert response.status_code == 201, response.get_data(as_text=True)
    assert [run.id for run in engine.list_runs()] == [response.json and response.json["run_id"]]


# ----------------------------------------------------------------- Django


def django_tickets() -> int:
    from examples.django_app.tickets.models import Ticket

    count: int = Ticket.objects.count()
    return count


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        pytest.param(
            b"title=%FF%FE+A-1001", "application/x-www-form-urlencoded", id="pct-not-utf8"
        ),
        pytest.param(b"title=\xff\xfe A-1001", "application/x-www-form-urlencoded", id="not-utf8"),
        pytest.param(
            b'--b\r\nContent-Disposition: form-data; name="title"\r\n\r\n\xff\xfe\r\n--b--\r\n',
            "multipart/form-data; boundary=b",
            id="multipart-not-utf8",
        ),
        pytest.param(b"title=A-1001%00", "application/x-www-form-urlencoded", id="nul"),
        pytest.param(b"title=A-1001%1B%5B2J", "application/x-www-form-urlencoded", id="escape"),
        pytest.param(b"title=" + b"x" * 201, "application/x-www-form-urlencoded", id="too-long"),
    ],
)
def test_django_refuses_hostile_tickets(
    django_client: Any, pg_store: PostgresStore, body: bytes, content_type: str
) -> None:
    before = snapshot(pg_store)
    response = django_client.generic("POST", "/tickets/", body, content_type=content_type)
    assert response.status_code == 400, response.content
    assert response.json()["error"]
    assert django_tickets() == 0
    assert snapshot(pg_store) == before


# --------------------------------------------- both apps' approval links


CSRF = re.compile(rb'name="csrf_token" value="([^"]+)"')


class Page:
    """The console's page of one approval link, as either app mounts it,
    driven the same way for Flask and Django."""

    def __init__(self, client: Any, approval_id: str, token: str) -> None:
        self.client, self.approval_id = client, approval_id
        # The session's CSRF token, from the link's real page (as a browser has it).
        status, body = self.get(approval_id, token)
        found = CSRF.search(body)
        assert status == 200 and found is not None, (status, body[:300])
        self.csrf = found.group(1).decode()

    def get(self, approval_id: str, token: str) -> tuple[int, bytes]:
        query = {"token": token}
        if isinstance(self.client, FlaskClient):
            response = self.client.get(self.path(approval_id), query_string=query)
        else:
            response = self.client.get(self.path(approval_id), query)
        return response.status_code, self.body(response)

    def post(self, approval_id: str, form: dict[str, str] | bytes) -> tuple[int, bytes]:
        """Send ``form`` URL-encoded, as a browser sends the page's form."""
        body = form if isinstance(form, bytes) else urlencode(form).encode()
        body += b"&csrf_token=" + quote(self.csrf).encode()
        kind = "application/x-www-form-urlencoded"
        response = self.client.post(self.path(approval_id), data=body, content_type=kind)
        return response.status_code, self.body(response)

    @staticmethod
    def path(approval_id: str) -> str:
        return "/console/approvals/" + quote(approval_id, safe="")

    @staticmethod
    def body(response: Any) -> bytes:
        data: bytes = response.get_data() if hasattr(response, "get_data") else response.content
        return data


@pytest.fixture(params=["flask", "django"])
def waiting(request: pytest.FixtureRequest, engine: Engine) -> tuple[Page, str, str]:
    """An approval link of either app, its run waiting; the page, run id, token."""
    client = request.getfixturevalue(f"{request.param}_client")
    run = engine.start(agents.AGENT, {"message": "A-1002 never arrived"})
    engine.execute(run.id)
    url = urlsplit(agents.sent_links[-1])
    approval_id = url.path.rsplit("/", 1)[1]
    token = parse_qs(url.query)["token"][0]
    return Page(client, approval_id, token), run.id, token


def refused(answer: tuple[int, bytes], *statuses: int) -> None:
    """One clear refusal: a 400, or for a link that is not valid a 403 (an
    unknown id and a wrong token get the same answer), never a 500."""
    status, body = answer
    assert status in (statuses or (400,)), (status, body[:500])
    assert body.strip()


def still_decidable(page: Page, engine: Engine, run_id: str, token: str) -> None:
    """The control: the real id and token still decide the approval."""
    status, _ = page.post(page.approval_id, {"token": token, "decision": "approve"})
    assert status == 200
    assert engine.get_run(run_id).status is RunStatus.QUEUED


def test_approval_links_refuse_bad_ids(
    waiting: tuple[Page, str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    page, run_id, token = waiting
    before = snapshot(pg_store)
    for bad in bad_approval_ids(page.approval_id):
        refused(page.get(bad, token), 403)
        refused(page.post(bad, {"token": token, "decision": "approve"}), 403)
    assert snapshot(pg_store) == before
    still_decidable(page, engine, run_id, token)


def test_approval_links_refuse_bad_tokens(
    waiting: tuple[Page, str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    page, run_id, token = waiting
    before = snapshot(pg_store)
    for bad in ("tökén", "\u0000", "t" * 20_000, token + "é", token[:-1] + "\u00e9"):
        refused(page.get(page.approval_id, bad), 403)
        refused(page.post(page.approval_id, {"token": bad, "decision": "approve"}), 403)
    assert snapshot(pg_store) == before
    still_decidable(page, engine, run_id, token)


def test_approval_links_refuse_a_reason_with_nul(
    waiting: tuple[Page, str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    page, run_id, token = waiting
    before = snapshot(pg_store)
    refused(page.post(page.approval_id, {"token": token, "decision": "deny", "reason": "a\x00b"}))
    assert snapshot(pg_store) == before
    still_decidable(page, engine, run_id, token)


def test_approval_links_refuse_a_form_that_is_not_utf8(
    waiting: tuple[Page, str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    page, run_id, token = waiting
    before = snapshot(pg_store)
    for reason in (b"%FF%FE", b"\xff\xfe"):
        form = b"token=" + quote(token).encode() + b"&decision=deny&reason=" + reason
        refused(page.post(page.approval_id, form))
    assert snapshot(pg_store) == before
    still_decidable(page, engine, run_id, token)
