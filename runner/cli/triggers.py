"""``runwright schedule ...`` and ``runwright webhook secret``: the triggers
that start runs by themselves (docs/triggers.md).

A schedule's times and what became of its firings are read through the
engine (``engine.schedules``); nothing here computes a time of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import click

from runner.cli.args import parse_payload
from runner.cli.as_json import Document, firing_json, json_option, schedule_json, when
from runner.cli.terminal import Group, say
from store.errors import InvalidInput, RunNotFound

if TYPE_CHECKING:
    from datetime import datetime

    from runner.core.engine.engine import Engine
    from store.models import Firing, Schedule


def _engine() -> Engine:
    from runner.core.engine.engine import Engine

    return Engine.from_env()


def _keys(pairs: tuple[str, ...]) -> dict[str, str]:
    keys = {}
    for item in pairs:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidInput(f"--key {item[:40]!r} is not name=value")
        keys[name] = value
    return keys


def _seconds(raw: str | None, option: str) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise InvalidInput(f"{option} takes a number of seconds, not {raw[:40]!r}") from None


def _times(schedule: Schedule) -> str:
    if schedule.cron is not None:
        return f"cron {schedule.cron!r} ({schedule.timezone})"
    return f"every {schedule.every_seconds:g} s"


def _next(schedule: Schedule) -> str:
    return "paused" if schedule.paused else f"next {schedule.next_at:%Y-%m-%d %H:%M:%S} UTC"


def _firing_line(firing: Firing, status: str | None) -> str:
    line = f"{firing.scheduled_at:%Y-%m-%d %H:%M:%S} UTC  {firing.outcome.value}"
    if firing.run_id is not None:
        line += f"  run {firing.run_id}" + (f" ({status})" if status else "")
    if firing.reason:
        line += f"  {firing.reason}"
    return line


def _unserved(engine: Engine) -> Callable[[str], str | None]:
    """Why nothing fires an agent's schedules, or None if something does: by
    the live workers' records (store/workers.py), since a tick() fires the
    schedules of its worker's agents only; when Redis cannot say, by the
    agents this command loaded (RUNWRIGHT_AGENTS)."""
    from store.workers import serving

    workers = engine.workers()
    if workers is not None:
        live = list(workers.values())
        return lambda agent: (
            None if serving(live, agent) else f"no live worker loads agent {agent!r}"
        )
    loaded = set(engine.deps.registry.names())
    return lambda agent: (
        None if agent in loaded else f"agent {agent!r} is not loaded here (RUNWRIGHT_AGENTS)"
    )


def _served_json(
    schedule: Schedule, why: str | None, upcoming: Iterable[datetime] = ()
) -> Document:
    return {**schedule_json(schedule, upcoming), "served": why is None, "unserved": why}


def _run_status(engine: Engine, firing: Firing) -> str | None:
    if firing.run_id is None:
        return None
    try:
        return engine.get_run(firing.run_id).status.value
    except RunNotFound:
        return "pruned"


@click.group("schedule", cls=Group)
def schedule() -> None:
    """Schedules: runs started by cron or at an interval, fired by tick()."""


@schedule.command("add")
@click.argument("name")
@click.option("--agent", required=True, help="The agent each firing starts.")
@click.option("--cron", default=None, help="A five-field cron expression.")
@click.option("--tz", "timezone", default="UTC", show_default=True, help="Its IANA time zone.")
@click.option("--every", default=None, help="Or: fire every this many seconds.")
@click.option("--payload", default="{}", help="The runs' trigger payload, as JSON.")
@click.option("--thread", default=None, help="Continue this conversation thread.")
@click.option("--key", "keys", multiple=True, help="A trigger key, as name=value (repeatable).")
@click.option(
    "--overlap",
    default="skip",
    show_default=True,
    help="While a firing's run has not ended: skip, buffer_one, allow_all, cancel_other.",
)
@click.option("--catchup-window", default="300", show_default=True, help="Seconds.")
@click.option("--jitter", default="0", show_default=True, help="Seconds of delay, at most.")
@click.option("--paused", is_flag=True, help="Make it paused.")
@json_option
def add(
    name: str,
    agent: str,
    cron: str | None,
    timezone: str,
    every: str | None,
    payload: str,
    thread: str | None,
    keys: tuple[str, ...],
    overlap: str,
    catchup_window: str,
    jitter: str,
    paused: bool,
    as_json: bool,
) -> Document | None:
    """Make the schedule NAME of an agent (--cron EXPR --tz TZ, or --every SECONDS)."""
    engine = _engine()
    made = engine.schedules.create(
        name,
        agent,
        cron=cron,
        every=_seconds(every, "--every"),
        timezone=timezone,
        payload=parse_payload(payload),
        thread=thread,
        keys=_keys(keys),
        overlap=overlap,
        catchup_window=_seconds(catchup_window, "--catchup-window") or 0.0,
        jitter=_seconds(jitter, "--jitter") or 0.0,
        paused=paused,
    )
    if as_json:
        return {"schedule": schedule_json(made)}
    say(f"schedule {made.name}: {made.agent}, {_times(made)}, {_next(made)}")
    return None


@schedule.command("list")
@json_option
def list_(as_json: bool) -> Document | None:
    """List the schedules: their agent, times, next firing and last one, and
    those of an agent no live worker loads (nothing fires them)."""
    engine = _engine()
    found = engine.schedules.list()
    last = {s.name: engine.schedules.firings(s.name, limit=1) for s in found}
    why = _unserved(engine)
    if as_json:
        return {
            "schedules": [
                {
                    **_served_json(s, why(s.agent)),
                    "last_firing": firing_json(last[s.name][0]) if last[s.name] else None,
                }
                for s in found
            ]
        }
    if not found:
        say("no schedules: make one with `runwright schedule add`")
        return None
    for s in found:
        done = last[s.name]
        latest = f"; last {_firing_line(done[0], None)}" if done else ""
        unserved = why(s.agent)
        said = f"  not served: {unserved}" if unserved else ""
        say(f"{s.name}  {s.agent}  {_times(s)}  {s.overlap.value}  {_next(s)}{latest}{said}")
    return None


@schedule.command("show")
@click.argument("name")
@click.option("--count", default=5, show_default=True, type=click.IntRange(1, 100))
@click.option("--firings", "shown", default=10, show_default=True, type=click.IntRange(1, 1000))
@json_option
def show(name: str, count: int, shown: int, as_json: bool) -> Document | None:
    """The schedule NAME: its next firings and its last ones, with their runs."""
    engine = _engine()
    found = engine.schedules.get(name)
    upcoming = [] if found.paused else engine.schedules.next_firings(name, count=count)
    firings = engine.schedules.firings(name, limit=shown)
    statuses = [_run_status(engine, f) for f in firings]
    unserved = _unserved(engine)(found.agent)
    if as_json:
        return {
            "schedule": _served_json(found, unserved, upcoming),
            "firings": [firing_json(f, st) for f, st in zip(firings, statuses, strict=True)],
        }
    say(f"schedule {found.name}  {_next(found)}")
    say(f"agent      {found.agent}")
    say(f"served     {'yes' if unserved is None else f'no: {unserved}'}")
    say(f"times      {_times(found)}, jitter {found.jitter_seconds:g} s")
    say(f"overlap    {found.overlap.value}, catch-up window {found.catchup_window_seconds:g} s")
    say(f"payload    {json.dumps(found.payload, ensure_ascii=False)[:200]}")
    if found.thread:
        say(f"thread     {found.thread}")
    for at in upcoming:
        say(f"-- next    {when(at)}")
    for firing, status in zip(firings, statuses, strict=True):
        say(f"-- fired   {_firing_line(firing, status)}")
    return None


def _changed(verb: str, done: Schedule, as_json: bool) -> Document | None:
    if as_json:
        return {"schedule": schedule_json(done)}
    say(f"schedule {done.name} {verb}; {_next(done)}")
    return None


@schedule.command("pause")
@click.argument("name")
@json_option
def pause(name: str, as_json: bool) -> Document | None:
    """Stop firing NAME (its times pass unrecorded)."""
    return _changed("paused", _engine().schedules.pause(name), as_json)


@schedule.command("resume")
@click.argument("name")
@json_option
def resume(name: str, as_json: bool) -> Document | None:
    """Fire NAME again, from its next time after now."""
    return _changed("resumed", _engine().schedules.resume(name), as_json)


@schedule.command("delete")
@click.argument("name")
@json_option
def delete(name: str, as_json: bool) -> Document | None:
    """Delete NAME and its firings' records (the runs it started stay)."""
    _engine().schedules.delete(name)
    if as_json:
        return {"deleted": name}
    say(f"schedule {name} deleted")
    return None


@schedule.command("trigger")
@click.argument("name")
@json_option
def trigger(name: str, as_json: bool) -> Document | None:
    """Start NAME's run now, outside its times and whatever its overlap."""
    firing = _engine().schedules.trigger(name)
    if as_json:
        return {"firing": firing_json(firing)}
    say(f"schedule {name} triggered: run {firing.run_id}")
    return None


@click.group("webhook", cls=Group)
def webhook() -> None:
    """Webhooks that start runs (runner.webhooks)."""


@webhook.command("secret")
def secret() -> None:
    """Print a new whsec_ secret, for a sender and its route (or a notifier)."""
    from runner.webhooks import new_secret

    click.echo(new_secret())
