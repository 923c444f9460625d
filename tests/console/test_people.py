"""People beyond yes and no in the console (issue 29): edit a call's
arguments before approving it, approve a tool for the rest of the run, answer
the model's question (text, or a form made from the answer model's schema),
in the inbox and through a link; the run page tells what each person did.
Every bad input is one clear answer and changes nothing."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from flask.testing import FlaskClient

from runner import Engine, RunStatus
from store.models import Decision, RequestKind
from tests.console.conftest import (
    BASE,
    HOSTILE_IMG,
    HOSTILE_SCRIPT,
    Parcel,
    Resolution,
    approval_agent,
    as_user,
    csrf_of,
    execute_all,
    page_text,
    post,
    told,
    waiting_question,
    waiting_run,
)
from tests.helpers import expire_approval, snapshot

INBOX = f"{BASE}/approvals"


def textarea(page: str, name: str) -> str:
    """The text of the page's textarea called ``name``, as a browser reads it."""
    found = re.search(rf'<textarea[^>]* name="{name}"[^>]*>\n?(.*?)</textarea>', page, re.S)
    assert found is not None, f"no textarea {name}"
    return html.unescape(found.group(1))


def shown(answer: Any) -> str:
    return html.unescape(answer.get_data(as_text=True))


def main(body: str) -> str:
    """The page's <main>, for an assertion's message."""
    return body.split("<main>")[-1].split("</main>")[0][:800]


class Refusals:
    """Posts that must each be refused with one clear answer, leaving the
    store as it was and nothing enqueued."""

    def __init__(
        self,
        client: FlaskClient,
        engine: Engine,
        queued: list[str],
        path: str,
        csrf_from: str = INBOX,
    ) -> None:
        self.client, self.engine, self.queued, self.path = client, engine, queued, path
        self.token = csrf_of(page_text(client, csrf_from))

    def check(self, form: dict[str, str], status: int, says: str, path: str | None = None) -> None:
        before = snapshot(self.engine.store)
        answer = self.client.post(
            path or self.path, data={**form, "csrf_token": self.token}, headers=as_user()
        )
        body = shown(answer)
        assert answer.status_code == status, (form, main(body))
        assert says in body, (form, main(body))
        assert snapshot(self.engine.store) == before, form
        assert self.queued == [], form


# ------------------------------------------------------------------ edits


