"""``runwright eval DATASET``: every case of a dataset replayed through an
agent definition on worker processes, scored, and saved; ``runwright evals``
lists, shows, compares and resumes evaluations (docs/replay-and-evals.md).

The tables hold the cases' payloads (clipped): printing them is a read of
payloads, in the audit log.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from runner.cli.args import Command
from runner.cli.as_json import dumps
from runner.cli.audit import cli_source, login_name
from runner.cli.terminal import Group, fail, say

if TYPE_CHECKING:
    from runner.core.engine.engine import Engine
    from store.models import Evaluation

# How much of a case's payload a row of the table shows.
PAYLOAD_CHARS = 40


def _engine() -> Engine:
    from runner.cli.replay import _engine as replay_engine

    return replay_engine()


def _progress(quiet: bool = False) -> Any:
    """A progress bar on stderr (none with ``quiet``: ``--json`` prints one document)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=quiet,
        transient=False,
    )


def _baseline(engine: Engine, against: str | None, dataset: str, version: str | None) -> str | None:
    """``--against``: "runs", an evaluation's id, or a label (the newest
    evaluation of this dataset with that label)."""
    from runner.evals.evaluation import AGAINST_RUNS

    if against is None or against == AGAINST_RUNS:
        return against
    store = engine.deps.store
    found = store.evaluations(dataset=dataset, limit=1000)
    for info in found:
        if info.id == against:
            return info.id
    labelled = [
        i for i in found if i.label == against and (version is None or i.dataset_version == version)
    ]
    if not labelled:
        fail(f"--against {against!r} is no evaluation of {dataset!r}, no label of one, nor 'runs'")
    return labelled[0].id


