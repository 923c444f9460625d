"""The runs list: filters, counts per status, one row per run, and paging."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from runner.console.render import attention, e, parked, status_badge, url, when
from runner.core.costs import listed_cost, money
from store.models import Run, RunStatus


def runs_body(
    runs: Sequence[Run],
    counts: Mapping[RunStatus, int],
    *,
    base: str,
    filters: Mapping[str, str],
    more: bool,
    note: str | None,
) -> str:
    """``filters``: the query as given (status, agent, thread, since, until);
    ``more``: a page of older runs follows."""
    parts = ["<h1>Runs</h1>"]
    if note:
        parts.append(f'<p class="note">{e(note)}</p>')
    parts.append(_filters(counts, base=base, filters=filters))
    parts.append(_counts(counts, base=base, filters=filters))
    if not runs:
        parts.append("<p>No runs match.</p>")
        return "\n".join(parts)
    parts.append(_table(runs, base=base))
    if more:
        older = {**filters, "before": runs[-1].id}
        parts.append(f'<p><a rel="next" href="{e(url(base, "/", older))}">Older runs</a></p>')
    return "\n".join(parts)


def _filters(counts: Mapping[RunStatus, int], *, base: str, filters: Mapping[str, str]) -> str:
    chosen = filters.get("status", "")
    options = ['<option value="">any</option>']
    for status in RunStatus:
        selected = " selected" if status.value == chosen else ""
        options.append(
            f'<option value="{e(status.value)}"{selected}>'
            f"{e(status.value)} ({counts.get(status, 0)})</option>"
        )

    def field(name: str, label: str, kind: str = "text") -> str:
        value = e(filters.get(name, ""))
        return f'<label>{e(label)}<input type="{kind}" name="{name}" value="{value}"></label>'

    return (
        f'<form class="filters" method="get" action="{e(base)}/">'
        f'<label>Status<select name="status">{"".join(options)}</select></label>'
        + field("agent", "Agent")
        + field("thread", "Thread")
        + field("since", "Created since (UTC)", "datetime-local")
        + field("until", "Created before (UTC)", "datetime-local")
        + '<label><input type="checkbox" name="attention" value="1"'
        + (" checked" if filters.get("attention") else "")
        + "> Needs attention</label>"
        + "<button>Filter</button></form>"
    )


def _counts(counts: Mapping[RunStatus, int], *, base: str, filters: Mapping[str, str]) -> str:
    keep = {k: v for k, v in filters.items() if k in ("agent",)}
    links = [
        f'<a href="{e(url(base, "/", {**keep, "status": status.value}))}">'
        f"{e(status.value)} {counts.get(status, 0)}</a>"
        for status in RunStatus
    ]
    total = sum(counts.values())
    # Spaces between them: read as text (copied, a screen reader), they are words.
    return f'<p class="counts">{" ".join(links)} <span>all {total}</span></p>'


def _table(runs: Sequence[Run], *, base: str) -> str:
    rows = []
    for run in runs:
        rows.append(
            f'<tr><td><a href="{e(base)}/runs/{e(run.id)}">{e(run.id)}</a></td>'
            f"<td>{e(run.agent)}</td><td>{status_badge(run.status.value)}{parked(run)}{attention(run)}</td>"
            f"<td>{e(run.thread or '')}</td><td>{when(run.created_at)}</td>"
            f'<td class="num">{run.steps_used}</td>'
            f'<td class="num">{run.usage.input_tokens + run.usage.output_tokens}</td>'
            f'<td class="num">{e(listed_cost(run.cost_usd, run.cost_unpriced).words(money))}</td>'
            f"<td>{e(run.error.code) if run.error else ''}</td></tr>"
        )
    return (
        "<table><tr><th>Run</th><th>Agent</th><th>Status</th><th>Thread</th><th>Created</th>"
        '<th class="num">Steps</th><th class="num">Tokens</th><th class="num">Cost</th>'
        f"<th>Error</th></tr>{''.join(rows)}</table>"
    )
