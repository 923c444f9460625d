"""``runwright watch``: a run's events as they are committed, from the feed
(runner/events/feed.py), and a streaming model's text as it is generated."""

from __future__ import annotations

import json

import click

from runner.children import child_event_title
from runner.cli.step_lines import clip, step_line
from runner.cli.terminal import inert
from runner.events.feed import Feed
from runner.settings import Settings, open_store
from store.events import EventType, RunEvent, step_of
from store.leases import connect
from store.models import Run, RunStatus
from store.postgres import PostgresStore


def _say(text: str, *, nl: bool = True) -> None:
    click.echo(inert(text), nl=nl)


def _status_line(event: RunEvent, run: Run) -> str:
    extra = ""
    if event.status is RunStatus.WAITING and run.waiting is not None:
        extra = f": approval {run.waiting.approval_id} for {run.waiting.tool_name}"
    elif event.data.get("retry_at"):
        extra = f": retrying at {event.data['retry_at']}"
    elif event.settles and run.error is not None:
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
        if data.get("action") == "requested":
            return f"-- approval {data.get('approval_id')} requested for {data.get('tool_name')}"
        reason = f": {data['reason']}" if data.get("reason") else ""
        return f"-- approval {data.get('approval_id')} {data.get('decision')}{reason}"
    if event.type is EventType.CHILD:
        return f"-- {child_event_title(data)} ({data.get('agent')})"
    return _status_line(event, store.get_run(event.run_id))


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
    """Print the run's events until it settles (None) or ``timeout`` passes
    (the status it has then)."""
    assert settings.redis_url is not None
    store = open_store(settings)
    feed = Feed(store, connect(settings.redis_url))
    text = _Text()
    settled = False
    try:
        for event in feed.events(run_id, timeout=timeout):
            if as_json:
                click.echo(json.dumps(event.to_dict(), default=str))
            elif event.type is EventType.TOKEN:
                text.add(event.data)
            else:
                text.end()
                _say(_line(event, store))
            settled = settled or event.settles
        text.end()
        run = store.get_run(run_id)
        if not settled:
            return run.status
        if run.output is not None and not as_json:
            _say(f"output: {clip(json.dumps(run.output), 200)}")
        return None
    finally:
        feed.close()
        store.close()
