"""A run's page: what it was asked, what it did step by step, and how it stands.

The timeline is the run's event feed as the engine replays it (steps, status
changes, executions and takeovers, approvals and questions requested and
decided) in commit order; the page's script appends the events that follow
over the run's SSE stream, in the same markup. A decision says what a person
did beyond yes or no: the arguments they edited beside the model's, the
answer they gave, a tool they approved for the rest of the run, and the
calls such a standing approval decided.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from runner.console.render import (
    attention,
    e,
    facts,
    hidden,
    json_block,
    parsed,
    status_badge,
    text_block,
    took,
    url,
    when,
)
from runner.core.approvals.expiry import expired, expired_at
from runner.core.children import child_event_title
from runner.core.costs import listed_cost, money, run_cost, unpriced
from store.events import EventType, RunEvent, step_of
from store.models import (
    Approval,
    Effect,
    RequestKind,
    Run,
    RunAttempt,
    RunStatus,
    StandingApproval,
    Step,
    StepKind,
    Usage,
)

RETRYABLE = frozenset({RunStatus.FAILED, RunStatus.CANCELLED})


def _ended(run: Run, events: Sequence[RunEvent]) -> bool:
    """Whether the events shown hold the run's end, so the page has nothing to
    follow. The events are read before the run (views.py), so a run that
    ended in between has ended here while its events have not: the page
    follows it, and its stream brings the rest. A run older than its status
    events (it has none) counts by its status alone."""
    moves = [ev for ev in events if ev.status is not None]
    return run.ended and (not moves or moves[-1].ends)


def run_body(
    run: Run,
    events: Sequence[RunEvent],
    approvals: Sequence[Approval],
    attempts: Sequence[RunAttempt],
    *,
    base: str,
    csrf: str,
    live: bool,
    unknown: Sequence[Effect] = (),
    why: str | None = None,
    children: Sequence[Run] = (),
    standing: Sequence[StandingApproval] = (),
    titles: Mapping[str, str] | None = None,
    decide: bool = True,
) -> str:
    """The page of ``run`` (HTML inside <main>). ``live``: the timeline
    follows the run's event stream (the events were replayed, not rebuilt).
    ``unknown``: its effects of unknown outcome, each with its resolution or
    a form to record one. ``why``: why the run is queued, interrupted or
    waiting (runner/core/engine/explain.py). ``standing``: the tools a person
    approved for the rest of the run. ``titles``: how its agent versions read
    (label and id), by id. ``decide``: the reader may decide (False: the
    page has no cancel, retry or resolve form)."""
    by_id = {a.approval_id: a for a in approvals}
    parts = [
        f"<h1>{e(run.agent)} {status_badge(run.status.value, id='status')}{attention(run)}</h1>",
        _facts(
            run, [step_of(ev) for ev in events if ev.type is EventType.STEP], base, titles or {}
        ),
        _actions(run, base=base, csrf=csrf) if decide else "",
    ]
    if run.error is not None:
        parts.append(
            f'<div class="problem"><b>{e(run.error.code)}</b>{text_block(run.error.message)}</div>'
        )
    if run.erased_at is not None:
        parts.append(
            f'<p class="note" id="erased">Erased {when(run.erased_at)} by {e(run.erased_by or "")}:'
            " its payloads (trigger payload, messages, tool arguments and results, answers,"
            " output) are gone; its ids, statuses, times and usage stay.</p>"
        )
    pending = [a for a in approvals if a.pending]
    if pending and run.status is RunStatus.WAITING:
        parts.append(f'<p class="note" id="why">Waits for {_waits_for(pending, base)}.</p>')
    elif why:
        parts.append(f'<p class="note" id="why">{e(why[:1].upper() + why[1:])}.</p>')
    if unknown:
        parts.append(_unknown_effects(run, unknown, base=base, csrf=csrf, decide=decide))
    if children:
        parts.append(_children(children, base))
    if standing:
        parts.append(_standing(standing))
    if run.output is not None:
        parts.append("<h2>Output</h2>" + json_block(run.output, "output"))
    parts.append("<h2>Trigger</h2>" + trigger_block(run))
    last = max((ev.id for ev in events if ev.id is not None), default=0)
    follow = ""
    if live and not _ended(run, events):
        journaled = max((ev.data["index"] for ev in events if _is_llm(ev)), default=0)
        follow = (
            f' data-events="{e(base)}/runs/{e(run.id)}/events" data-after="{last}"'
            f' data-journaled="{journaled}"'
        )
    items = "".join(event_item(ev, by_id, titles or {}) for ev in events)
    parts.append(f'<h2>Timeline</h2><ol class="timeline" id="timeline"{follow}>{items}</ol>')
    if attempts:
        parts.append("<h2>Earlier attempts</h2>" + _attempts(attempts))
    return "\n".join(parts)


def _is_llm(event: RunEvent) -> bool:
    return event.type is EventType.STEP and event.data.get("kind") == "llm"


def trigger_block(run: Run) -> str:
    trigger = run.trigger
    rows = [
        ("source", e(trigger.source)),
        ("trigger", e(trigger.trigger)),
        ("id", e(trigger.id)),
        ("received", when(trigger.received_at)),
    ]
    if trigger.keys:
        rows.append(("keys", json_block(trigger.keys, "keys")))
    return facts(rows) + "<h3>Payload</h3>" + json_block(trigger.payload, "payload")


def _facts(run: Run, steps: Sequence[Step], base: str, titles: Mapping[str, str]) -> str:
    rows = [("run", e(run.id))]
    if run.version is not None:
        rows.append(("version", e(titles.get(run.version, run.version))))
        started = run.started_version
        if started is not None and started != run.version:
            rows.append(("started on", e(titles.get(started, started))))
    rows += [
        ("created", when(run.created_at)),
        ("started", when(run.started_at)),
        ("finished", when(run.finished_at)),
    ]
    if run.started_at is not None and run.finished_at is not None:
        rows.append(("took", e(took(run.started_at, run.finished_at))))
    rows += [
        ("steps", e(run.steps_used)),
        (
            "tokens",
            e(f"{run.usage.input_tokens} in, {run.usage.output_tokens} out{_estimated(run.usage)}"),
        ),
        ("cost", e(run_cost(run.cost_usd, steps).words(money))),
    ]
    if run.thread:
        runs_of_thread = url(base, "/", {"thread": run.thread})
        rows.append(("thread", f'<a href="{e(runs_of_thread)}">{e(run.thread)}</a>'))
    if run.concurrency_key:
        rows.append(("concurrency key", e(run.concurrency_key)))
    if run.claim is not None:
        rows.append(("execution", e(f"epoch {run.claim.epoch}")))
    if run.model:
        rows.append(("model", e(run.model)))
    if run.forked_from:
        rows.append(("forked from", e(f"{run.forked_from} after step {run.forked_at_step}")))
    if run.parent_id:
        parent = f'<a href="{e(base)}/runs/{e(run.parent_id)}">{e(run.parent_id)}</a>'
        detached = " (detached)" if run.detached else ""
        rows.append(("parent", f"{parent}, its call {e(run.parent_call_id)}{detached}"))
    if run.retry is not None:
        retry = run.retry
        said = f"attempt {retry.attempts} failed: {retry.error}"
        if run.retry_at is not None:
            said += f"; attempt {retry.attempts + 1} at {when(run.retry_at)}"
        rows.append(("model step", e(said)))
    if run.cancel_requested and not run.ended:
        by = f" by {run.cancelled_by}" if run.cancelled_by else ""
        rows.append(("cancel", e(f"requested{by}")))
    elif run.cancelled_by:
        rows.append(("cancelled by", e(run.cancelled_by)))
    return facts(rows)


def _children(children: Sequence[Run], base: str) -> str:
    """The run's child runs (runner/core/children.py): status, usage, cost, a link."""
    rows = "".join(
        f'<tr><td><a href="{e(base)}/runs/{e(c.id)}">{e(c.id)}</a></td><td>{e(c.agent)}</td>'
        f"<td>{status_badge(c.status.value)}</td><td>{e(c.parent_call_id)}</td>"
        f"<td>{e(c.usage.input_tokens)} in, {e(c.usage.output_tokens)} out</td>"
        f"<td>{e(listed_cost(c.cost_usd, c.cost_unpriced).words(money))}</td></tr>"
        for c in children
    )
    return (
        '<h2>Children</h2><table class="children" id="children"><thead><tr><th>run</th>'
        "<th>agent</th><th>status</th><th>call</th><th>tokens</th><th>cost</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        '<p class="meta">Their tokens and cost count in this run\'s.</p>'
    )


