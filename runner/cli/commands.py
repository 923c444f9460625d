"""The ``runwright`` command line.

Commands import what they need when they run: none imports litellm except
``demo`` (whose worker runs a model), so listing runs starts in a fraction of a
second. Runwright's own errors print one line and exit with status 1.

Stored text (model and tool output, errors, payloads) was written by whoever
controls the model, the tools or the trigger: it is printed only through
``say``, which makes control characters inert, and the runs table takes it as
plain ``Text``, never as rich markup.

With ``--json`` a command prints one JSON document instead (its shapes:
``runner/cli/as_json.py``); errors stay one line on stderr.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any

import click

from runner.cli.args import (
    PRUNE_MAX,
    PRUNE_MIN,
    parse_count,
    parse_duration,
    parse_payload,
    seconds,
)
from runner.cli.as_json import (
    Document,
    approval_json,
    effect_json,
    erasure_json,
    json_option,
    migration_json,
    run_json,
    runs_json,
    show_json,
    standing_json,
    upgrade_json,
    versions_json,
)
from runner.cli.audit import audit as audit_command
from runner.cli.audit import cli_source, login_name
from runner.cli.console import console as console_command
from runner.cli.datasets import dataset as dataset_command
from runner.cli.datasets import export as export_command
from runner.cli.describe import describe, requests_lines, status_cell, version_lines, when
from runner.cli.evals import eval_command
from runner.cli.evals import evals as evals_command
from runner.cli.keys import keys as keys_command
from runner.cli.limits import limits as limits_command
from runner.cli.replay import replay as replay_command
from runner.cli.replay import sandbox as sandbox_command
from runner.cli.shape import worker_shape as worker_shape_command
from runner.cli.step_lines import arguments as as_text
from runner.cli.step_lines import clip as _clip
from runner.cli.step_lines import message_line
from runner.cli.step_lines import step_line as _step_line
from runner.cli.terminal import Group, fail, inert, say
from runner.cli.triggers import schedule as schedule_command
from runner.cli.triggers import webhook as webhook_command
from runner.cli.workers import workers as workers_command
from runner.core.costs import listed_cost, money
from runner.core.settings import Settings
from store.errors import ConfigurationError, ForkRepeatsEffects, InvalidInput, RunwrightError
from store.models import Effect, EffectOutcome, RequestKind
from store.rules import CancelAction
from store.status import RunStatus

if TYPE_CHECKING:
    from runner.core.approvals.changes import ToolChange
    from runner.core.engine.engine import Engine
    from store.models import Approval, Run
    from store.postgres import PostgresStore
    from store.workers import WorkerInfo


MAX_STEP = 2**31 - 1  # a step index is an int column


def _settings() -> Settings:
    from runner.core.settings import resolve

    return resolve(Settings.from_env())


def _engine() -> Engine:
    from runner.core.engine.engine import Engine

    engine = Engine.from_env()
    if engine.settings.otel:
        _export_spans()
    return engine


def _export_spans() -> None:
    """With RUNWRIGHT_OTEL, what a command does (a start, a decision, a
    cancel) is in the run's trace like anywhere else: export its spans, and
    flush them before the process exits."""
    import atexit

    from runner.observe import otel

    if otel.configure("runwright-cli"):
        atexit.register(otel.stop_worker)


def _console() -> Any:
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=200)  # piped: never cut ids short
    return console


@click.group(cls=Group)
@click.version_option(package_name="runwright")
def main() -> None:
    """Durable AI agents on Celery."""


# ------------------------------------------------------------------ runs


@main.command()
@click.argument("agent")
@click.option("--payload", default="{}", help="The trigger payload, as JSON.")
@click.option("--source", default="cli", show_default=True)
@click.option("--trigger", "trigger_name", default="manual", show_default=True)
@click.option("--key", "keys", multiple=True, help="A trigger key, as name=value (repeatable).")
@click.option("--thread", default=None, help="Continue this conversation thread.")
@click.option("--id", "trigger_id", default=None, help="Trigger id; starting it again is a no-op.")
@json_option
def start(
    agent: str,
    payload: str,
    source: str,
    trigger_name: str,
    keys: tuple[str, ...],
    thread: str | None,
    trigger_id: str | None,
    as_json: bool,
) -> Document | None:
    """Start a run of AGENT and hand it to a worker."""
    data = parse_payload(payload)
    pairs = {}
    for item in keys:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidInput(f"--key {item[:40]!r} is not name=value")
        pairs[name] = value
    run = _engine().start(
        agent,
        data,
        source=source,
        trigger=trigger_name,
        keys=pairs,
        thread=thread,
        id=trigger_id,
    )
    if as_json:
        return {"run": run_json(run)}
    say(f"run {run.id} ({run.agent}) is {run.status.value}")
    return None


@main.group(invoke_without_command=True)
@click.option("--status", default=None, help="Only runs with this status.")
@click.option("--agent", default=None, help="Only runs of this agent.")
@click.option(
    "--version",
    "version",
    default=None,
    help="Only runs on this agent version: its id, a prefix of it, or its label.",
)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@click.option(
    "--needs-attention",
    is_flag=True,
    help="Only runs with an effect of unknown outcome nobody resolved (runwright resolve).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_context
def runs(
    ctx: click.Context,
    status: str | None,
    agent: str | None,
    version: str | None,
    limit: int,
    needs_attention: bool,
    as_json: bool,
) -> None:
    """List the latest runs; `runwright runs upgrade` moves runs to another
    version, `runwright runs erase` erases runs' payloads, `runwright runs
    export` prints a run as a case to replay."""
    if ctx.invoked_subcommand is not None:
        given = [
            name
            for name in ctx.params
            if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
        ]
        if given:
            raise InvalidInput(
                f"the options of `runwright runs` list runs: give {ctx.invoked_subcommand}'s "
                f"after it (runwright runs {ctx.invoked_subcommand} --help)"
            )
        return
    _list_runs(
        status=status,
        agent=agent,
        version=version,
        limit=limit,
        needs_attention=needs_attention,
        as_json=as_json,
    )


@json_option
def _list_runs(
    status: str | None,
    agent: str | None,
    version: str | None,
    limit: int,
    needs_attention: bool,
    as_json: bool,
) -> Document | None:
    from rich.table import Table
    from rich.text import Text

    from store.summary import list_runs

    settings = _settings()
    url = settings.database_url
    assert url is not None
    rows = list_runs(
        url,
        status=status,
        agent=agent,
        version=version,
        limit=limit,
        needs_attention=needs_attention,
    )
    if as_json:
        return runs_json(rows)
    workers = _live_workers(settings) if any(_waits_for_worker(row) for row in rows) else None
    # The version last: the columns before it keep the places scripts read them at.
    table = Table(
        "run", "agent", "status", "steps", "tokens", "cost", "created", "error", "version"
    )
    for row in rows:
        cells = (
            row["id"],
            row["agent"],
            status_cell(row, workers),
            row["steps_used"],
            row["input_tokens"] + row["output_tokens"],
            listed_cost(row["cost_usd"], row["cost_unpriced"]).words(money),
            when(row["created_at"]),
            row["error_code"] or ("needs attention" if row["needs_attention"] else ""),
            row["version"] or "-",
        )
        # Text, not str: a str cell is parsed as rich markup ("[red]...").
        table.add_row(*(Text(inert(cell)) for cell in cells))
    _console().print(table)
    if not rows:
        click.echo("no runs")
    return None


@main.command("versions")
@click.option("--agent", default=None, help="Only this agent's versions.")
@json_option
def versions(agent: str | None, as_json: bool) -> Document | None:
    """Show each agent's versions: the current one, the runs on each that have
    not ended (running, queued, parked, waiting) and the live workers that run
    it, so that you know when an old version's workers can stop."""
    from rich.table import Table
    from rich.text import Text

    from runner.cli.versions import drain_words

    engine = _engine()
    try:
        lines = engine.versions(agent)
    finally:
        engine.close()
    if as_json:
        return versions_json(lines)
    if not lines:
        which = f"of agent {agent!r} " if agent else ""
        say(f"no version {which}is recorded: a worker records its agents' versions as it starts")
        return None
    by_status = (RunStatus.RUNNING, RunStatus.QUEUED, "parked", RunStatus.WAITING)
    table = Table("agent", "version", "", *map(str, by_status), "workers", "its workers")
    for line in lines:
        cells = (
            line.agent,
            line.title,
            "current" if line.current else "",
            line.running,
            line.queued,
            line.parked,
            line.waiting,
            ", ".join(line.workers) or "-",
            drain_words(line),
        )
        # Text, not str: labels and worker names come from the store and Redis.
        table.add_row(*(Text(inert(cell)) for cell in cells))
    _console().print(table)
    return None


@runs.command("upgrade")
@click.option("--agent", required=True, help="The agent whose runs to move.")
@click.option(
    "--from", "old", required=True, help="The version they are on: its id, a prefix, or its label."
)
@click.option(
    "--to",
    "new",
    default=None,
    help="The version to move them to (default: the current one, as `runwright versions` marks).",
)
@click.option("--by", default=None, help="Who moves them (default: your login name).")
@json_option
def upgrade(
    agent: str, old: str, new: str | None, by: str | None, as_json: bool
) -> Document | None:
    """Move the runs of an agent's version that are not running (waiting,
    queued, parked for a worker of that version) to another version, each
    with a version event saying what changed. A run waiting on a call of a
    tool the new version no longer has is refused, with the reason."""
    from runner.cli.versions import upgrade_lines

    who = _operator(by)
    engine = _engine()
    try:
        report = engine.upgrade_runs(agent, old, new, by=who, source=cli_source())
    finally:
        engine.close()
    if as_json:
        return upgrade_json(report)
    for line in upgrade_lines(report, who):
        say(line)
    return None


@runs.command("erase")
@click.argument("run_ids", nargs=-1)
@click.option(
    "--key", default=None, help="Erase the runs whose trigger has this key, as name=value."
)
@click.option("--agent", default=None, help="With --key: only this agent's runs.")
@click.option("--by", default=None, help="Who erases them (default: your login name).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
def erase(
    run_ids: tuple[str, ...],
    key: str | None,
    agent: str | None,
    by: str | None,
    yes: bool,
    as_json: bool,
) -> Document | None:
    """Erase runs' payloads (trigger payload, messages, tool arguments and
    results, approvals' inputs and answers, output, state) and keep their
    skeleton (ids, statuses, times, usage) for the records: the runs named,
    or those of a trigger key, with their ended child runs. A run not ended
    is refused, with the reason. Each erasure goes in the audit log."""
    from runner.core.engine.erasure import select

    who = _operator(by)
    engine = _engine()
    try:
        ids = select(engine.deps, list(run_ids) or None, key, agent)
        if not ids:
            if as_json:
                return erasure_json([], who)
            say(f"no run has the trigger key {key}; nothing erased")
            return None
        if not yes:
            named = "1 run" if len(ids) == 1 else f"{len(ids)} runs"
            click.confirm(
                f"Erase the payloads of {named} (and of their ended child runs)?"
                " This cannot be undone",
                abort=True,
                err=True,
            )
        report = engine.erase(ids, by=who, source="cli")
    finally:
        engine.close()
    if as_json:
        return erasure_json(report.runs, who)
    for run in report.runs:
        via = f" (a descendant of {run.via})" if run.via else ""
        if run.erased:
            say(f"run {run.run_id}{via} erased by {who}")
        else:
            say(f"run {run.run_id}{via} not erased: {run.refused}")
    if report.refused:
        sys.exit(1)
    return None


@main.command()
@click.argument("run_id")
@click.option("--messages/--no-messages", default=True, help="Print the checkpoint's messages.")
@json_option
def show(run_id: str, messages: bool, as_json: bool) -> Document | None:
    """Show a run: its status, steps, usage and checkpoint messages."""
    from runner.core.audit import AuditAction, record
    from runner.core.engine.explain import explain
    from runner.core.settings import open_store

    settings = _settings()
    store = open_store(settings)
    run = store.get_run(run_id)
    # What follows prints the run's payloads (its steps' calls, its messages).
    record(store, AuditAction.VIEWED_PAYLOADS, login_name(), run_id=run.id, source=cli_source())
    steps = store.steps(run_id)
    children = store.children(run_id)
    approvals = store.approvals(run_id)
    standing = store.standing_approvals(run_id)
    why = explain(
        run,
        _live_workers(settings),
        grace_seconds=settings.agent_grace_seconds,
        children=children,
    )
    moves = store.version_events(run_id)
    titles = store.version_titles(
        run.agent,
        [run.version, run.started_version]
        + [str(e.data.get(end)) for e in moves for end in ("from", "to")],
    )
    if as_json:
        return show_json(
            run,
            steps,
            store.attempts(run_id),
            store.unknown_effects(run_id),
            store.checkpoint(run_id),
            messages=messages,
            why=why,
            children=children,
            approvals=approvals,
            standing=standing,
            version_events=moves,
            version_titles=titles,
        )
    for line in describe(run, store.attempts(run_id), steps, why, children, titles):
        say(line)
    for line in version_lines(moves, titles):
        say(line)
    for line in requests_lines(approvals, standing, _tool_changes(settings, store, run, approvals)):
        say(line)
    unknown = store.unknown_effects(run_id)
    if unknown:
        say("effects of unknown outcome (resolve with: runwright resolve RUN CALL done|not_done)")
        for effect in unknown:
            say("  " + _unknown_line(effect))
    say("steps")
    for step in steps:
        say("  " + _step_line(step))
    checkpoint = store.checkpoint(run_id)
    if messages and checkpoint is not None:
        say(f"checkpoint at step {checkpoint.step_index} ({len(checkpoint.messages)} messages)")
        for message in checkpoint.messages:
            say(f"  {message['role']:<17} {_clip(message_line(message), 100)}")
    return None


@main.command()
@click.argument("run_id")
@click.option(
    "--timeout",
    default=None,
    type=float,
    callback=seconds(0, 10**9),
    help="Give up after this many seconds.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON event per line.")
def watch(run_id: str, timeout: float | None, as_json: bool) -> None:
    """Follow a run live until it ends: its steps, status changes and
    approvals as they are committed, and a streaming model's text as it is
    generated (from the run-event feed, without polling)."""
    from runner.cli.follow import follow

    settings = _settings()
    assert settings.database_url is not None and settings.redis_url is not None
    status = follow(settings, run_id, timeout, as_json)
    if status is not None:
        fail(f"run {run_id} is still {status.value} after {timeout:g} s")


def _waits_for_worker(row: dict[str, Any]) -> bool:
    return row["status"] in (RunStatus.QUEUED, RunStatus.INTERRUPTED)


def _live_workers(settings: Settings) -> dict[str, WorkerInfo] | None:
    """The live workers' records (store/workers.py); None if Redis cannot say."""
    from runner.core.coordination.leases import Leases

    if settings.redis_url is None:
        return None
    try:
        leases = Leases.from_url(settings.redis_url)
        try:
            return leases.workers()
        finally:
            leases.redis.close()
    except RunwrightError:
        return None


def _unknown_line(effect: Effect) -> str:
    said = "unresolved"
    if effect.resolved_outcome is not None:
        said = f"resolved {effect.resolved_outcome.value} by {effect.resolved_by or 'someone'}"
        if effect.resolved_note:
            said += f": {_clip(effect.resolved_note, 80)}"
    return (
        f"call {effect.call_id}  {effect.tool}({_clip(as_text(effect.input), 80)})  "
        f"key {effect.key}  started in epoch {effect.epoch}  {said}"
    )


# ------------------------------------------------------------- control


def _operator(by: str | None) -> str:
    """Who a command acts as: ``--by``, else the login name."""
    if by is not None:
        return by
    name = login_name()
    if name is None:
        raise InvalidInput("cannot tell your login name: say who you are with --by NAME")
    return name


# The options every deciding command shares.
_token_option = click.option(
    "--token",
    default=None,
    help="The token from the notification. Without it you decide as the operator "
    "(you can reach the database).",
)
_tool_option = click.option(
    "--tool", default=None, help="With a run id: the pending request of this tool."
)
_call_option = click.option(
    "--call", "call_id", default=None, help="With a run id: the pending request of this call."
)
_by_option = click.option("--by", default=None, help="Who decides (default: your login name).")


def _after(run: Run) -> str:
    """Where a decision left the run, in words."""
    if run.status is RunStatus.QUEUED:
        return "queued again"
    if run.status is RunStatus.WAITING:
        return "still waiting (for another decision)"
    if run.ended and run.error is not None:
        return f"{run.status.value} ({run.error.code}: {run.error.message})"
    return run.status.value


def _tool_changes(
    settings: Settings, store: PostgresStore, run: Run, approvals: list[Approval]
) -> dict[str, ToolChange]:
    """How the tools of the run's pending calls changed since they were
    requested, as ``runwright approve`` would apply a decision: with the
    agents it loads (``RUNWRIGHT_AGENTS``), else their latest recorded versions."""
    from runner.core.agent import registry
    from runner.core.approvals.changes import tool_changes

    waiting = [(run, a) for a in approvals if a.pending and a.kind is RequestKind.APPROVAL]
    if not waiting:
        return {}
    registry.load(settings.agents)
    return tool_changes(store, registry, waiting)


def _decide(
    given: str,
    approve: bool,
    *,
    token: str | None,
    reason: str | None,
    tool: str | None,
    call_id: str | None,
    by: str | None,
    as_json: bool,
    arguments: str | None = None,
    for_run: bool = False,
    fail_run: bool = False,
) -> Document | None:
    from runner.cli.pending import arguments_value, chosen

    edited = None if arguments is None else arguments_value(arguments)
    who = _operator(by)
    engine = _engine()
    asked = chosen(engine.store, given, RequestKind.APPROVAL, tool=tool, call=call_id)
    run = engine.decide(
        asked.approval_id,
        approve,
        reason,
        token=token,
        trusted=token is None,
        by=who,
        arguments=edited,
        for_run=for_run,
        fail_run=fail_run,
        source=cli_source(),
    )
    decided = engine.store.get_approval(asked.approval_id)
    # The run's other pending calls of the tool, approved with it (``--for-run``).
    also = [a for a in engine.store.approvals(run.id) if a.standing_from == asked.approval_id]
    if as_json:
        return {
            "approval_id": decided.approval_id,
            "decision": "approved" if approve else "denied",
            "approval": approval_json(decided),
            "also": [approval_json(a) for a in also],
            "run": run_json(run),
        }
    verb = "approved" if approve else "denied"
    what = f"{verb} {decided.approval_id} ({decided.tool_name}) as {who}"
    say(f"{what}; run {run.id} is {_after(run)}")
    if decided.edited:
        say(f"  with edited arguments: {_clip(as_text(decided.arguments), 200)}")
    if decided.for_run:
        with_it = f", and its {len(also)} other pending call(s) with it" if also else ""
        say(f"  {decided.tool_name} is approved for the rest of the run{with_it}")
    return None


@main.command()
@click.argument("approval_id", metavar="ID")
@_token_option
@click.option("--reason", default=None, help="Why (kept with the decision).")
@click.option(
    "--arguments",
    default=None,
    help="Approve the call with these arguments instead of the model's: a JSON object "
    "that fits the tool's schema.",
)
@click.option(
    "--for-run",
    is_flag=True,
    help="Approve the tool for the rest of the run: its later calls do not ask.",
)
@_tool_option
@_call_option
@_by_option
@json_option
def approve(
    approval_id: str,
    token: str | None,
    reason: str | None,
    arguments: str | None,
    for_run: bool,
    tool: str | None,
    call_id: str | None,
    by: str | None,
    as_json: bool,
) -> Document | None:
    """Approve a pending tool call. ID is the approval's id or its run's id."""
    return _decide(
        approval_id,
        True,
        token=token,
        reason=reason,
        tool=tool,
        call_id=call_id,
        by=by,
        as_json=as_json,
        arguments=arguments,
        for_run=for_run,
    )


@main.command()
@click.argument("approval_id", metavar="ID")
@_token_option
@click.option("--reason", default=None, help="Why (the model sees it).")
@click.option(
    "--fail-run",
    is_flag=True,
    help="End the run failed, with the reason, instead of telling the model "
    "(for a call whose tool no longer exists, say).",
)
@_tool_option
@_call_option
@_by_option
@json_option
def deny(
    approval_id: str,
    token: str | None,
    reason: str | None,
    fail_run: bool,
    tool: str | None,
    call_id: str | None,
    by: str | None,
    as_json: bool,
) -> Document | None:
    """Deny a pending tool call. ID is the approval's id or its run's id."""
    return _decide(
        approval_id,
        False,
        token=token,
        reason=reason,
        tool=tool,
        call_id=call_id,
        by=by,
        as_json=as_json,
        fail_run=fail_run,
    )


@main.command()
@click.argument("request_id", metavar="ID")
@click.argument("value")
@_token_option
@_tool_option
@_call_option
@_by_option
@json_option
def answer(
    request_id: str,
    value: str,
    token: str | None,
    tool: str | None,
    call_id: str | None,
    by: str | None,
    as_json: bool,
) -> Document | None:
    """Answer a question the model asked (its ask_human tool).

    ID is the question's id or its run's id. VALUE is the answer: the text
    itself when the question wants text, else JSON that fits its schema."""
    from runner.cli.pending import answer_value, chosen

    who = _operator(by)
    engine = _engine()
    question = chosen(engine.store, request_id, RequestKind.INPUT, tool=tool, call=call_id)
    given = answer_value(question, value)
    run = engine.answer(
        question.approval_id,
        given,
        token=token,
        trusted=token is None,
        by=who,
        source=cli_source(),
    )
    answered = engine.store.get_approval(question.approval_id)
    if as_json:
        return {
            "approval_id": answered.approval_id,
            "decision": "answered",
            "approval": approval_json(answered),
            "run": run_json(run),
        }
    say(f"answered {answered.approval_id} as {who}; run {run.id} is {_after(run)}")
    return None


@main.command()
@click.argument("run_id")
@click.argument("call_id")
@click.argument("outcome", type=click.Choice([o.value for o in EffectOutcome]))
@click.option("--note", default=None, help="What you checked (kept with the resolution).")
@click.option("--by", default=None, help="Who resolves it (default: your login name).")
@json_option
def resolve(
    run_id: str, call_id: str, outcome: str, note: str | None, by: str | None, as_json: bool
) -> Document | None:
    """Say what an effect of unknown outcome did: done or not_done.

    An effect is of unknown outcome when its worker died after starting it and
    before recording its result; `runwright show RUN` lists them with their
    call ids, and `runwright runs --needs-attention` the runs that have one."""
    who = _operator(by)
    engine = _engine()
    effect = engine.resolve_effect(run_id, call_id, outcome, note=note, by=who, source=cli_source())
    run = engine.get_run(run_id)
    if as_json:
        return {"effect": effect_json(effect), "run": run_json(run)}
    left = "it needs no more attention" if not run.needs_attention else "it still needs attention"
    say(f"effect {effect.tool} of call {call_id} resolved {outcome} by {who}; run {run_id}: {left}")
    return None


@main.command()
@click.argument("run_id")
@click.option("--by", default=None, help="Who cancels it (default: your login name).")
@json_option
def cancel(run_id: str, by: str | None, as_json: bool) -> Document | None:
    """Cancel a run, from any machine."""
    who = _operator(by)
    result = _engine().cancel(run_id, by=who, source=cli_source())
    if as_json:
        return {"action": result.action.value, "by": who, "run": run_json(result.run)}
    if result.action is CancelAction.CANCELLED:
        say(f"run {run_id} cancelled by {who}")
    elif result.action is CancelAction.REQUESTED:
        say(f"run {run_id} is running; its worker has been told to stop")
    else:
        say(f"run {run_id} is already {result.run.status.value}; nothing to cancel")
    return None


_keep_standing_option = click.option(
    "--keep-standing",
    is_flag=True,
    help="Keep the tools people approved for the rest of the run approved "
    "(by default they ask again).",
)


@main.command()
@click.argument("run_id")
@click.option("--extra-steps", default="0", help="Steps to add to the run's budget.")
@_keep_standing_option
@click.option("--by", default=None, help="Who retries it (default: your login name).")
@json_option
def retry(
    run_id: str, extra_steps: str, keep_standing: bool, by: str | None, as_json: bool
) -> Document | None:
    """Queue a failed or cancelled run again, from its last checkpoint."""
    from store.retry_fork import MAX_EXTRA_STEPS

    extra = parse_count(extra_steps, "--extra-steps", 0, MAX_EXTRA_STEPS)
    who = _operator(by)
    engine = _engine()
    # What the retry keeps or drops, read before it: afterwards a drop is gone.
    granted = [s.tool_name for s in engine.store.standing_approvals(run_id)]
    # A retry keeps the outcome it replaces as an attempt: one more means retried.
    before = engine.store.attempt_count(run_id)
    run = engine.retry(
        run_id, extra_steps=extra, keep_standing=keep_standing, by=who, source=cli_source()
    )
    attempts = engine.store.attempt_count(run.id)
    retried = attempts > before
    number = attempts + 1 if retried else None
    if as_json:
        return {
            "retried": retried,
            "attempt": number,
            "extra_steps": extra if retried else 0,
            "keep_standing": keep_standing,
            "standing_approvals": [
                standing_json(s) for s in engine.store.standing_approvals(run.id)
            ],
            "run": run_json(run),
        }
    if not retried:
        say(f"run {run.id} is already {run.status.value}; nothing to retry")
        return None
    more = f", {extra} more steps" if extra else ""
    say(f"run {run.id} retried and queued (attempt {number}{more})")
    if granted and keep_standing:
        say(f"  still approved for the rest of the run: {', '.join(granted)}")
    elif granted:
        say(
            f"  no longer approved for the rest of the run: {', '.join(granted)} "
            "(they ask again; --keep-standing keeps them)"
        )
    return None


@main.command()
@click.argument("run_id")
@click.option("--at-step", "at_step", required=True, help="The step whose history to start from.")
@click.option("--agent", default=None, help="The new run's agent (default: the run's).")
@click.option("--model", default=None, help="A litellm model string instead of the agent's.")
@click.option("--id", "trigger_id", default=None, help="Trigger id; forking again is a no-op.")
@click.option(
    "--rerun-effects",
    is_flag=True,
    help="Fork even though effects ran after the step: the fork may run them again.",
)
@_keep_standing_option
@click.option("--by", default=None, help="Who forks it (default: your login name).")
@json_option
def fork(
    run_id: str,
    at_step: str,
    agent: str | None,
    model: str | None,
    trigger_id: str | None,
    rerun_effects: bool,
    keep_standing: bool,
    by: str | None,
    as_json: bool,
) -> Document | None:
    """Start a new run from RUN_ID's history after a step.

    The fork repeats what its model asks for after that step, effects included,
    and runs them under new idempotency keys (the fork's run id), so downstream
    deduplication will not catch them: a charge made after the step may be made
    again. If an effect ran after the step (completed, or with an unknown
    outcome), fork refuses and names those effects, unless --rerun-effects.

    The tools people approved for the rest of RUN_ID ask again in the fork,
    unless --keep-standing.
    """
    step = parse_count(at_step, "--at-step", 1, MAX_STEP)
    who = _operator(by)
    engine = _engine()
    try:
        run = engine.fork(
            run_id,
            step,
            agent=agent,
            model=model,
            id=trigger_id,
            rerun_effects=rerun_effects,
            keep_standing=keep_standing,
            by=who,
            source=cli_source(),
        )
    except ForkRepeatsEffects as exc:
        raise ForkRepeatsEffects(
            exc.run_id, exc.at_step, exc.effects, how="add --rerun-effects"
        ) from None
    standing = engine.store.standing_approvals(run.id)
    if as_json:
        return {
            "forked_from": run_id,
            "at_step": step,
            "keep_standing": keep_standing,
            "standing_approvals": [standing_json(s) for s in standing],
            "run": run_json(run),
        }
    say(f"run {run.id} ({run.agent}) is {run.status.value}; forked from {run_id} at step {step}")
    if standing:
        say(f"  approved for the rest of the fork too: {', '.join(s.tool_name for s in standing)}")
    elif not keep_standing:
        dropped = [s.tool_name for s in engine.store.standing_approvals(run_id)]
        if dropped:
            say(f"  not approved in the fork: {', '.join(dropped)} (--keep-standing keeps them)")
    return None


@main.command()
def tick() -> None:
    """Run tick() once: schedules, notifications, expiries, lapsed claims, re-enqueue."""
    report = _engine().tick()
    if report.skipped:
        say("another tick is running; skipped")
        return
    say(
        f"fired {len(report.fired)} ({report.firings} firings), "
        f"notified {report.notified} (failed {report.notify_failed}), expired {report.expired}, "
        f"lapsed {len(report.lapsed)}, re-enqueued "
        f"{len(report.reenqueued) + len(report.key_heads)}, resumed {len(report.resumed)}"
    )


@main.command()
@click.option(
    "--older-than", "older_than", required=True, help="Age, like 30d or 12h (1m to 36500d)."
)
def prune(older_than: str) -> None:
    """Delete ended runs older than the given age, with all their rows."""
    from runner.core.settings import open_store
    from store.models import utcnow

    age = parse_duration(older_than)
    if not PRUNE_MIN <= age <= PRUNE_MAX:
        raise InvalidInput(f"--older-than {older_than.strip()} is outside 1m to 36500d")
    deleted = open_store(_settings()).prune(utcnow() - age)
    say(f"deleted {deleted} ended run(s) older than {older_than}")


@main.command()
@click.option(
    "-A",
    "--app",
    default=None,
    help="The Celery app that installed Runwright, as `celery -A` names it "
    "(default: RUNWRIGHT_CELERY_APP, else Runwright's own, tasks).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def doctor(app: str | None, as_json: bool) -> None:
    """Check the set-up, one line each; exit 0 only if all is well."""
    from runner.cli.doctor import run_checks

    if app is None:
        # A setting that does not parse is the configuration check's to report.
        with contextlib.suppress(ConfigurationError):
            app = Settings.from_env().celery_app
    sys.exit(run_checks(as_json=as_json, app=app))


@main.command()
@json_option
def migrate(as_json: bool) -> Document | None:
    """Create or upgrade the database schema, and say from which revision to which."""
    from store.migrate import upgrade

    url = _settings().database_url
    assert url is not None
    migrated = upgrade(url)
    if as_json:
        return migration_json(migrated)
    before, after = migrated.before, migrated.after
    assert after is not None  # at head
    if before is None:
        click.echo(f"created the schema at {after.name}")
    elif before == after:
        click.echo(f"schema is already at {after.name}")
    else:
        click.echo(f"migrated from {before.name} to {after.name}")
    return None


# ---------------------------------------------------------- local stack


@main.group()
def local() -> None:
    """The local stack: embedded Postgres and Redis under ./.runwright/."""


@local.command("up")
def local_up() -> None:
    """Start the local stack (idempotent) and migrate its database."""
    from store.local import LocalStack

    urls = LocalStack(Settings.from_env().home).up()
    click.echo(f"postgres  {urls.database_url}")
    click.echo(f"redis     {urls.redis_url}")


@local.command("down")
def local_down() -> None:
    """Stop the local stack (its data stays)."""
    from store.local import LocalStack

    LocalStack(Settings.from_env().home).down()
    click.echo("local stack stopped")


@local.command("status")
def local_status() -> None:
    """Show whether the local stack is running."""
    from store.local import LocalStack

    for key, value in LocalStack(Settings.from_env().home).status().items():
        click.echo(f"{key:<13} {value}")


@main.command()
@click.option("--keep/--no-keep", default=False, help="Leave the worker and beat running.")
def demo(keep: bool) -> None:
    """Run the demo end to end on the local stack (or the configured services)."""
    from runner.cli.demo import run_demo

    run_demo(keep=keep)


main.add_command(audit_command)
main.add_command(keys_command)
main.add_command(replay_command)
main.add_command(eval_command)
main.add_command(evals_command)
main.add_command(sandbox_command)
main.add_command(dataset_command)
runs.add_command(export_command)
main.add_command(console_command)
main.add_command(workers_command)
main.add_command(limits_command)
main.add_command(schedule_command)
main.add_command(webhook_command)
main.add_command(worker_shape_command)
