"""The approvals inbox, and the page an approval link opens.

An approver judges a call by what led to it: which agent asks, what it was
asked to do (the trigger payload), the model's message that made the call,
the tool results the run had seen by then, and the call's arguments. Approvals
of one step are shown together, with one form for each and one for all.

A person does more than approve or deny (docs/approvals.md): they may edit
the call's arguments before approving it, approve its tool for the rest of
the run, or answer a question the model asked (a request of kind ``input``),
in a form made from the answer's schema (runner/console/answer_form.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from runner.console import answer_form
from runner.console.render import (
    e,
    expires,
    hidden,
    json_block,
    json_field,
    json_text,
    parsed,
    text_block,
    when,
)
from runner.console.timeline import answer_block, assistant_message, decision_line
from store.models import Approval, RequestKind, Run

if TYPE_CHECKING:
    from runner.core.approvals.changes import ToolChange
    from runner.core.approvals.inbox import InboxItem, SeenResult

MAX_REASON = 2000
# Arguments longer than this (as pretty JSON) are not offered for editing: a
# form is at most 64 KiB URL-encoded (runner/console/forms.py), and every
# approve or deny sends the box back whole.
MAX_EDIT_CHARS = 16_000


def _decision_form(
    action: str,
    csrf: str,
    extra: str = "",
    *,
    label: str = "",
    approval: Approval | None = None,
    change: ToolChange | None = None,
    edit: bool = True,
) -> str:
    """Approve or deny, with a reason; for one ``approval``, also its
    arguments to edit (unless not ``edit``: the reader sees them masked)
    and its tool to approve for the rest of the run. A
    call whose tool changed since it was requested (``change``) may also
    fail its run; one whose tool is gone is only denied, or its run failed."""
    beyond = ""
    if approval is not None and not (change is not None and change.gone):
        beyond = (_edit_fields(approval, change) if edit else "") + _for_run_box(approval)
    buttons = ""
    if change is None or not change.gone:
        buttons += '<button class="approve" name="decision" value="approve">Approve</button> '
    buttons += '<button class="deny" name="decision" value="deny">Deny</button>'
    if change is not None:
        buttons += (
            ' <button class="fail" name="decision" value="fail">Deny and fail the run</button>'
        )
    return (
        f'<form class="once" method="post" action="{e(action)}">'
        f"{hidden('csrf_token', csrf)}{extra}{beyond}"
        f'<label>Reason{e(label)}<br><textarea name="reason" maxlength="{MAX_REASON}">'
        f"</textarea></label><br>{buttons}</form>"
    )


def _edit_fields(approval: Approval, change: ToolChange | None = None) -> str:
    """The call's arguments in a box to edit, folded away until wanted (open
    when the tool changed: the call may fit it only once edited). The box
    goes back with every decision; the server takes it as an edit only when
    it differs from the model's arguments."""
    if not isinstance(approval.input, dict):
        return ""  # the engine takes edited arguments of an object only
    text = json_text(approval.input)
    if len(text) > MAX_EDIT_CHARS:
        return '<p class="meta">These arguments are too long to edit here.</p>'
    box = json_field(
        "arguments",
        text,
        ident=f"args-{approval.approval_id}",
        label="Arguments (JSON)",
        want_object=True,
    )
    if change is None:
        return (
            '<details class="edit"><summary>Edit the arguments</summary>'
            + box
            + '<p class="meta">Approve runs the call with these arguments; they must fit the '
            "tool's schema. The model is told what you changed.</p></details>"
        )
    return (
        '<details class="edit" open><summary>Edit the arguments</summary>'
        + box
        + '<p class="meta">Approve runs the call with these arguments; they must fit the '
        "tool as it is now. The model is told what you changed.</p>"
        + "<p>Its parameters now:</p>"
        + _parameters(change.schema)
        + json_block(change.schema, "schema")
        + "</details>"
    )