def _waits_for(pending: Sequence[Approval], base: str) -> str:
    """ "a decision on refund (expires ...) and an answer to its question (...)"."""

    def links(asked: Sequence[Approval]) -> str:
        return ", ".join(
            f'<a href="{e(base)}/approvals/{e(a.approval_id)}">{e(_label(a))}</a>'
            f" (expires {when(a.expires_at)})"
            for a in asked
        )

    approvals = [a for a in pending if a.kind is RequestKind.APPROVAL]
    questions = [a for a in pending if a.kind is RequestKind.INPUT]
    said = [f"a decision on {links(approvals)}"] if approvals else []
    if questions:
        said.append(f"an answer to {links(questions)}")
    return " and ".join(said)


def _label(approval: Approval) -> str:
    return "its question" if approval.kind is RequestKind.INPUT else approval.tool_name


def _standing(standing: Sequence[StandingApproval]) -> str:
    """The tools a person approved for the rest of the run: their later
    calls are approved without asking, as decided by that person."""
    rows = "".join(
        f"<tr><td>{e(s.tool_name)}</td><td>{e(s.granted_by or 'someone')}</td>"
        f"<td>{when(s.granted_at)}</td><td>{e(s.approval_id)}</td></tr>"
        for s in standing
    )
    return (
        '<h2>Standing approvals</h2><table class="standing" id="standing"><thead><tr>'
        "<th>tool</th><th>approved by</th><th>when</th><th>approval</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        '<p class="meta">Their later calls in this run are approved without asking; '
        "a retry asks again.</p>"
    )


