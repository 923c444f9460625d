"""People beyond yes and no from the command line (issue 29), through the real
``runwright`` entry point: approving with edited arguments or for the rest of
the run, by a run's id or an approval's, answering the model's questions,
``show`` and ``watch`` saying who decided what, and retry and fork keeping
standing approvals only when asked. Every refusal is one line, and changes
nothing in the store."""

from __future__ import annotations

import getpass
import json
from typing import Any

import pytest

import tests.agents_planned as people
from runner import Engine
from store.models import Decision, RequestKind, RunStatus
from store.postgres import PostgresStore
from tests.e2e.clirun import refused, rw
from tests.helpers import snapshot


@pytest.fixture
def env(cli_env: dict[str, str]) -> dict[str, str]:
    """The CLI's environment, with this module's agents (a fork needs them)."""
    return {**cli_env, "RUNWRIGHT_AGENTS": "tests.agents,tests.agents_planned"}


def waiting_run(engine: Engine, agent: str, payload: dict[str, Any]) -> str:
    run = engine.start(agent, payload)
    waiting = engine.execute(run.id)
    assert waiting is not None and waiting.status is RunStatus.WAITING, waiting
    return run.id


def document(env: dict[str, str], *args: str) -> Any:
    done = rw(env, *args, "--json")
    [line] = done.stdout.splitlines()
    return json.loads(line)


def refused_unchanged(store: PostgresStore, env: dict[str, str], *args: str) -> str:
    """The one line a refused command prints; the store is as it was."""
    before = snapshot(store)
    line = refused(env, *args)
    assert snapshot(store) == before, args
    return line


# ------------------------------------------------------------- approvals


