"""The console's evaluations (docs/console.md, "Evaluations"): the latest
evaluations with a form to compare two, an evaluation's summary and cases,
and two evaluations of one dataset version compared case by case
(runner/evals/compare.py), in HTML and as the JSON API answers them.

A case's payload and its replay report (the outputs, where the replay
parted from the recording, the effects that would have run) are the
customer's: the views mask them before they get here for a person who may
not see them (runner/console/masking.py). Verdicts, numbers, ids and names
stay. Every value is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from runner.console.render import e, facts, json_block, status_badge, when
from runner.core.costs import money
from runner.evals.compare import Comparison, Row
from runner.evals.evaluation import info_json, summaries
from runner.evals.summary import ScorerSummary, summarize
from store.models import Evaluation, EvaluationCase, EvaluationCaseStatus, EvaluationInfo

# A case's payload by its position in the dataset; None: the dataset's
# version was deleted (its evaluations stay), so there is none to show.
Payloads = Mapping[int, Any] | None


def case_payload(case: Any) -> Any:
    """The trigger payload of a dataset case's JSON (``Case.to_json``,
    runner/evals/recording.py)."""
    trigger = case.get("trigger") if isinstance(case, Mapping) else None
    return trigger.get("payload") if isinstance(trigger, Mapping) else None


# ------------------------------------------------------------ the list


def evaluations_body(found: Sequence[EvaluationInfo], *, base: str, dataset: str) -> str:
    parts = ["<h1>Evaluations</h1>", _dataset_filter(base, dataset)]
    if not found:
        parts.append(
            "<p>No evaluations. Run one with "
            "<code>runwright eval DATASET --agent MODULE:NAME</code>.</p>"
        )
        return "\n".join(parts)
    parts.append(_compare_form(found, base))
    rows = []
    for info in found:
        against = ""
        if info.baseline:
            against = (
                f'<a class="against" href="{e(comparison_path(base, info.id, info.baseline))}">'
                f"compare with {e(info.baseline)}</a>"
            )
        rows.append(
            f'<tr id="e-{e(info.id)}"><td>{_link(base, info.id)}</td>'
            f"<td>{e(info.dataset)}@{e(info.dataset_version)}</td>"
            f"<td>{e(info.agent)}</td><td>{e(info.label)}</td>"
            f'<td class="num">{info.done}/{info.case_count}</td>'
            f"<td>{status_badge(info.status.value)}</td>"
            f"<td>{_rates(summaries(Evaluation(info, [])))}</td>"
            f"<td>{when(info.created_at)}</td><td>{against}</td></tr>"
        )
    parts.append(
        '<table id="evaluations"><thead><tr><th>Evaluation</th><th>Dataset</th>'
        '<th>Agent</th><th>Label</th><th class="num">Cases</th><th>Status</th>'
        "<th>Pass rates</th><th>Created</th><th>Baseline</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    return "\n".join(parts)


def _dataset_filter(base: str, dataset: str) -> str:
    return (
        f'<form class="filters" method="get" action="{e(base)}/evaluations">'
        f'<label>Dataset<input type="text" name="dataset" value="{e(dataset)}"></label>'
        "<button>Filter</button></form>"
    )


def _compare_form(found: Sequence[EvaluationInfo], base: str) -> str:
    """Two of the listed evaluations, the first against the second (its
    baseline); the list's page sends the choice on to their comparison."""

    def options(chosen: int) -> str:
        return "".join(
            f'<option value="{e(info.id)}"{" selected" if n == chosen else ""}>'
            f"{e(info.id)} ({e(info.label)}, {e(info.dataset)}@{e(info.dataset_version)})"
            "</option>"
            for n, info in enumerate(found)
        )

    return (
        f'<form class="filters" id="compare" method="get" action="{e(base)}/evaluations">'
        f'<label>Compare<select name="evaluation">{options(0)}</select></label>'
        f'<label>against<select name="against">{options(min(1, len(found) - 1))}</select>'
        "</label><button>Compare</button></form>"
    )


def _rates(rows: Sequence[ScorerSummary]) -> str:
    if not rows:
        return "—"
    return "<br>".join(f"{e(s.name)} {_rate(s)}" for s in rows)


# ------------------------------------------------------- an evaluation