def _unknown_effects(
    run: Run, effects: Sequence[Effect], *, base: str, csrf: str, decide: bool
) -> str:
    """Effects whose worker died between starting them and recording their
    outcome: what was asked, under which key, and what a person said of it."""
    items = []
    for effect in effects:
        head = (
            f"<h3>{e(effect.tool)} <small>call {e(effect.call_id)}</small></h3>"
            + facts(
                [
                    ("idempotency key", e(effect.key)),
                    ("started", f"{when(effect.started_at)}, epoch {e(effect.epoch)}"),
                ]
            )
            + json_block(effect.input, "arguments")
        )
        if effect.resolved_outcome is not None:
            said = "took place" if effect.resolved_outcome.value == "done" else "did not take place"
            note = f": {e(effect.resolved_note)}" if effect.resolved_note else ""
            head += (
                f'<p class="resolved">Resolved: it {said}, by {e(effect.resolved_by or "someone")}'
                f" {when(effect.resolved_at)}{note}</p>"
            )
        elif decide:
            action = (
                f"{e(base)}/runs/{e(run.id)}/effects/{e(quote(effect.call_id, safe=''))}/resolve"
            )
            head += (
                f'<form class="resolve" method="post" action="{action}">'
                + hidden("csrf_token", csrf)
                + '<label><input type="radio" name="outcome" value="done" required> '
                "It took place</label>"
                '<label><input type="radio" name="outcome" value="not_done"> '
                "It did not take place</label>"
                '<label>What you checked<textarea name="note" maxlength="2000"></textarea></label>'
                "<button>Record</button></form>"
            )
        items.append(f'<li class="effect">{head}</li>')
    return (
        "<h2>Effects of unknown outcome</h2>"
        '<p class="note">The worker stopped after starting these and before recording what '
        "happened; Runwright did not run them again, and told the model their outcome is "
        "unknown. Check with the service (by the idempotency key) and record what you find."
        f'</p><ul class="effects">{"".join(items)}</ul>'
    )


def _actions(run: Run, *, base: str, csrf: str) -> str:
    """Both buttons are always in the page, hidden when they do not apply:
    the script shows and hides them as the run's status changes."""
    token = hidden("csrf_token", csrf)
    path = f"{e(base)}/runs/{e(run.id)}"
    cancel_hidden = " hidden" if run.ended else ""
    # An erased run has no history to retry from (store/pg/retry_fork.py refuses it).
    retry_hidden = "" if run.status in RETRYABLE and run.erased_at is None else " hidden"
    return (
        '<div class="actions">'
        f'<form id="cancel" class="once" method="post" action="{path}/cancel"{cancel_hidden}>'
        f"{token}<button>Cancel run</button></form>"
        f'<form id="retry" class="once" method="post" action="{path}/retry"{retry_hidden}>'
        f"{token}<button>Retry run</button></form></div>"
    )