def test_approve_a_run_with_edited_arguments_as_the_operator(
    env: dict[str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    run_id = waiting_run(engine, people.PEOPLE, people.plan([("refund", {"amount": 125})]))
    [asked] = engine.approvals(run_id)

    def no(*args: str) -> str:
        return refused_unchanged(pg_store, env, "approve", run_id, *args)

    assert "--arguments must be a JSON object, not an array" in no("--arguments", "[5]")
    assert "--arguments must be a JSON object, not a string" in no("--arguments", '"x"')
    assert "--arguments is not JSON" in no("--arguments", "{amount: 5}")
    assert "--arguments is not JSON: NaN" in no("--arguments", '{"amount": NaN}')
    assert "at amount, 'lots' is not of type 'integer'" in no("--arguments", '{"amount": "lots"}')
    assert "5000 is greater than the maximum of 1000" in no("--arguments", '{"amount": 5000}')
    assert "Additional properties are not allowed" in no("--arguments", '{"amount": 5, "to": "me"}')
    assert "'amount' is a required property" in no("--arguments", "{}")
    assert "not valid" in no("--token", "forged", "--arguments", '{"amount": 5}')

    out = rw(env, "approve", run_id, "--arguments", '{"amount": 100}', "--by", "ada").stdout
    assert f"approved {asked.approval_id} (refund) as ada; run {run_id} is queued again" in out
    assert 'with edited arguments: {"amount": 100}' in out
    assert "already approved" in refused(env, "approve", asked.approval_id)

    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED
    assert (100, f"{run_id}:{asked.tool_call_id}") in people.REFUNDS
    decided = engine.approvals(run_id)[0]
    assert (decided.input, decided.arguments, decided.decided_by) == (
        {"amount": 125},
        {"amount": 100},
        "ada",
    )

    shown = rw(env, "show", run_id).stdout
    assert "approvals and questions" in shown
    [line] = [x for x in shown.splitlines() if x.strip().startswith(asked.approval_id)]
    assert 'refund({"amount": 125}): approved by ada, edited: {"amount": 125} -> ' in line
    assert line.endswith('{"amount": 100}'), line
    [record] = document(env, "show", run_id)["approvals"]
    assert record["edited"] is True and record["kind"] == "approval"
    assert (record["input"], record["arguments"]) == ({"amount": 125}, {"amount": 100})
    assert (record["decision"], record["decided_by"], record["expired"]) == (
        "approved",
        "ada",
        False,
    )
    assert "token" not in json.dumps(record)


def test_deny_by_approval_id_with_a_token_and_the_login_name(
    env: dict[str, str], engine: Engine
) -> None:
    run_id = waiting_run(engine, people.PEOPLE, people.plan([("refund", {"amount": 40})]))
    [asked] = engine.approvals(run_id)
    token = engine.token(asked.approval_id)
    denied = document(env, "deny", asked.approval_id, "--token", token, "--reason", "shipping only")
    assert denied["approval_id"] == asked.approval_id and denied["decision"] == "denied"
    assert denied["approval"]["reason"] == "shipping only"
    # Through a token, without --by, the decision is still someone's: the login name.
    assert denied["approval"]["decided_by"] == getpass.getuser()
    assert denied["run"]["status"] == "queued"
    engine.execute(run_id)
    shown = rw(env, "show", run_id).stdout
    assert f"denied by {getpass.getuser()}: shipping only" in shown


def test_a_denial_that_ends_the_run_says_so(env: dict[str, str], engine: Engine) -> None:
    run_id = waiting_run(engine, people.STRICT, people.plan([("refund", {"amount": 40})]))
    out = rw(env, "deny", run_id, "--reason", "no refunds today", "--by", "bo").stdout
    assert f"run {run_id} is failed (approval_denied: bo denied refund" in out
    assert engine.get_run(run_id).status is RunStatus.FAILED
    assert "denied by bo: no refunds today" in rw(env, "show", run_id).stdout


def test_a_run_with_several_requests_needs_a_choice(
    env: dict[str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    run_id = waiting_run(
        engine,
        people.PEOPLE,
        people.plan(
            [
                ("refund", {"amount": 1}),
                ("refund", {"amount": 2}),
                ("ask_human", {"question": "Which colour?"}),
            ]
        ),
    )
    first, second, question = engine.approvals(run_id)
    assert question.kind is RequestKind.INPUT

    line = refused_unchanged(pg_store, env, "approve", run_id)
    assert f"run {run_id} has 2 pending approvals; choose one with --tool NAME or --call" in line
    assert f"refund (call {first.tool_call_id}), refund (call {second.tool_call_id})" in line
    line = refused_unchanged(pg_store, env, "deny", run_id, "--tool", "refund")
    assert "has 2 pending approvals; choose one with --call CALL_ID" in line
    line = refused_unchanged(pg_store, env, "approve", run_id, "--tool", "lookup")
    assert "has no pending approval of tool 'lookup' (pending: refund (call " in line
    line = refused_unchanged(pg_store, env, "approve", run_id, "--call", "nope")
    assert "has no pending approval for call 'nope'" in line
    line = refused_unchanged(pg_store, env, "approve", first.approval_id, "--tool", "refund")
    assert "--tool and --call choose among a run's approvals" in line
    # A question is answered, an approval approved: each command says which.
    line = refused_unchanged(pg_store, env, "approve", question.approval_id)
    assert f"{question.approval_id} is a question, not an approval: decide it with" in line
    line = refused_unchanged(pg_store, env, "answer", first.approval_id, "blue")
    assert "is an approval, not a question: decide it with runwright approve|deny" in line
    unknown = "01a22a21-0000-7000-8000-000000000000"
    line = refused_unchanged(pg_store, env, "approve", unknown)
    assert f"no approval or run with id '{unknown}'" in line
    line = refused_unchanged(pg_store, env, "answer", "not-an-id", "x")
    assert "no question or run with id 'not-an-id'" in line

    out = rw(env, "approve", run_id, "--call", second.tool_call_id, "--by", "ada").stdout
    assert f"approved {second.approval_id} (refund) as ada" in out
    assert "still waiting (for another decision)" in out
    # One approval left: the run's id names it now.
    out = rw(env, "deny", run_id, "--reason", "too much", "--by", "bo").stdout
    assert f"denied {first.approval_id} (refund) as bo" in out
    assert "answered" in rw(env, "answer", run_id, "blue", "--by", "cy").stdout
    assert engine.get_run(run_id).status is RunStatus.QUEUED
    line = refused_unchanged(pg_store, env, "approve", run_id)
    assert f"run {run_id} has no pending approval (it is queued)" in line


# ------------------------------------------------------- for the run


def test_approve_for_the_run_and_a_retry_keeps_it_only_when_asked(
    env: dict[str, str], engine: Engine
) -> None:
    three = people.plan(
        [("refund", {"amount": 10})], [("refund", {"amount": 20})], [("refund", {"amount": 30})]
    )
    run_id = waiting_run(engine, people.LIMITED, three)
    [first] = engine.approvals(run_id)
    out = rw(env, "approve", run_id, "--for-run", "--by", "ops").stdout
    assert "refund is approved for the rest of the run" in out
    failed = engine.execute(run_id)  # step 2 runs unasked; step 3 is past the budget
    assert failed is not None and failed.status is RunStatus.FAILED

    shown = rw(env, "show", run_id).stdout
    assert "approved by ops, for the rest of the run" in shown
    assert f"approved by the standing approval of ops (approval {first.approval_id})" in shown
    assert (
        "approved for the rest of the run (a retry or fork asks again, unless --keep-standing)"
        in shown
    )
    assert "  refund  by ops at " in shown and f"(approval {first.approval_id})" in shown
    [grant] = document(env, "show", run_id)["standing_approvals"]
    assert (grant["tool_name"], grant["granted_by"], grant["approval_id"]) == (
        "refund",
        "ops",
        first.approval_id,
    )

    kept = document(env, "retry", run_id, "--extra-steps", "2", "--keep-standing")
    assert kept["retried"] is True and kept["keep_standing"] is True
    assert [s["tool_name"] for s in kept["standing_approvals"]] == ["refund"]
    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED  # step 3 did not ask
    assert [a.decision for a in engine.approvals(run_id)] == [Decision.APPROVED] * 3

    again = waiting_run(engine, people.LIMITED, three)
    rw(env, "approve", again, "--for-run", "--by", "ops")
    engine.execute(again)
    out = rw(env, "retry", again, "--extra-steps", "2").stdout
    assert "no longer approved for the rest of the run: refund" in out
    assert engine.standing_approvals(again) == []
    asks = engine.execute(again)
    assert asks is not None and asks.status is RunStatus.WAITING
    assert asks.waiting is not None and asks.waiting.input == {"amount": 30}


def test_a_fork_keeps_standing_approvals_only_when_asked(
    env: dict[str, str], engine: Engine
) -> None:
    three = people.plan(
        [("refund", {"amount": 10})], [("refund", {"amount": 20})], [("refund", {"amount": 30})]
    )
    run_id = waiting_run(engine, people.LIMITED, three)
    rw(env, "approve", run_id, "--for-run", "--by", "ops")
    engine.execute(run_id)

    forked = document(env, "fork", run_id, "--at-step", "2", "--keep-standing")
    assert forked["keep_standing"] is True
    assert [s["tool_name"] for s in forked["standing_approvals"]] == ["refund"]
    assert [s.tool_name for s in engine.standing_approvals(forked["run"]["id"])] == ["refund"]

    out = rw(env, "fork", run_id, "--at-step", "2").stdout
    assert "not approved in the fork: refund (--keep-standing keeps them)" in out
    fork_id = out.split()[1]
    assert engine.standing_approvals(fork_id) == []
    assert [s.tool_name for s in engine.standing_approvals(run_id)] == ["refund"]  # untouched


# ------------------------------------------------------------- questions


def test_answer_a_question_and_show_and_watch_say_who(
    env: dict[str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    asking = "Which order?\x1b]0;pwned\x07"  # the model's text, printed inert
    run_id = waiting_run(engine, people.PEOPLE, people.plan([("ask_human", {"question": asking})]))
    [question] = engine.approvals(run_id)
    shown = rw(env, "show", run_id).stdout
    assert "\x1b" not in shown and "\x07" not in shown
    assert (
        f'waiting  for an answer to "Which order?\\u001b]0;pwned\\u0007" '
        f"(question {question.approval_id})"
    ) in shown
    waiting = document(env, "show", run_id)["run"]["waiting"]
    assert waiting["kind"] == "input" and waiting["question"] == asking
    listed = rw(env, "runs").stdout
    assert "waiting (a person's answer)" in listed
    [row] = [r for r in document(env, "runs")["runs"] if r["id"] == run_id]
    assert (row["waiting_on"], row["waiting_kind"]) == ("ask_human", "input")

    line = refused_unchanged(pg_store, env, "approve", run_id)
    assert f"run {run_id} waits for questions, not approvals: use runwright answer" in line
    assert "should be non-empty" in refused_unchanged(pg_store, env, "answer", run_id, "")
    assert "not valid" in refused_unchanged(
        pg_store, env, "answer", run_id, "x", "--token", "forged"
    )

    token = engine.token(question.approval_id)
    answered = document(
        env, "answer", question.approval_id, "order 7\x9b31m", "--token", token, "--by", "cy"
    )
    assert answered["decision"] == "answered" and answered["run"]["status"] == "queued"
    assert answered["approval"]["answer"] == "order 7\x9b31m"
    assert answered["approval"]["decided_by"] == "cy"
    assert "already answered" in refused(env, "answer", question.approval_id, "again")
    done = engine.execute(run_id)
    assert done is not None and done.status is RunStatus.COMPLETED

    shown = rw(env, "show", run_id).stdout
    assert "\x9b" not in shown
    assert 'answered by cy: "order 7\\x9b31m"' in shown
    watched = rw(env, "watch", run_id).stdout
    assert "\x1b" not in watched and "\x9b" not in watched
    assert f"-- question {question.approval_id} asked: " in watched
    assert f'-- question {question.approval_id} answered by cy: "order 7\\x9b31m"' in watched


def test_a_structured_answer_is_json(
    env: dict[str, str], engine: Engine, pg_store: PostgresStore
) -> None:
    run_id = waiting_run(
        engine, people.CHOICE, people.plan([("ask_human", {"question": "Refund or replace?"})])
    )
    [question] = engine.approvals(run_id)
    line = refused_unchanged(pg_store, env, "answer", run_id, "replace it")
    assert f"question {question.approval_id} takes a JSON answer (" in line
    assert "the answer is not JSON" in line
    line = refused_unchanged(pg_store, env, "answer", run_id, '{"action": "repair"}')
    assert "at action, 'repair' is not one of" in line
    line = refused_unchanged(pg_store, env, "answer", run_id, '"replace"')
    assert "is not of type 'object'" in line

    out = rw(env, "answer", run_id, '{"action": "replace", "note": "blue"}', "--by", "cy").stdout
    assert f"answered {question.approval_id} as cy; run {run_id} is queued again" in out
    assert engine.approvals(run_id)[0].answer == {"action": "replace", "note": "blue"}