@click.command("eval", cls=Command)
@click.argument("dataset")
@click.option(
    "--agent",
    "agent_spec",
    required=True,
    metavar="MODULE:NAME",
    help="The definition to evaluate.",
)
@click.option(
    "--dataset-version", default=None, help="The dataset's version (default: its newest)."
)
@click.option(
    "--label", default=None, help="What to call the version under test (default: its fingerprint)."
)
@click.option(
    "--against",
    default=None,
    metavar="EVALUATION|LABEL|runs",
    help="Compare with an earlier evaluation (its id or label) or the recorded runs.",
)
@click.option(
    "--live", "mode", flag_value="live", default=True, help="Call the model (the default)."
)
@click.option("--recorded", "mode", flag_value="recorded", help="Reply as the recorded model did.")
@click.option("--model", default=None, help="A litellm model string in place of the agent's.")
@click.option(
    "--tools",
    type=click.Choice(["live", "recorded"]),
    default=None,
    help="Read-only tools: run again or recorded.",
)
@click.option(
    "--approvals", type=click.Choice(["approve", "deny"]), default="approve", show_default=True
)
@click.option(
    "--scorer", "scorers", multiple=True, help="A built-in scorer or MODULE:NAME (repeatable)."
)
@click.option(
    "--workers",
    default=2,
    show_default=True,
    type=click.IntRange(0, 64),
    help="Worker processes (0: here).",
)
@click.option("--json", "as_json", is_flag=True, help="The evaluation as one JSON document.")
def eval_command(
    dataset: str,
    agent_spec: str,
    dataset_version: str | None,
    label: str | None,
    against: str | None,
    mode: str,
    model: str | None,
    tools: str | None,
    approvals: str,
    scorers: tuple[str, ...],
    workers: int,
    as_json: bool,
) -> None:
    """Replay every case of DATASET through --agent on worker processes,
    score each case, and save and print the evaluation."""
    from runner.evals.evaluation import evaluate
    from runner.evals.scorers import DEFAULT_SCORERS

    engine = _engine()
    try:
        baseline = _baseline(engine, against, dataset, dataset_version)
        with _progress(as_json) as bar:
            task = bar.add_task(f"eval {dataset}", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            evaluation = evaluate(
                engine,
                dataset,
                agent=agent_spec,
                version=dataset_version,
                label=label,
                against=baseline,
                mode=mode,
                tools=tools,
                model=model,
                approvals=approvals,
                scorers=scorers or DEFAULT_SCORERS,
                workers=workers,
                created_by=login_name(),
                progress=progress,
            )
        _print(engine, evaluation, as_json, cases=True)
    finally:
        engine.close()


def _print(engine: Engine, evaluation: Evaluation, as_json: bool, *, cases: bool) -> None:
    from runner.core.audit import AuditAction

    if cases:
        engine.audit(
            AuditAction.VIEWED_PAYLOADS,
            by=login_name(),
            source=cli_source(),
            detail={"via": "eval", "evaluation": evaluation.info.id},
        )
    if as_json:
        click.echo(dumps(evaluation_json(evaluation, cases=cases)))
        return
    say(render(engine, evaluation, cases=cases))


def evaluation_json(evaluation: Evaluation, *, cases: bool = True) -> dict[str, Any]:
    from runner.evals.evaluation import info_json

    data = info_json(evaluation.info)
    if cases:
        data["cases"] = [
            {
                "position": c.position,
                "status": c.status.value,
                "attempts": c.attempts,
                "scores": c.scores,
                "cost_usd": c.cost_usd,
                "tokens": c.tokens,
                "duration_ms": c.duration_ms,
                "result": c.result,
            }
            for c in evaluation.cases
        ]
    return data


def render(engine: Engine, evaluation: Evaluation, *, cases: bool) -> str:
    from runner.evals.evaluation import summaries
    from runner.evals.summary import render as render_summary

    info = evaluation.info
    lines = [
        f"evaluation {info.id}: {info.agent} as {info.label} on {info.dataset} "
        f"(version {info.dataset_version}), {info.done}/{info.case_count} cases, "
        f"{info.status.value}"
    ]
    if info.baseline:
        lines.append(f"against {info.baseline}")
    if cases:
        names = list((evaluation.cases[0].scores or {}).keys()) if evaluation.cases else []
        data = engine.deps.store.dataset(info.dataset, info.dataset_version).cases
        lines.append(f"{'case':>5}  {'payload':<{PAYLOAD_CHARS}}  " + "  ".join(names))
        for c in sorted(evaluation.cases, key=lambda c: c.position):
            payload = json.dumps(
                (data[c.position].get("trigger") or {}).get("payload"), default=str
            )
            if len(payload) > PAYLOAD_CHARS:
                payload = payload[: PAYLOAD_CHARS - 1] + "…"
            marks = [_mark((c.scores or {}).get(n)).center(len(n)) for n in names]
            lines.append(f"{c.position:>5}  {payload:<{PAYLOAD_CHARS}}  " + "  ".join(marks))
    lines.append(render_summary(summaries(evaluation)))
    summary = info.summary or {}
    if summary:
        lines.append(
            f"cost ${summary.get('cost_usd', 0):.6f}, {summary.get('tokens', 0)} tokens, "
            f"{summary.get('errors', 0)} cases stopped by an error"
        )
    return "\n".join(lines)


def _mark(score: dict[str, Any] | None) -> str:
    if not score or score.get("passed") is None:
        return "-"
    return "pass" if score["passed"] else "FAIL"


@click.group("evals", cls=Group)
def evals() -> None:
    """Evaluations: list, show, compare, resume."""


@evals.command("list")
@click.option("--dataset", default=None, help="Only this dataset's.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True)
def list_evaluations(dataset: str | None, limit: int, as_json: bool) -> None:
    """The newest evaluations."""
    engine = _engine()
    try:
        found = engine.deps.store.evaluations(dataset=dataset, limit=limit)
    finally:
        engine.close()
    if as_json:
        from runner.evals.evaluation import info_json

        for info in found:
            click.echo(dumps(info_json(info)))
        return
    for info in found:
        say(
            f"{info.id}  {info.dataset}@{info.dataset_version}  {info.agent} as {info.label}  "
            f"{info.done}/{info.case_count}  {info.status.value}"
        )


@evals.command("show")
@click.argument("evaluation_id")
@click.option("--cases/--no-cases", default=True, help="The table of cases (payloads, clipped).")
@click.option("--json", "as_json", is_flag=True)
def show(evaluation_id: str, cases: bool, as_json: bool) -> None:
    """One evaluation: its cases' scores and its summary."""
    engine = _engine()
    try:
        _print(engine, engine.deps.store.evaluation(evaluation_id), as_json, cases=cases)
    finally:
        engine.close()


@evals.command("resume")
@click.argument("evaluation_id")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(0, 64))
def resume(evaluation_id: str, workers: int) -> None:
    """Finish an evaluation whose runner stopped: its cases not done yet."""
    from runner.evals.evaluation import run_evaluation

    engine = _engine()
    try:
        with _progress() as bar:
            task = bar.add_task(f"eval {evaluation_id}", total=None)
            evaluation = run_evaluation(
                engine,
                evaluation_id,
                workers=workers,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
        _print(engine, evaluation, False, cases=False)
    finally:
        engine.close()


@evals.command("compare")
@click.argument("first")
@click.argument("second")
@click.option("--all", "every", is_flag=True, help="Every case, not only those that changed.")
@click.option("--json", "as_json", is_flag=True)
def compare_command(first: str, second: str, every: bool, as_json: bool) -> None:
    """FIRST beside SECOND (its baseline), case by case: the cases whose
    verdicts changed, and the summary with each difference's 95% interval."""
    from runner.evals.compare import compare
    from runner.evals.summary import render as render_summary

    engine = _engine()
    try:
        store = engine.deps.store
        comparison = compare(store.evaluation(first), store.evaluation(second))
    finally:
        engine.close()
    if as_json:
        click.echo(dumps(comparison.to_json()))
        return
    lines = [
        f"{first} ({comparison.first.info.label}) against {second} ({comparison.second.info.label})"
    ]
    for row in comparison.rows:
        if not (every or row.changed):
            continue
        said = []
        if row.better:
            said.append("better: " + ", ".join(row.better))
        if row.worse:
            said.append("worse: " + ", ".join(row.worse))
        lines.append(f"case {row.position:>5}  " + ("; ".join(said) or "same"))
    lines.append(render_summary(comparison.summary))
    say("\n".join(lines))