def _attempts(attempts: Sequence[RunAttempt]) -> str:
    rows = "".join(
        f"<tr><td>{a.attempt}</td><td>{status_badge(a.status.value)}</td>"
        f"<td>{e(a.error.code + ': ' + a.error.message) if a.error else ''}</td>"
        f'<td class="num">{a.steps_used}</td><td>{when(a.finished_at)}</td></tr>'
        for a in attempts
    )
    return (
        '<table><tr><th>attempt</th><th>status</th><th>error</th><th class="num">steps</th>'
        f"<th>finished</th></tr>{rows}</table>"
    )


# ---------------------------------------------------------------- events


def event_item(
    event: RunEvent, approvals: Mapping[str, Approval], titles: Mapping[str, str] | None = None
) -> str:
    """One timeline entry. The script's ``item()`` renders live events in the
    same markup (a version by its id: ``titles`` adds its label here)."""
    data = event.data
    if event.type is EventType.STEP:
        step = step_of(event)
        return _li(step.kind.value, _step(step, approvals))
    if event.type is EventType.STATUS:
        code = data.get("error_code")
        return _li("status", _head(None, f"status {data.get('status')}", code, None))
    if event.type is EventType.EXECUTION:
        takeover = "takes over a stopped execution" if data.get("takeover") else None
        return _li(
            "execution", _head(None, f"execution {data.get('epoch')}", takeover, data.get("owner"))
        )
    if event.type is EventType.APPROVAL:
        return _li("approval", _approval_event(data, approvals))
    if event.type is EventType.CHILD:
        return _li("child", _head(None, child_event_title(data), data.get("agent"), None))
    if event.type is EventType.VERSION:
        return _li("version", _version_event(data, titles or {}))
    return ""


def _version_event(data: Mapping[str, Any], titles: Mapping[str, str]) -> str:
    """A move to another version of the agent: from, to, by whom (none: its
    execution, resuming on a worker of the new version), and what changed."""
    old, new = str(data.get("from")), str(data.get("to"))
    by = data.get("by")
    who = f"by {by}" if by else "on resuming"
    title = f"version {titles.get(old, old)} \u2192 {titles.get(new, new)}"
    changes = data.get("changes")
    said = [str(c) for c in changes] if isinstance(changes, list) else []
    listed = "".join(f"<li>{e(change)}</li>" for change in said or ["no change of behaviour"])
    return _head(None, title, None, who) + f'<ul class="changes">{listed}</ul>'


def _li(kind: str, inner: str) -> str:
    return f'<li class="ev kind-{e(kind)}">{inner}</li>'


def _head(index: int | None, title: str, name: object, meta: object) -> str:
    idx = "" if index is None else f'<span class="idx">{index}</span>'
    named = "" if name is None else f'<span class="name">{e(name)}</span>'
    more = "" if meta in (None, "") else f'<span class="meta">{e(meta)}</span>'
    return f'<div class="head">{idx}<b>{e(title)}</b>{named}{more}</div>'


def _step(step: Step, approvals: Mapping[str, Approval]) -> str:
    timing = took(step.started_at, step.finished_at)
    if step.kind is StepKind.LLM:
        usage = step.usage
        meta = ", ".join(
            part
            for part in (
                ""
                if usage is None
                else f"{usage.input_tokens} in, {usage.output_tokens} out{_estimated(usage)}",
                "cost unknown" if unpriced(step) else _step_cost(step.cost_usd),
                timing,
            )
            if part
        )
        body = assistant_message(_message(step.output))
        if step.error is not None:
            body += json_block(step.error, "error")
        return _head(step.index, "model", step.name, meta) + body
    if step.kind is StepKind.TOOL:
        failed = step.error is not None
        meta = timing + (", failed" if failed else "")
        return (
            _head(step.index, "tool", step.name, meta)
            + '<div class="meta">arguments</div>'
            + json_block(step.input, "arguments")
            + f'<div class="meta">{"error" if failed else "result"}</div>'
            + json_block(step.error if failed else step.output, "result")
        )
    if step.kind is StepKind.WAIT:
        ids = step.input.get("approval_ids") if isinstance(step.input, dict) else None
        asked = [approvals[i] for i in ids or () if isinstance(i, str) and i in approvals]
        what = _WAITS.get(step.name or "", "waits for approval")
        return _head(step.index, what, None, None) + "".join(decision_line(a) for a in asked)
    return _head(step.index, step.kind.value, step.name, timing) + json_block(
        step.output, step.kind.value
    )


# What a wait step's name says it waits for (the script's stepItem says the same).
_WAITS = {"children": "waits for its children", "input": "waits for a person's answer"}


