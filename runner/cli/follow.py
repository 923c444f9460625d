"""``runwright watch``: a run's events as they are committed, from the feed
(runner/core/events/feed.py), and a streaming model's text as it is generated."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from runner.cli.audit import cli_source, login_name
from runner.cli.describe import decision_words
from runner.cli.step_lines import clip, step_line
from runner.cli.terminal import inert
from runner.core.approvals.expiry import marked_event
from runner.core.audit import AuditAction, record
from runner.core.children import child_event_title
from runner.core.coordination.leases import connect
from runner.core.engine.explain import at
from runner.core.events.feed import Feed
from runner.core.settings import Settings, open_store
from runner.core.versions import waiting_for
from store.events import EventType, RunEvent, step_of
from store.models import RequestKind, Run, RunStatus
from store.postgres import PostgresStore


def _say(text: str, *, nl: bool = True) -> None:
    click.echo(inert(text), nl=nl)


def _status_line(event: RunEvent, run: Run) -> str:
    extra = ""
    wait = run.waiting
    if event.status is RunStatus.WAITING and wait is not None:
        if wait.kind == RequestKind.INPUT.value:
            extra = f": an answer to question {wait.approval_id}"
        else:
            extra = f": approval {wait.approval_id} for {wait.tool_name}"
    elif (pinned := waiting_for(event.data.get("parked_on"))) is not None:
        return f"-- {event.data.get('status')} (waiting for a worker of version {pinned[1]})"
    elif event.data.get("parked_on"):
        # Parked on a limit (docs/operations.md, "runwright limits"): retry_at is when it may go.
        until = _time(event.data.get("retry_at"))
        time = f" until {at(until)}" if until is not None else ""
        key = event.data["parked_on"]
        return f"-- {event.data.get('status')} (waiting: rate_limit on {key}{time})"
    elif event.data.get("retry_at"):
        extra = f": retrying at {event.data['retry_at']}"
    elif event.ends and run.error is not None:
        extra = f": {run.error.code}: {run.error.message}"
    return f"-- {event.data.get('status')}{extra}"


def _line(event: RunEvent, store: PostgresStore) -> str:
    data = event.data
    if event.type is EventType.STEP:
        return step_line(step_of(event))
    if event.type is EventType.EXECUTION:
        how = "taken over" if data.get("takeover") else "started"
        return f"-- execution {data.get('epoch')} {how} by {data.get('owner')}"
    if event.type is EventType.APPROVAL:
        return _approval_line(event)
    if event.type is EventType.CHILD:
        return f"-- {child_event_title(data)} ({data.get('agent')})"
    if event.type is EventType.VERSION:
        by = f" by {data['by']}" if data.get("by") else " on resuming"
        changes = data.get("changes")
        said = "; ".join(str(c) for c in changes) if isinstance(changes, list) else ""
        return f"-- version {data.get('from')} -> {data.get('to')}{by}: {said or 'no change'}"
    return _status_line(event, store.get_run(event.run_id))


def _approval_line(event: RunEvent) -> str:
    data = marked_event(event)["data"]  # an expiry marked, as the console reads it
    question = data.get("kind") == RequestKind.INPUT.value
    asked = data.get("input")
    if data.get("action") == "requested":
        if question:
            words = asked.get("question") if isinstance(asked, dict) else None
            return f"-- question {data.get('approval_id')} asked: {json.dumps(words)}"
        return f"-- approval {data.get('approval_id')} requested for {data.get('tool_name')}"
    words = decision_words(
        kind=data.get("kind"),
        decision=data.get("decision"),
        decided_by=data.get("decided_by"),
        reason=data.get("reason"),
        input=asked,
        arguments=data.get("arguments"),
        answer=data.get("answer"),
        for_run=bool(data.get("for_run")),
        standing_from=data.get("standing_from"),
        expired=bool(data.get("expired")),
        expires_at=_time(data.get("expires_at")),
    )
    return f"-- {'question' if question else 'approval'} {data.get('approval_id')} {words}"


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


class _Text:
    """The text of the model call in flight, printed as it grows."""

    def __init__(self) -> None:
        self.key: tuple[object, ...] | None = None

    def add(self, data: dict[str, object]) -> None:
        key = (data.get("epoch"), data.get("step"), data.get("attempt"))
        if key != self.key:
            self.end()
            _say(f"step {data.get('step')!s:>3}  llm   ", nl=False)
            self.key = key
        _say(str(data.get("text", "")).replace("\n", " "), nl=False)

    def end(self) -> None:
        if self.key is not None:
            click.echo("")
            self.key = None


def follow(
    settings: Settings, run_id: str, timeout: float | None, as_json: bool
) -> RunStatus | None:
    """Print the run's events until it ends (None) or ``timeout`` passes
    (the status it has then)."""
    assert settings.redis_url is not None
    store = open_store(settings)
    feed = Feed(store, connect(settings.redis_url))
    text = _Text()
    ended = False
    try:
        # What follows prints the run's payloads as they are written.
        run = store.get_run(run_id)
        record(store, AuditAction.VIEWED_PAYLOADS, login_name(), run_id=run.id, source=cli_source())
        for event in feed.events(run_id, timeout=timeout):
            if as_json:
                click.echo(json.dumps(event.to_dict(), default=str))
            elif event.type is EventType.TOKEN:
                text.add(event.data)
            else:
                text.end()
                _say(_line(event, store))
            ended = ended or event.ends
        text.end()
        run = store.get_run(run_id)
        if not ended:
            return run.status
        if run.output is not None and not as_json:
            _say(f"output: {clip(json.dumps(run.output), 200)}")
        return None
    finally:
        feed.close()
        store.close()
