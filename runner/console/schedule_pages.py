"""The schedules pages: each schedule's agent, times, overlap, whether it is
paused, its next firing, and what became of its last firings, linked to their
runs (docs/triggers.md). Every value is escaped: a schedule's payload and a
firing's reason are text like any other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from runner.console.render import e, json_block, when
from store.models import Firing, Run, Schedule


def _times(schedule: Schedule) -> str:
    if schedule.cron is not None:
        return f"<code>{e(schedule.cron)}</code> in {e(schedule.timezone)}"
    return f"every {e(f'{schedule.every_seconds:g}')} s"


def _next(schedule: Schedule) -> str:
    if schedule.paused:
        return '<span class="st st-interrupted">paused</span>'
    return when(schedule.next_at)


def _outcome(firing: Firing, runs: Mapping[str, Run], base: str) -> str:
    cell = f'<span class="st">{e(firing.outcome.value)}</span>'
    if firing.run_id is not None:
        run = runs.get(firing.run_id)
        status = (
            f' <span class="st st-{e(run.status.value)}">{e(run.status.value)}</span>'
            if run is not None
            else ' <span class="meta">(pruned)</span>'
        )
        cell += f' <a href="{e(base)}/runs/{e(firing.run_id)}">{e(firing.run_id)}</a>{status}'
    if firing.reason:
        cell += f' <span class="meta">{e(firing.reason)}</span>'
    return cell


def schedules_body(
    schedules: Sequence[Schedule],
    last: Mapping[str, Sequence[Firing]],
    runs: Mapping[str, Run],
    *,
    base: str,
) -> str:
    head = "<h1>Schedules</h1>"
    if not schedules:
        return head + (
            "<p>No schedules. Make one with <code>engine.schedules.create(...)</code> or "
            "<code>runwright schedule add</code>.</p>"
        )
    rows = []
    for schedule in schedules:
        firings = last.get(schedule.name, ())
        latest = _outcome(firings[0], runs, base) if firings else "—"
        rows.append(
            f'<tr><td><a href="{e(base)}/schedules/{e(schedule.name)}">{e(schedule.name)}</a></td>'
            f"<td>{e(schedule.agent)}</td><td>{_times(schedule)}</td>"
            f"<td>{e(schedule.overlap.value)}</td><td>{_next(schedule)}</td><td>{latest}</td></tr>"
        )
    return (
        head + '<table class="schedules"><thead><tr><th>schedule</th><th>agent</th>'
        "<th>times</th><th>overlap</th><th>next firing</th><th>last firing</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def schedule_body(
    schedule: Schedule,
    upcoming: Sequence[datetime],
    firings: Sequence[Firing],
    runs: Mapping[str, Run],
    *,
    base: str,
) -> str:
    facts = [
        ("agent", e(schedule.agent)),
        ("times", _times(schedule)),
        ("overlap", e(schedule.overlap.value)),
        ("catch-up window", f"{schedule.catchup_window_seconds:g} s"),
        ("jitter", f"{schedule.jitter_seconds:g} s"),
        ("next firing", _next(schedule)),
    ]
    if schedule.thread:
        facts.append(("thread", e(schedule.thread)))
    if schedule.keys:
        facts.append(("keys", ", ".join(f"{e(k)}={e(v)}" for k, v in schedule.keys.items())))
    parts = [
        f"<h1>Schedule {e(schedule.name)}</h1>",
        '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>",
        "<h2>Payload</h2>" + json_block(schedule.payload, "payload"),
    ]
    if upcoming:
        items = "".join(f"<li>{when(at)}</li>" for at in upcoming)
        parts.append(f'<h2>Next firings</h2><ol class="upcoming">{items}</ol>')
    rows = "".join(
        f"<tr><td>{when(f.scheduled_at)}</td><td>{when(f.fired_at)}</td>"
        f"<td>{_outcome(f, runs, base)}</td></tr>"
        for f in firings
    )
    parts.append(
        "<h2>Last firings</h2>"
        + (
            '<table class="firings"><thead><tr><th>scheduled</th><th>recorded</th>'
            f"<th>what became of it</th></tr></thead><tbody>{rows}</tbody></table>"
            if firings
            else "<p>None yet.</p>"
        )
    )
    return "\n".join(parts)