def _step_cost(usd: float | None) -> str:
    return "" if usd is None else money(usd)


def _estimated(usage: Usage) -> str:
    return " (estimated)" if usage.estimated else ""


def _message(output: Any) -> dict[str, Any]:
    reply = output if isinstance(output, dict) else {}
    message = reply.get("message")
    return message if isinstance(message, dict) else {}


def assistant_message(message: Mapping[str, Any]) -> str:
    """The model's text and each tool call it made, with its arguments."""
    parts = []
    content = message.get("content")
    if isinstance(content, str) and content:
        parts.append(text_block(content))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        function = function if isinstance(function, dict) else {}
        parts.append(
            f'<div class="call"><b>calls {e(function.get("name"))}</b>'
            f"{json_block(parsed(function.get('arguments')), 'arguments')}</div>"
        )
    return "".join(parts)


def decision_line(approval: Approval) -> str:
    """How an approval (or a question) stands: pending until when, or who
    decided what and why."""
    label = "question" if approval.kind is RequestKind.INPUT else approval.tool_name
    if approval.decision is None:
        return f'<div class="call">{e(label)}: pending</div>'
    if expired(approval):
        return (
            f'<div class="call">{e(label)}: <b>expired</b>'
            f" at {e(expired_at(approval))} with no decision</div>"
        )
    how = decided_how(
        approval.decided_by,
        edited=approval.edited,
        for_run=approval.for_run,
        standing=approval.standing_from is not None,
    )
    reason = f": {e(approval.reason)}" if approval.reason else ""
    return (
        f'<div class="call">{e(label)}: <b>{e(approval.decision.value)}</b>'
        f"{e(' ' + how if how else '')} at {when(approval.decided_at)}{reason}</div>"
    )


def decided_how(by: object, *, edited: bool, for_run: bool, standing: bool) -> str:
    """Who decided, and how beyond yes or no: "by ada with edited arguments,
    approved for the rest of the run", or "by a standing approval from ada".
    The script's ``decidedHow`` says the same of a live event."""
    if standing:
        said = "by a standing approval" + (f" from {by}" if by else "")
    elif by:
        said = f"by {by}" + (" with edited arguments" if edited else "")
    else:
        said = "with edited arguments" if edited else ""
    if for_run:
        said += (", " if said else "") + "approved for the rest of the run"
    return said


def answer_block(answer: object) -> str:
    """A person's answer: text as text, a structured one as JSON."""
    return text_block(answer) if isinstance(answer, str) else json_block(answer, "answer")


def question_of(data: Mapping[str, Any]) -> str | None:
    """The question of an ``approval`` event of kind ``input``."""
    asked = data.get("input")
    question = asked.get("question") if isinstance(asked, dict) else None
    return question if isinstance(question, str) else None


def _approval_event(data: Mapping[str, Any], approvals: Mapping[str, Approval]) -> str:
    index = data.get("step_index")
    index = index if isinstance(index, int) else None
    # Events written before requests had kinds are approvals.
    question = data.get("kind") == RequestKind.INPUT.value
    noun = "question" if question else "approval"
    name = None if question else data.get("tool_name")
    asked = question_of(data) if question else None
    said = "" if asked is None else '<div class="meta">question</div>' + text_block(asked)
    if data.get("action") == "requested":
        return (
            _head(index, "question asked" if question else "approval requested", name, None) + said
        )
    approval = approvals.get(str(data.get("approval_id")))
    if approval is not None and expired(approval):
        meta = f"at {expired_at(approval)} with no decision"
        return _head(index, f"{noun} expired", name, meta) + said
    edited = data.get("edited") is True
    how = decided_how(
        data.get("decided_by"),
        edited=edited,
        for_run=data.get("for_run") is True,
        standing=bool(data.get("standing_from")),
    )
    reason = data.get("reason")
    meta = " · ".join(x for x in (how, f"reason: {reason}" if reason else "") if x)
    body = _head(index, f"{noun} {data.get('decision')}", name, meta)
    if question and data.get("decision") == "answered":
        body += said + '<div class="meta">answer</div>' + answer_block(data.get("answer"))
    if edited:
        who = data.get("decided_by") or "a person"
        body += (
            '<div class="meta">the model asked for</div>'
            + json_block(data.get("input"), "arguments")
            + f'<div class="meta">{e(who)} approved</div>'
            + json_block(data.get("arguments"), "arguments")
        )
    return body