def evaluation_body(evaluation: Evaluation, payloads: Payloads, *, base: str) -> str:
    """``payloads``: masked already for a person who may not see them, as
    are the cases' reports and what their scorers said."""
    info = evaluation.info
    cases = sorted(evaluation.cases, key=lambda c: c.position)
    names = scorer_names(cases)
    parts = [f"<h1>Evaluation {e(info.id)}</h1>", _facts(info, base)]
    parts.append("<h2>Summary</h2>" + _summary(evaluation, cases))
    parts.append(f"<h2>Cases</h2>{_gone(payloads)}")
    head = "".join(f"<th>{e(name)}</th>" for name in names)
    rows = []
    for case in cases:
        state = "" if case.status is EvaluationCaseStatus.DONE else status_badge(case.status.value)
        marks = "".join(_mark((case.scores or {}).get(name)) for name in names)
        rows.append(
            f'<tr id="case-{case.position}"><td class="num">{case.position} {state}</td>'
            f"{_payload_cell(payloads, case.position)}{marks}"
            f'<td class="num">{e(money(case.cost_usd))}</td>'
            f'<td class="num">{"—" if case.tokens is None else case.tokens}</td>'
            f'<td class="num">{e(duration(case.duration_ms))}</td>'
            f"<td>{_report(case.result)}</td></tr>"
        )
    parts.append(
        f'<table id="cases"><thead><tr><th class="num">Case</th>{_payload_head(payloads)}'
        f'{head}<th class="num">Cost</th><th class="num">Tokens</th>'
        f'<th class="num">Duration</th><th>Replay</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    return "\n".join(parts)


def _facts(info: EvaluationInfo, base: str) -> str:
    options = info.options or {}
    rows = [
        ("dataset", f"{e(info.dataset)}@{e(info.dataset_version)}"),
        ("agent", e(info.agent)),
        ("label", e(info.label)),
        ("status", status_badge(info.status.value)),
        ("cases", f"{info.done}/{info.case_count} done"),
        ("created", when(info.created_at)),
        ("finished", when(info.finished_at)),
    ]
    if info.created_by:
        rows.append(("by", e(info.created_by)))
    if options.get("mode"):
        rows.append(("mode", e(options["mode"])))
    scorers = options.get("scorers")
    if isinstance(scorers, list) and scorers:
        rows.append(("scorers", e(", ".join(str(s) for s in scorers))))
    if info.baseline:
        rows.append(
            (
                "baseline",
                f"{_link(base, info.baseline)} "
                f'(<a class="against" href="{e(comparison_path(base, info.id, info.baseline))}">'
                "compare case by case</a>)",
            )
        )
    elif options.get("against"):
        rows.append(("baseline", e(options["against"])))
    return facts(rows)


def _summary(evaluation: Evaluation, cases: Sequence[EvaluationCase]) -> str:
    """The saved summary; while it runs, the summary of the cases done so
    far (the difference against its baseline comes when it ends)."""
    saved = evaluation.info.summary
    if saved is None:
        done = [c.scores for c in cases if c.status is EvaluationCaseStatus.DONE]
        note = (
            f'<p class="meta">So far: the {len(done)} cases done. The difference against '
            "the baseline is written when the evaluation ends.</p>"
        )
        return note + summary_table(summarize(done))
    totals = (
        f'<p class="meta">cost {e(money(_number(saved.get("cost_usd"))))}, '
        f"{e(saved.get('tokens', 0))} tokens, "
        f"{e(saved.get('errors', 0))} cases stopped by an error</p>"
    )
    return summary_table(summaries(evaluation)) + totals


def summary_table(rows: Sequence[ScorerSummary]) -> str:
    """Per scorer: its pass rate and mean, the baseline's pass rate, and the
    difference with its 95% interval (marked when the interval leaves 0 out)."""
    if not rows:
        return "<p>No case was scored yet.</p>"
    body = "".join(
        f'<tr id="scorer-{e(s.name)}"><td>{e(s.name)}</td>'
        f'<td class="num">{_rate(s)}</td>'
        f'<td class="num">{"—" if s.mean is None else f"{s.mean:.2f}"}</td>'
        f'<td class="num">{_percent(s.baseline_pass_rate)}</td>'
        f'<td class="num">{difference(s)}</td>'
        f'<td class="num">{s.paired or "—"}</td></tr>'
        for s in rows
    )
    return (
        '<table class="summary"><thead><tr><th>Scorer</th><th class="num">Pass rate</th>'
        '<th class="num">Mean</th><th class="num">Baseline pass rate</th>'
        '<th class="num">Difference (95% interval)</th><th class="num">Paired cases</th>'
        f"</tr></thead><tbody>{body}</tbody></table>"
    )


def difference(s: ScorerSummary) -> str:
    """``+4.0% [-2.1%, +10.1%]``, as ``runwright evals`` prints it
    (runner/evals/summary.py); in a ``better`` or ``worse`` span when the
    interval lies on one side of 0."""
    if s.difference is None:
        return "—"
    if s.low is None or s.high is None:
        return e(f"{s.difference:+.1%}")
    said = e(f"{s.difference:+.1%} [{s.low:+.1%}, {s.high:+.1%}]")
    if s.low > 0:
        return f'<span class="better">{said}</span>'
    if s.high < 0:
        return f'<span class="worse">{said}</span>'
    return said


def _rate(s: ScorerSummary) -> str:
    if s.pass_rate is None:
        return "—"
    return e(f"{s.passed}/{s.scored} ({s.pass_rate:.0%})")


def _percent(value: float | None) -> str:
    return "—" if value is None else e(f"{value:.0%}")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def duration(ms: float | None) -> str:
    if ms is None:
        return "—"
    return f"{ms:.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def scorer_names(cases: Sequence[EvaluationCase]) -> list[str]:
    """The scorers that scored any of ``cases``, in the order they first appear."""
    names: list[str] = []
    for case in cases:
        names += [n for n in case.scores or {} if n not in names]
    return names


def _mark(score: Any) -> str:
    """``pass``, ``FAIL`` or ``-`` (the scorer did not apply), with what
    the scorer said as the cell's title."""
    detail = score.get("detail") if isinstance(score, Mapping) else None
    title = f' title="{e(detail)}"' if detail is not None else ""
    passed = score.get("passed") if isinstance(score, Mapping) else None
    if passed is None:
        return f'<td class="mark"{title}>-</td>'
    if passed:
        return f'<td class="mark pass"{title}>pass</td>'
    return f'<td class="mark fail"{title}>FAIL</td>'


def _gone(payloads: Payloads) -> str:
    if payloads is not None:
        return ""
    return '<p class="meta">The dataset\'s version was deleted: its payloads are gone.</p>'


def _payload_head(payloads: Payloads) -> str:
    return "" if payloads is None else "<th>Payload</th>"


def _payload_cell(payloads: Payloads, position: int) -> str:
    if payloads is None:
        return ""
    return f'<td class="payload">{json_block(payloads.get(position), "payload")}</td>'


def _report(result: Any) -> str:
    """A case's replay report, folded: the replay's output beside the
    recorded one, where it parted from the recording, what would have run;
    or the error that stopped it."""
    if not isinstance(result, Mapping):
        return "—"
    if "error" in result:
        return f'<div class="problem">{json_block(result["error"], "error")}</div>'
    replay, original = _object(result.get("replay")), _object(result.get("original"))
    parts = [
        "<h3>Output</h3>" + json_block(replay.get("output"), "output"),
        "<h3>Recorded output</h3>" + json_block(original.get("output"), "recorded output"),
    ]
    if result.get("divergence") is not None:
        parts.append(
            "<h3>Parted from the recording</h3>"
            + json_block(result["divergence"], "where it parted")
        )
    if result.get("would_have_run"):
        parts.append("<h3>Would have run</h3>" + json_block(result["would_have_run"], "calls"))
    return f'<details class="report"><summary>report</summary>{"".join(parts)}</details>'


def _output(result: Any) -> Any:
    """The replay's output of a case's report (None: there is none)."""
    if not isinstance(result, Mapping):
        return None
    return _object(result.get("replay")).get("output")


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


# --------------------------------------------------------- a comparison


def comparison_body(comparison: Comparison, payloads: Payloads, *, base: str) -> str:
    """The first evaluation against the second, its baseline: the summary,
    then the cases, those whose verdicts changed first (each scorer's cell
    marked ``better`` or ``worse``), the scores side by side."""
    first, second = comparison.first.info, comparison.second.info
    parts = [
        f"<h1>Evaluation {e(first.id)} against {e(second.id)}</h1>",
        facts(
            [
                ("dataset", f"{e(first.dataset)}@{e(first.dataset_version)}"),
                ("evaluation", f"{_link(base, first.id)} ({e(first.agent)} as {e(first.label)})"),
                ("against", f"{_link(base, second.id)} ({e(second.agent)} as {e(second.label)})"),
            ]
        ),
        "<h2>Summary</h2>" + summary_table(comparison.summary),
    ]
    changed = [r for r in comparison.rows if r.changed]
    same = [r for r in comparison.rows if not r.changed]
    parts.append(
        f'<h2>Cases</h2><p id="changed-count">{len(changed)} of {len(comparison.rows)} cases '
        f"changed verdicts.</p>{_gone(payloads)}"
    )
    outputs_first = {c.position: _output(c.result) for c in comparison.first.cases}
    outputs_second = {c.position: _output(c.result) for c in comparison.second.cases}
    names = comparison.scorers
    head = "".join(f'<th colspan="2">{e(name)}</th>' for name in names)
    # Each scorer's two columns, by the versions' labels (by the ids if both have one label).
    one, two = (first.label, second.label) if first.label != second.label else (first.id, second.id)
    sides = "".join(f"<th>{e(one)}</th><th>{e(two)}</th>" for _ in names)
    rows = []
    for row in [*changed, *same]:
        cells = "".join(_side_by_side(row, name) for name in names)
        rows.append(
            f'<tr id="case-{row.position}"{_row_class(row)}><td class="num">{row.position}</td>'
            f"{_payload_cell(payloads, row.position)}{cells}<td>{_change(row)}</td>"
            f"<td>{json_block(outputs_first.get(row.position), 'output')}</td>"
            f"<td>{json_block(outputs_second.get(row.position), 'output')}</td></tr>"
        )
    payload_head = "" if payloads is None else '<th rowspan="2">Payload</th>'
    parts.append(
        f'<table id="comparison"><thead><tr><th class="num" rowspan="2">Case</th>{payload_head}'
        f'{head}<th rowspan="2">Change</th><th rowspan="2">Output of {e(first.id)}</th>'
        f'<th rowspan="2">Output of {e(second.id)}</th></tr><tr>{sides}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    return "\n".join(parts)


def _row_class(row: Row) -> str:
    if row.better and row.worse:
        return ' class="changed mixed"'
    if row.better:
        return ' class="changed better"'
    if row.worse:
        return ' class="changed worse"'
    return ""


def _side_by_side(row: Row, name: str) -> str:
    here, there = _mark(row.first.get(name)), _mark(row.second.get(name))
    if name in row.better:
        here = here.replace('class="mark', 'class="mark better', 1)
    elif name in row.worse:
        here = here.replace('class="mark', 'class="mark worse', 1)
    return here + there


def _change(row: Row) -> str:
    said = []
    if row.better:
        said.append(f'<span class="better">better: {e(", ".join(row.better))}</span>')
    if row.worse:
        said.append(f'<span class="worse">worse: {e(", ".join(row.worse))}</span>')
    return " ".join(said) or '<span class="meta">same</span>'


# ------------------------------------------------------------- links


def evaluation_path(base: str, evaluation_id: str) -> str:
    return f"{base}/evaluations/{quote(evaluation_id, safe='')}"


def comparison_path(base: str, evaluation_id: str, against: str) -> str:
    return f"{evaluation_path(base, evaluation_id)}/compare/{quote(against, safe='')}"


def _link(base: str, evaluation_id: str) -> str:
    return f'<a href="{e(evaluation_path(base, evaluation_id))}">{e(evaluation_id)}</a>'


# -------------------------------------------------------------- JSON


def evaluation_json(evaluation: Evaluation, payloads: Payloads) -> dict[str, Any]:
    """An evaluation with its cases (masked already, as for the page)."""
    return {
        **info_json(evaluation.info),
        "cases": [
            {
                "position": c.position,
                "status": c.status.value,
                "attempts": c.attempts,
                "payload": None if payloads is None else payloads.get(c.position),
                "scores": c.scores,
                "cost_usd": c.cost_usd,
                "tokens": c.tokens,
                "duration_ms": c.duration_ms,
                "result": c.result,
            }
            for c in sorted(evaluation.cases, key=lambda c: c.position)
        ],
    }


def comparison_json(comparison: Comparison, payloads: Payloads) -> dict[str, Any]:
    """The comparison (``Comparison.to_json``), each row with its case's
    payload and the two replays' outputs."""
    data = comparison.to_json()
    outputs = [
        {c.position: _output(c.result) for c in side.cases}
        for side in (comparison.first, comparison.second)
    ]
    for row in data["rows"]:
        position = row["position"]
        row["payload"] = None if payloads is None else payloads.get(position)
        row["outputs"] = {"first": outputs[0].get(position), "second": outputs[1].get(position)}
    return data
