"""The pending request a deciding command (``approve``, ``deny``, ``answer``)
means: named by its own id, or by its run's id, with ``--tool`` or ``--call``
to choose when the run waits for several. A person rarely has an approval's id
at hand (the notification has it; the issue's examples give the run's), so the
run's id must do whenever it names one request without doubt; when it does
not, the one error lists what it could mean, and nothing is decided.

Also the reading of an answer typed on the command line: text for a question
that wants text, JSON for one that wants a structured answer."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from store.errors import ApprovalNotFound, InvalidInput, RunNotFound
from store.jsonsafe import loads_strict
from store.models import Approval, RequestKind
from store.validate import shown_id

if TYPE_CHECKING:
    from store.postgres import PostgresStore

# How each kind is named in the command's messages, and the command that takes
# the other kind.
_NOUN = {RequestKind.APPROVAL: "approval", RequestKind.INPUT: "question"}
_A = {RequestKind.APPROVAL: "an approval", RequestKind.INPUT: "a question"}
_COMMAND = {
    RequestKind.APPROVAL: "runwright approve|deny",
    RequestKind.INPUT: "runwright answer",
}


def chosen(
    store: PostgresStore,
    given: str,
    kind: RequestKind,
    *,
    tool: str | None = None,
    call: str | None = None,
) -> Approval:
    """The request ``given`` names: a request id (of ``kind``), or a run id
    whose one pending request of ``kind`` it is, or the one ``tool``/``call``
    choose among them. Anything else is one :class:`InvalidInput` (or
    :class:`ApprovalNotFound` for an id nothing has) that says what to do."""
    noun = _NOUN[kind]
    try:
        request = store.get_approval(given)
    except ApprovalNotFound:
        request = None
    if request is not None:
        if tool is not None or call is not None:
            raise InvalidInput(
                f"--tool and --call choose among a run's {noun}s; {given} is the id of "
                f"one {_NOUN[request.kind]} already: leave them out"
            )
        if request.kind is not kind:
            raise InvalidInput(
                f"{given} is {_A[request.kind]}, not {_A[kind]}: "
                f"decide it with {_COMMAND[request.kind]}"
            )
        return request
    try:
        run = store.get_run(given)
    except RunNotFound:
        raise ApprovalNotFound(f"no {noun} or run with id {shown_id(given)}") from None
    pending = [a for a in store.approvals(run.id) if a.pending]
    mine = [a for a in pending if a.kind is kind]
    if not mine:
        others = [a for a in pending if a.kind is not kind]
        if others:
            other = _NOUN[others[0].kind]
            raise InvalidInput(
                f"run {run.id} waits for {other}s, not {noun}s: "
                f"use {_COMMAND[others[0].kind]} ({_listed(others)})"
            )
        raise InvalidInput(f"run {run.id} has no pending {noun} (it is {run.status.value})")
    matching = [
        a
        for a in mine
        if (tool is None or a.tool_name == tool) and (call is None or a.tool_call_id == call)
    ]
    if not matching:
        wanted = " and ".join(
            part
            for part in (
                f"of tool {tool!r}" if tool is not None else "",
                f"for call {call!r}" if call is not None else "",
            )
            if part
        )
        raise InvalidInput(
            f"run {run.id} has no pending {noun} {wanted} (pending: {_listed(mine)})"
        )
    if len(matching) > 1:
        # The list last: the CLI clips a long error, and what to do comes first.
        how = "--call CALL_ID" if tool is not None else "--tool NAME or --call CALL_ID"
        raise InvalidInput(
            f"run {run.id} has {len(matching)} pending {noun}s; choose one with {how}, "
            f"or give its id (runwright show lists them): {_listed(matching)}"
        )
    return matching[0]


def _listed(requests: list[Approval]) -> str:
    return ", ".join(f"{a.tool_name} (call {a.tool_call_id})" for a in requests)


def answer_value(question: Approval, text: str) -> Any:
    """VALUE as the question wants it: the text itself when its schema asks
    for a string (so nobody has to quote a sentence as JSON), else parsed as
    JSON (the engine then checks it against the schema)."""
    schema = question.schema
    if not isinstance(schema, dict) or schema.get("type") == "string":
        return text
    try:
        return loads_strict(text, "the answer")
    except InvalidInput as exc:
        wants = json.dumps(schema, separators=(",", ":"))
        if len(wants) > 80:
            wants = wants[:77] + "..."
        raise InvalidInput(
            f"question {question.approval_id} takes a JSON answer ({wants}); {exc.message}"
        ) from None


def arguments_value(text: str) -> dict[str, Any]:
    """``--arguments``: a JSON object (the tool's arguments as the person
    wants them; the engine checks them against the tool's schema)."""
    value = loads_strict(text, "--arguments")
    if not isinstance(value, dict):
        raise InvalidInput(f"--arguments must be a JSON object, not {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "null"