def _parameters(schema: Any) -> str:
    """A tool's parameters as a person reads them: each name, its type, and
    whether it is required (the schema itself follows, folded)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return ""
    required = set(schema.get("required") or ())
    items = []
    for name, spec in schema["properties"].items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        said = kind if isinstance(kind, str) else "any"
        needed = "required" if name in required else "optional"
        items.append(f"<li><b>{e(str(name))}</b> {e(said)}, {needed}</li>")
    return f'<ul class="params">{"".join(items)}</ul>'


def changed_block(change: ToolChange | None) -> str:
    """The mark of a call whose tool changed since it was requested, and what changed."""
    if change is None:
        return ""
    lines = "".join(f"<li>{e(line)}</li>" for line in change.lines)
    if change.gone:
        what = "It cannot be approved: deny it (the model is told), or fail the run."
    else:
        what = "Approve it as it is only if its arguments fit the tool now; else edit them."
    return (
        '<div class="changed"><p><b>Tool changed since requested</b></p>'
        f'<ul class="changes">{lines}</ul><p class="meta">{what}</p></div>'
    )


def _for_run_box(approval: Approval) -> str:
    return (
        '<label class="check"><input type="checkbox" name="for_run" value="1"> '
        f"Approve {e(approval.tool_name)} for the rest of this run</label>"
        '<p class="meta">Its later calls in this run are approved without asking, '
        "as decided by you (a retry asks again).</p>"
    )


def _answer_form(action: str, csrf: str, approval: Approval, extra: str = "") -> str:
    """The form that answers a question, made from its schema."""
    made = answer_form.plan(approval.schema)
    fields = answer_form.fields_html(made, approval.schema, ident=f"answer-{approval.approval_id}")
    return (
        f'<form class="once" method="post" action="{e(action)}">'
        f"{hidden('csrf_token', csrf)}{extra}{fields}"
        '<button class="answer" name="decision" value="answer">Answer</button></form>'
    )


def inbox_body(
    items: Sequence[InboxItem],
    *,
    base: str,
    csrf: str,
    now: datetime,
    agent: str | None,
    note: str | None,
    decide: bool = True,
    payloads: bool = True,
) -> str:
    """The pending requests, one card per step. ``decide``: the reader may
    decide them (False: the cards have no forms); ``payloads``: the reader
    sees the payloads (False: they are masked, and no box offers the
    masked arguments for editing)."""
    head = "<h1>Approvals</h1>"
    if note:
        head += f'<p class="note">{e(note)}</p>'
    head += (
        f'<form class="filters" method="get" action="{e(base)}/approvals">'
        f'<label>Agent <input name="agent" value="{e(agent or "")}"></label>'
        "<button>Filter</button></form>"
    )
    if not items:
        return head + "<p>Nothing waits for a decision.</p>"
    # One card per step, in the order of its oldest pending approval.
    groups: dict[tuple[str, int], list[InboxItem]] = {}
    for item in items:
        groups.setdefault((item.run.id, item.approval.step_index), []).append(item)
    cards = [
        _card(group, base=base, csrf=csrf, now=now, decide=decide, payloads=payloads)
        for group in groups.values()
    ]
    return head + "\n".join(cards)


def _card(
    group: Sequence[InboxItem],
    *,
    base: str,
    csrf: str,
    now: datetime,
    decide: bool,
    payloads: bool,
) -> str:
    first = group[0]
    run = first.run
    run_link = f'<a href="{e(base)}/runs/{e(run.id)}">{e(run.id)}</a>'
    parts = [
        f'<article class="ask"><h2>{e(run.agent)} {_asks(group)}</h2>',
        f'<p class="meta">Run {run_link}, step {first.approval.step_index}, '
        f"asked {when(first.approval.created_at)}</p>",
        parent_chain(first.parents, base),
        "<h3>Trigger payload</h3>" + json_block(run.trigger.payload, "payload"),
    ]
    if first.asking is not None:
        parts.append("<h3>The model's message</h3>" + assistant_message(first.asking))
    if first.seen:
        parts.append(f"<h3>Results it had seen ({len(first.seen)})</h3>" + seen_list(first.seen))
    for item in group:
        if item.approval.kind is RequestKind.INPUT:
            parts.append(
                _question_section(item.approval, base=base, csrf=csrf, now=now, decide=decide)
            )
        else:
            parts.append(
                _approval_section(
                    item.approval,
                    base=base,
                    csrf=csrf,
                    now=now,
                    about=item.about,
                    change=item.change,
                    decide=decide,
                    edit=payloads,
                )
            )
    # Questions are answered one by one: "all" decides approvals only.
    pending = [a for a in first.step_approvals if a.pending and a.kind is RequestKind.APPROVAL]
    if decide and len(pending) > 1:
        action = f"{base}/runs/{run.id}/steps/{first.approval.step_index}/decide"
        parts.append(
            f'<section class="approval"><h3>All {len(pending)} calls of this step</h3>'
            + _decision_form(action, csrf, label=" (for all)")
            + "</section>"
        )
    parts.append("</article>")
    return "\n".join(parts)


def _asks(group: Sequence[InboxItem]) -> str:
    """ "asks to call refund", "asks a question", or both."""
    tools = sorted({i.approval.tool_name for i in group if i.approval.kind is RequestKind.APPROVAL})
    questions = sum(1 for i in group if i.approval.kind is RequestKind.INPUT)
    said = [f"asks to call {e(', '.join(tools))}"] if tools else []
    if questions:
        said.append("asks a question" if questions == 1 else f"asks {questions} questions")
    return ", and ".join(said)


def parent_chain(parents: Sequence[Run], base: str) -> str:
    """For a child run (runner/core/children.py): the runs it works for, its
    parent first, each linked; empty for a run that is no child."""
    if not parents:
        return ""
    links = [
        f'the {e(p.agent)} run <a href="{e(base)}/runs/{e(p.id)}">{e(p.id)}</a>' for p in parents
    ]
    return f'<p class="meta parents">Asked for {", for ".join(links)}</p>'


def _approval_section(
    approval: Approval,
    *,
    base: str,
    csrf: str,
    now: datetime,
    about: Mapping[str, Any] | None = None,
    change: ToolChange | None = None,
    decide: bool = True,
    edit: bool = True,
) -> str:
    action = f"{base}/approvals/{approval.approval_id}"
    extra = _back_to_inbox(approval)
    form = _decision_form(action, csrf, extra, approval=approval, change=change, edit=edit)
    return (
        f'<section class="approval" id="a-{e(approval.approval_id)}">'
        f"<h3>{e(approval.tool_name)} {expires(approval.expires_at, now)}</h3>"
        + tool_about(about)
        + changed_block(change)
        + json_block(approval.input, "arguments")
        + (form if decide else "")
        + "</section>"
    )


def _question_section(
    approval: Approval, *, base: str, csrf: str, now: datetime, decide: bool
) -> str:
    action = f"{base}/approvals/{approval.approval_id}"
    form = _answer_form(action, csrf, approval, _back_to_inbox(approval)) if decide else ""
    return (
        f'<section class="approval question" id="a-{e(approval.approval_id)}">'
        f"<h3>Question {expires(approval.expires_at, now)}</h3>"
        + _question_text(approval)
        + form
        + "</section>"
    )


def _back_to_inbox(approval: Approval) -> str:
    """The form's way back to the inbox, and its run: the console reads the
    request from its run to take an edit or an answer (views.py)."""
    return hidden("next", "inbox") + hidden("run", approval.run_id)


def _question_text(approval: Approval) -> str:
    question = approval.question
    if question is None:  # the model's arguments were not a question: show them
        return json_block(approval.input, "question")
    return text_block(question)


def tool_about(about: Mapping[str, Any] | None) -> str:
    """An MCP tool's server, description and annotations, as text: the
    server wrote them, so nothing in them is markup."""
    if not about or not isinstance(about.get("mcp_server"), str):
        return ""
    parts = [f'<p class="about">From MCP server <b>{e(about["mcp_server"])}</b>']
    description = about.get("description")
    if isinstance(description, str) and description:
        parts.append(f": {e(description)}")
    parts.append("</p>")
    annotations = about.get("annotations")
    if isinstance(annotations, dict) and annotations:
        hints = ", ".join(f"{e(str(k))}={e(json.dumps(v))}" for k, v in annotations.items())
        parts.append(f'<p class="meta">Its annotations: {hints}</p>')
    return "".join(parts)


def seen_list(seen: Sequence[SeenResult]) -> str:
    items = []
    for result in seen:
        items.append(
            f'<li><b>{e(result.name)}</b> <span class="meta">{e(result.tool_call_id)}</span>'
            f"{json_block(parsed(result.content), 'result')}</li>"
        )
    return f"<ol>{''.join(items)}</ol>"


def link_title(approval: Approval) -> str:
    if approval.kind is RequestKind.INPUT:
        return "A question for you"
    return f"Approve {approval.tool_name}?"


def link_body(
    approval: Approval,
    *,
    action: str,
    token: str,
    csrf: str,
    now: datetime,
    change: ToolChange | None = None,
) -> str:
    """The page of an approval link: that approval (or question), and
    nothing else of its run; ``change``: how its tool changed since."""
    question = approval.kind is RequestKind.INPUT
    parts = [f"<h1>{e(link_title(approval))}</h1>"]
    if question:
        parts += ["<p>A run asks you:</p>", _question_text(approval)]
    else:
        parts += [
            changed_block(change if approval.pending else None),
            f"<p>A run asks to call <b>{e(approval.tool_name)}</b> with:</p>",
            json_block(approval.input, "arguments"),
        ]
    if approval.decision is not None:
        parts.append(decision_line(approval))
        if question and approval.answer is not None:
            parts.append("<p>The answer:</p>" + answer_block(approval.answer))
        elif approval.edited:
            parts.append("<p>Approved with these arguments:</p>")
            parts.append(json_block(approval.arguments, "arguments"))
    else:
        parts.append(f"<p>{expires(approval.expires_at, now)}</p>")
        if question:
            parts.append(_answer_form(action, csrf, approval, hidden("token", token)))
        else:
            form = _decision_form(
                action, csrf, hidden("token", token), approval=approval, change=change
            )
            parts.append(form)
    return "\n".join(parts)


def decided_text(approval: Approval) -> str:
    """ "approved by alice at ...: reason", for an answer that says it was decided."""
    if approval.decision is None:
        return "pending"
    by = f" by {approval.decided_by}" if approval.decided_by else ""
    decided = approval.decided_at
    at = "" if decided is None else f" at {decided.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    reason = f" ({approval.reason})" if approval.reason else ""
    return f"{approval.decision.value}{by}{at}{reason}"