def test_the_inbox_offers_an_edit_and_approving_the_tool_for_the_run(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(engine, queued, note="mug")
    page = page_text(client, INBOX)
    assert "<summary>Edit the arguments</summary>" in page
    # The box holds the model's arguments as pretty JSON, to be edited.
    assert (
        json.loads(textarea(page, "arguments")) == approval.input == {"amount": 30, "note": "mug"}
    )
    assert textarea(page, "arguments") == json.dumps(approval.input, indent=2)
    assert 'data-json="object"' in page  # the page's script checks it before sending
    assert 'name="for_run" value="1"' in page
    assert "Approve refund for the rest of this run" in page
    assert f'name="run" value="{run.id}"' in page


def test_an_edit_in_the_inbox_runs_the_call_once_with_the_persons_arguments(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent, run, approval = waiting_run(engine, queued)
    answer = post(
        client,
        f"{INBOX}/{approval.approval_id}",
        {
            "decision": "approve",
            "arguments": '{"amount": 25, "note": "half the shipping"}',
            "reason": "partial refund",
            "next": "inbox",
            "run": run.id,
        },
        csrf_from=INBOX,
    )
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"{INBOX}?note=edited"
    assert "Approved with your edited arguments." in page_text(client, f"{INBOX}?note=edited")
    [decided] = engine.approvals(run.id)
    assert (decided.decision, decided.decided_by, decided.reason) == (
        Decision.APPROVED,
        "alice",
        "partial refund",
    )
    assert decided.input == {"amount": 30, "note": ""}  # the model's, kept
    assert decided.arguments == {"amount": 25, "note": "half the shipping"}
    assert queued == [run.id]
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    assert agent.refunds.done == [25]  # once, with the person's amount
    [effect] = engine.effects(run.id)
    assert effect.input == {"amount": 25, "note": "half the shipping"}

    page = html.unescape(page_text(client, f"{BASE}/runs/{run.id}"))
    assert "approval approved" in page
    assert "by alice with edited arguments · reason: partial refund" in page
    model_said = page.index("the model asked for")
    alice_said = page.index("alice approved")
    assert model_said < page.index('"amount": 30', model_said) < alice_said
    assert page.index('"amount": 25', alice_said) > alice_said
    assert "<b>approved</b> by alice with edited arguments at" in page  # the wait's line


def test_the_models_arguments_sent_back_are_no_edit(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    # Every decision sends the box back; unchanged (whatever its spacing,
    # whatever order its keys) it is the model's call, approved as asked.
    same = '{ "note": "",\r\n  "amount": 30 }'
    answer = post(
        client,
        f"{INBOX}/{approval.approval_id}",
        {"decision": "approve", "arguments": same, "run": run.id},
        csrf_from=INBOX,
    )
    assert answer.status_code == 303 and answer.headers["Location"].endswith("?note=approved")
    [decided] = engine.approvals(run.id)
    assert decided.decision is Decision.APPROVED and decided.arguments is None
    assert not decided.edited

    # A deny sends it back too, unchanged: a plain denial.
    _agent, other, asked = waiting_run(engine, queued)
    answer = post(
        client,
        f"{INBOX}/{asked.approval_id}",
        {"decision": "deny", "arguments": json.dumps(asked.input), "run": other.id},
        csrf_from=INBOX,
    )
    assert answer.status_code == 303 and answer.headers["Location"].endswith("?note=denied")
    assert engine.approvals(other.id)[0].decision is Decision.DENIED


def test_a_changed_type_is_an_edit_though_python_holds_the_values_equal(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    answer = post(
        client,
        f"{INBOX}/{approval.approval_id}",
        {"decision": "approve", "arguments": '{"amount": 30.0, "note": ""}', "run": run.id},
        csrf_from=INBOX,
    )
    # 30.0 == 30 in Python, not as JSON: the person's 30.0 is what they sent.
    assert answer.status_code == 303 and answer.headers["Location"].endswith("?note=edited")
    assert engine.approvals(run.id)[0].edited


@pytest.mark.parametrize(
    ("form", "status", "says"),
    [
        (
            {"decision": "approve", "arguments": '{"amount": "lots", "note": ""}'},
            400,
            "refused the edited arguments of refund: at amount, 'lots' is not of type 'integer'",
        ),
        (
            {"decision": "approve", "arguments": '{"amount": 5, "to": "me"}'},
            400,
            "Additional properties are not allowed",
        ),
        ({"decision": "approve", "arguments": "{amount: 5}"}, 400, "not JSON"),
        ({"decision": "approve", "arguments": ""}, 400, "not JSON"),
        ({"decision": "approve", "arguments": '{"amount": NaN}'}, 400, "NaN is not JSON"),
        ({"decision": "approve", "arguments": "[5]"}, 400, "must be a JSON object"),
        ({"decision": "approve", "arguments": '"5"'}, 400, "must be a JSON object"),
        (
            {"decision": "deny", "arguments": '{"amount": 5, "note": ""}'},
            400,
            "not a denial",
        ),
        ({"decision": "deny", "for_run": "1"}, 400, "not a denial"),
        ({"decision": "approve", "for_run": "yes"}, 400, "for_run is 1"),
        ({"decision": "answer", "answer": "yes"}, 400, "it takes no answer"),
        ({"decision": "answer"}, 400, "it takes no answer"),
        ({"decision": "maybe"}, 400, "decision must be approve, deny, fail or answer"),
    ],
)
def test_a_bad_edit_is_one_clear_400_and_decides_nothing(
    client: FlaskClient,
    engine: Engine,
    queued: list[str],
    form: dict[str, str],
    status: int,
    says: str,
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    refusals = Refusals(client, engine, queued, f"{INBOX}/{approval.approval_id}")
    refusals.check({**form, "run": run.id}, status, says)
    if form["decision"] != "maybe":
        refusals.check({**form, "run": run.id}, status, "Nothing was decided")
    assert engine.approvals(run.id)[0].pending


def test_an_edit_must_name_its_run_and_the_right_one(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, _run, approval = waiting_run(engine, queued)
    _other_agent, other, _ = waiting_run(engine, queued)
    refusals = Refusals(client, engine, queued, f"{INBOX}/{approval.approval_id}")
    edit = {"decision": "approve", "arguments": '{"amount": 5, "note": ""}'}
    refusals.check(edit, 400, "names its run")
    refusals.check({**edit, "run": other.id}, 404, f"run {other.id} has no approval")
    refusals.check({**edit, "run": "nope"}, 404, "Not found")


def test_a_decided_approval_answers_409_before_its_edit_is_read(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    _agent, run, approval = waiting_run(engine, queued)
    engine.decide(approval.approval_id, True, trusted=True, by="bob")
    queued.clear()
    path = f"{INBOX}/{approval.approval_id}"
    refusals = Refusals(client, engine, queued, path, csrf_from=f"{BASE}/runs/{run.id}")
    bad = {"decision": "approve", "arguments": '{"amount": "lots"}', "run": run.id}
    refusals.check(bad, 409, "This approval was already approved by bob")


# ------------------------------------------------------------ for the run


def test_approving_a_tool_for_the_run_approves_its_other_calls_and_says_so(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent = approval_agent(calls=2)
    run = engine.start(agent.name, {})
    execute_all(engine, queued)
    first, second = engine.approvals(run.id)
    answer = post(
        client,
        f"{INBOX}/{first.approval_id}",
        {"decision": "approve", "for_run": "1", "next": "inbox", "run": run.id},
        csrf_from=INBOX,
    )
    assert answer.status_code == 303 and answer.headers["Location"].endswith("?note=for_run")
    assert "Approved for the rest of the run." in page_text(client, f"{INBOX}?note=for_run")
    decided = {a.approval_id: a for a in engine.approvals(run.id)}
    assert decided[first.approval_id].for_run
    assert (decided[second.approval_id].decided_by, decided[second.approval_id].standing_from) == (
        "alice",
        first.approval_id,
    )
    assert "Nothing waits for a decision." in page_text(client, INBOX)
    execute_all(engine, queued)
    assert agent.refunds.done == [30, 31]

    page = html.unescape(page_text(client, f"{BASE}/runs/{run.id}"))
    assert "by alice, approved for the rest of the run" in page
    assert "by a standing approval from alice" in page
    standing = page[page.index("<h2>Standing approvals</h2>") :]
    standing = standing[: standing.index("</table>")]
    assert "<td>refund</td><td>alice</td>" in standing and first.approval_id in standing
    # A run no one approved a tool for has no such section.
    _agent, plain, _ = waiting_run(engine, queued)
    assert "Standing approvals" not in page_text(client, f"{BASE}/runs/{plain.id}")


# -------------------------------------------------------------- questions


def test_a_question_in_the_inbox_with_its_context_and_a_text_answer(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run, question = waiting_question(
        engine, queued, {"customer": "Ada Lovelace"}, question="Which order?\nThe last one?"
    )
    page = page_text(client, INBOX)
    assert "asks a question</h2>" in page
    assert "Ada Lovelace" in page  # the trigger payload
    assert "I need to ask." in page and "calls ask_human" in page  # the model's message
    assert '<pre class="text">Which order?\nThe last one?</pre>' in page
    assert f'id="a-{question.approval_id}"' in page
    assert textarea(page, "answer") == ""
    assert 'maxlength="20000"' in page
    assert 'name="decision" value="answer"' in page
    assert "All " not in page  # nothing to decide together
    assert 'name="for_run"' not in page and 'name="arguments"' not in page

    answer = post(
        client,
        f"{INBOX}/{question.approval_id}",
        {"decision": "answer", "answer": "  order 7\n", "next": "inbox", "run": run.id},
        csrf_from=INBOX,
    )
    assert answer.status_code == 303 and answer.headers["Location"] == f"{INBOX}?note=answered"
    assert "Answered." in page_text(client, f"{INBOX}?note=answered")
    [answered] = engine.approvals(run.id)
    assert (answered.decision, answered.answer, answered.decided_by) == (
        Decision.ANSWERED,
        "order 7",
        "alice",
    )
    assert queued == [run.id]
    execute_all(engine, queued)
    assert told(engine, run.id, question.tool_call_id) == "order 7"

    page = page_text(client, f"{BASE}/runs/{run.id}")
    assert "waits for a person&#x27;s answer" in page
    assert "question asked" in page and "question answered" in page
    assert '<span class="meta">by alice</span>' in page
    assert page.count("Which order?\nThe last one?") >= 2  # asked, and with its answer
    assert '<div class="meta">answer</div><pre class="text">order 7</pre>' in page
    assert "question: <b>answered</b> by alice" in page


def test_a_waiting_runs_page_says_it_waits_for_an_answer(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run, question = waiting_question(engine, queued, refunds=1)
    page = page_text(client, f"{BASE}/runs/{run.id}")
    why = page[page.index('id="why"') :]
    why = why[: why.index("</p>")]
    assert "Waits for a decision on <a" in why and ">refund</a>" in why
    assert (
        f'and an answer to <a href="{BASE}/approvals/{question.approval_id}">its question</a>'
        in why
    )


def test_a_step_with_approvals_and_a_question_decides_only_the_approvals_together(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run, question = waiting_question(engine, queued, refunds=2)
    page = page_text(client, INBOX)
    assert "asks to call refund, and asks a question" in page
    assert "All 2 calls of this step" in page  # the two approvals, not the question
    step = question.step_index
    answer = post(
        client,
        f"{BASE}/runs/{run.id}/steps/{step}/decide",
        {"decision": "approve"},
        csrf_from=INBOX,
    )
    assert answer.status_code == 303
    decided = [(a.kind, a.decision, a.decided_by) for a in engine.approvals(run.id)]
    assert sorted(decided, key=str) == [
        (RequestKind.APPROVAL, Decision.APPROVED, "alice"),
        (RequestKind.APPROVAL, Decision.APPROVED, "alice"),
        (RequestKind.INPUT, None, None),
    ]
    assert queued == []  # the question still waits
    # With the approvals decided, "all" finds none left: the question is none of them.
    before = snapshot(engine.store)
    again = post(
        client, f"{BASE}/runs/{run.id}/steps/{step}/decide", {"decision": "deny"}, csrf_from=INBOX
    )
    assert again.status_code == 409
    assert snapshot(engine.store) == before


def test_a_question_nobody_answered_in_time_reads_as_expired(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run, question = waiting_question(engine, queued)
    expire_approval(engine.store, question.approval_id)
    refusals = Refusals(client, engine, queued, f"{INBOX}/{question.approval_id}")
    refusals.check({"decision": "answer", "answer": "late", "run": run.id}, 409, "expired")
    assert engine.tick().expired == 1
    execute_all(engine, queued)
    page = page_text(client, f"{BASE}/runs/{run.id}")
    assert "<b>question expired</b>" in page and "question: <b>expired</b> at" in page
    assert "question denied" not in page
    # The live stream marks it, for the script to say the same.
    frames = client.get(f"{BASE}/runs/{run.id}/events", headers=as_user()).get_data(as_text=True)
    events = [json.loads(line[6:]) for line in frames.splitlines() if line.startswith("data: ")]
    [decided] = [
        ev["data"]
        for ev in events
        if ev.get("type") == "approval" and ev["data"]["action"] == "decided"
    ]
    assert (decided["kind"], decided["expired"]) == ("input", True)


@pytest.mark.parametrize(
    ("form", "says"),
    [
        ({"answer": ""}, "should be non-empty"),
        ({"answer": "   "}, "should be non-empty"),
        ({"answer": "x" * 20_001}, "is too long"),
        ({}, "refused the answer: the form carries none"),
        ({"answer": "a\x00b"}, "a NUL character"),
    ],
)
def test_a_bad_text_answer_is_one_clear_400_and_records_nothing(
    client: FlaskClient, engine: Engine, queued: list[str], form: dict[str, str], says: str
) -> None:
    run, question = waiting_question(engine, queued)
    refusals = Refusals(client, engine, queued, f"{INBOX}/{question.approval_id}")
    refusals.check({"decision": "answer", "run": run.id, **form}, 400, says)
    assert engine.approvals(run.id)[0].pending


def test_a_question_takes_no_approval_and_no_answer_without_its_run(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run, question = waiting_question(engine, queued)
    refusals = Refusals(client, engine, queued, f"{INBOX}/{question.approval_id}")
    refusals.check({"decision": "approve", "run": run.id}, 400, "is a question")
    refusals.check({"decision": "deny"}, 400, "is a question")
    refusals.check({"decision": "answer", "answer": "7"}, 400, "names its run")


def test_a_structured_question_gets_a_form_made_from_its_schema(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run, question = waiting_question(engine, queued, ask_human=Resolution)
    page = page_text(client, INBOX)
    assert 'name="answer"' not in page  # one input per property, no text box
    assert re.search(
        r'<select name="answer.action" required><option value="refund">refund</option>'
        r'<option value="replace">replace</option></select>',
        page,
    )
    assert '<input type="number" step="1" name="answer.amount" min="0" max="1000" required>' in page
    assert "in euros" in page  # the field's description
    assert '<input type="number" step="any" name="answer.ratio" value="1.0">' in page
    assert '<input type="checkbox" name="answer.urgent" value="1">' in page
    # An enum from $defs, its default chosen, and a way to leave it out.
    assert (
        '<select name="answer.colour"><option value="">—</option>'
        '<option value="red" selected>red</option><option value="blue">blue</option></select>'
    ) in page
    assert '<input type="text" name="answer.note" value="">' in page
    assert '<input type="text" name="answer.courier">' in page  # str | None

    form = {
        "decision": "answer",
        "run": run.id,
        "answer.action": "replace",
        "answer.amount": "12",
        "answer.ratio": "0.5",
        "answer.urgent": "1",
        "answer.colour": "blue",
        "answer.note": "send the blue one",
        "answer.courier": "",
    }
    answer = post(client, f"{INBOX}/{question.approval_id}", form, csrf_from=INBOX)
    assert answer.status_code == 303, shown(answer)
    [answered] = engine.approvals(run.id)
    assert answered.answer == {
        "action": "replace",
        "amount": 12,
        "ratio": 0.5,
        "urgent": True,
        "colour": "blue",
        "note": "send the blue one",
    }
    execute_all(engine, queued)
    assert json.loads(told(engine, run.id, question.tool_call_id)) == {
        "action": "replace",
        "amount": 12,
        "ratio": 0.5,
        "urgent": True,
        "colour": "blue",
        "note": "send the blue one",
    }


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"answer.action": "repair"}, "at action, 'repair' is not one of ['refund', 'replace']"),
        ({"answer.amount": "lots"}, "at amount, 'lots' is not a whole number"),
        ({"answer.amount": "2.5"}, "at amount, '2.5' is not a whole number"),
        ({"answer.amount": "5000"}, "at amount, 5000 is greater than the maximum of 1000"),
        ({"answer.ratio": "1e999"}, "at ratio, '1e999' is not a number"),
        ({"answer.amount": ""}, "'amount' is a required property"),
        ({"answer.colour": "green"}, "at colour, 'green' is not one of"),
    ],
)
def test_a_structured_answer_that_breaks_the_schema_is_one_clear_400(
    client: FlaskClient, engine: Engine, queued: list[str], fields: dict[str, str], says: str
) -> None:
    run, question = waiting_question(engine, queued, ask_human=Resolution)
    refusals = Refusals(client, engine, queued, f"{INBOX}/{question.approval_id}")
    form = {"decision": "answer", "run": run.id, "answer.action": "refund", "answer.amount": "3"}
    refusals.check({**form, **fields}, 400, says)


def test_an_answer_no_plain_form_fits_is_one_json_box(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run, question = waiting_question(engine, queued, ask_human=Parcel)
    page = page_text(client, INBOX)
    assert textarea(page, "answer") == ""
    assert 'name="answer" rows="4" spellcheck="false" data-json="object"' in page
    assert "It must fit this schema:" in page and "&quot;items&quot;" in page
    refusals = Refusals(client, engine, queued, f"{INBOX}/{question.approval_id}")
    base = {"decision": "answer", "run": run.id}
    refusals.check({**base, "answer": "{items: []}"}, 400, "refused the answer: not JSON")
    refusals.check({**base, "answer": '{"items": "mug"}'}, 400, "at items, 'mug' is not of type")
    refusals.check({**base, "answer": "[]"}, 400, "[] is not of type 'object'")
    answer = post(
        client,
        f"{INBOX}/{question.approval_id}",
        {**base, "answer": '{"items": ["mug", "<b>lid</b>"]}'},
        csrf_from=INBOX,
    )
    assert answer.status_code == 303
    assert engine.approvals(run.id)[0].answer == {"items": ["mug", "<b>lid</b>"]}


# ----------------------------------------------------------------- links


def test_a_link_edits_approves_for_the_run_and_is_decided_once(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    agent, run, approval = waiting_run(engine, queued)
    token = engine.token(approval.approval_id)
    link = f"{INBOX}/{approval.approval_id}?token={token}"
    visitor = client.application.test_client()
    page = page_text(visitor, link, user=None)
    assert json.loads(textarea(page, "arguments")) == {"amount": 30, "note": ""}
    assert "Approve refund for the rest of this run" in page
    assert 'name="run"' not in page  # a link's form carries its token instead
    csrf = csrf_of(page)
    path = f"{INBOX}/{approval.approval_id}"
    edit = {"decision": "approve", "arguments": '{"amount": 20, "note": "link"}', "for_run": "1"}

    # A forged token with an edit is refused as any forged link is.
    before = snapshot(engine.store)
    plain = visitor.post(path, data={"decision": "approve", "token": "forged", "csrf_token": csrf})
    forged = visitor.post(path, data={**edit, "token": "forged", "csrf_token": csrf})
    bad_json = visitor.post(path, data={**edit, "arguments": "{", "token": "x", "csrf_token": csrf})
    for refused in (plain, forged, bad_json):
        assert refused.status_code == 403
        assert "This approval link is not valid" in shown(refused)
    assert shown(forged) == shown(plain)
    # The right token with a bad edit: one clear 400, nothing decided.
    broken = visitor.post(
        path, data={**edit, "arguments": '{"amount": -1.5}', "token": token, "csrf_token": csrf}
    )
    assert broken.status_code == 400 and "Nothing was decided" in shown(broken)
    assert "at amount, -1.5 is not of type 'integer'" in shown(broken)
    assert f'href="{BASE}/' not in shown(broken)  # no way into the console
    assert snapshot(engine.store) == before and queued == []

    done = visitor.post(path, data={**edit, "token": token, "csrf_token": csrf})
    assert done.status_code == 200
    assert "Approved: refund, for the rest of the run. Thank you." in shown(done)
    [decided] = engine.approvals(run.id)
    assert (decided.decided_by, decided.arguments, decided.for_run) == (
        "link",
        {"amount": 20, "note": "link"},
        True,
    )
    [standing] = engine.standing_approvals(run.id)
    assert (standing.tool_name, standing.granted_by) == ("refund", "link")

    # The link replayed (another edit, or a plain one): 409, nothing changes.
    before = snapshot(engine.store)
    for again in (
        {**edit, "arguments": '{"amount": 999, "note": ""}'},
        {**edit, "arguments": '{"amount": "lots"}'},
        {"decision": "deny"},
    ):
        replay = visitor.post(path, data={**again, "token": token, "csrf_token": csrf})
        assert replay.status_code == 409, shown(replay)
        assert "This approval was already approved by link" in shown(replay)
    assert snapshot(engine.store) == before

    page = page_text(visitor, link, user=None)
    assert "<b>approved</b> by link with edited arguments, approved for the rest of the run" in page
    assert "Approved with these arguments:" in page and 'name="arguments"' not in page
    execute_all(engine, queued)
    assert agent.refunds.done == [20]


def test_a_link_answers_its_question_once(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run, question = waiting_question(engine, queued, question="Colour? " + HOSTILE_SCRIPT)
    token = engine.token(question.approval_id)
    link = f"{INBOX}/{question.approval_id}?token={token}"
    visitor = client.application.test_client()
    page = page_text(visitor, link, user=None)
    assert "<title>A question for you</title>" in page
    assert "Colour? &lt;script&gt;window.pwned = 1&lt;/script&gt;" in page
    assert page.count("<script") == 1
    assert textarea(page, "answer") == ""
    csrf = csrf_of(page)
    path = f"{INBOX}/{question.approval_id}"

    before = snapshot(engine.store)
    plain = visitor.post(path, data={"decision": "approve", "token": "forged", "csrf_token": csrf})
    forged = visitor.post(
        path, data={"decision": "answer", "answer": "x", "token": "forged", "csrf_token": csrf}
    )
    assert forged.status_code == 403 and shown(forged) == shown(plain)
    empty = visitor.post(
        path, data={"decision": "answer", "answer": "", "token": token, "csrf_token": csrf}
    )
    assert empty.status_code == 400 and "should be non-empty" in shown(empty)
    assert snapshot(engine.store) == before

    done = visitor.post(
        path, data={"decision": "answer", "answer": "blue", "token": token, "csrf_token": csrf}
    )
    assert done.status_code == 200 and "Answered. Thank you." in shown(done)
    [answered] = engine.approvals(run.id)
    assert (answered.answer, answered.decided_by) == ("blue", "link")
    before = snapshot(engine.store)
    replay = visitor.post(
        path, data={"decision": "answer", "answer": "red", "token": token, "csrf_token": csrf}
    )
    assert replay.status_code == 409 and "This question was already answered by link" in shown(
        replay
    )
    assert snapshot(engine.store) == before
    page = page_text(visitor, link, user=None)
    assert "question: <b>answered</b> by link" in page and '<pre class="text">blue</pre>' in page


# ---------------------------------------------------------------- escaping


def test_markup_in_questions_edits_and_answers_stays_text(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    run, question = waiting_question(
        engine, queued, question="Which? " + HOSTILE_SCRIPT + HOSTILE_IMG, refunds=1
    )
    approval = next(a for a in engine.approvals(run.id) if a.kind is RequestKind.APPROVAL)
    inbox = page_text(client, INBOX)
    assert inbox.count("<script") == 1 and "<img" not in inbox
    assert "Which? &lt;script&gt;window.pwned = 1&lt;/script&gt;&lt;img src=x onerror=" in inbox

    edit = {"amount": 11, "note": "</textarea>" + HOSTILE_SCRIPT + HOSTILE_IMG}
    engine.decide(approval.approval_id, True, trusted=True, by="<b>mallory</b>", arguments=edit)
    engine.answer(question.approval_id, HOSTILE_SCRIPT + HOSTILE_IMG, trusted=True, by="alice")
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    page = page_text(client, f"{BASE}/runs/{run.id}")
    assert page.count("<script") == 1 and "<img" not in page and "<b>mallory" not in page
    assert "by &lt;b&gt;mallory&lt;/b&gt; with edited arguments" in page
    assert "&lt;/textarea&gt;&lt;script&gt;" in page  # the edit, as text
    assert '<pre class="text">&lt;script&gt;window.pwned = 1&lt;/script&gt;&lt;img' in page

    # The live feed is JSON for the page's script, which puts it in as text.
    events = [e.data for e in engine.events(run.id, timeout=0) if e.type.value == "approval"]
    decided = {d["kind"]: d for d in events if d["action"] == "decided"}
    assert decided["approval"]["arguments"] == edit and decided["approval"]["edited"] is True
    assert decided["input"]["answer"] == HOSTILE_SCRIPT + HOSTILE_IMG
