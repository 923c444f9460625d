"""How a run reads in ``runwright show`` and ``runwright runs``: its status,
a retry wait, earlier attempts, where a fork came from, what people were asked
and what they decided. The lines hold stored (possibly hostile) text: print
them through :func:`runner.cli.terminal.inert`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runner.cli.step_lines import ESTIMATED, clip
from runner.cli.step_lines import arguments as as_text
from runner.core.approvals.expiry import expired
from runner.core.costs import listed_cost, money, run_cost
from store.models import Decision, RequestKind
from store.rules import WAITING_PREFIX
from store.status import Interruption, RunStatus
from store.workers import WorkerInfo, serving

if TYPE_CHECKING:
    from runner.core.approvals.changes import ToolChange
    from store.events import RunEvent
    from store.models import Approval, Run, RunAttempt, StandingApproval, Step


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def describe(
    run: Run,
    attempts: list[RunAttempt],
    steps: list[Step],
    why: str | None = None,
    children: list[Run] | None = None,
    titles: Mapping[str, str] | None = None,
) -> list[str]:
    """``runwright show``'s header: the run, then its child runs and its
    earlier attempts; ``steps`` tell whether its cost is known, ``why`` why
    the run is where it is (runner/core/engine/explain.py), ``titles`` how
    its versions read (label and id)."""
    lines = [
        f"run      {run.id}",
        f"agent    {run.agent}",
        *([version_line(run, titles or {})] if run.version else []),
        f"status   {run.status.value}",
        *([f"why      {why}"] if why else []),
        *([erased_line(run)] if run.erased_at else []),
        f"usage    {run.usage.input_tokens} in, {run.usage.output_tokens} out, "
        f"{run.steps_used} steps{ESTIMATED if run.usage.estimated else ''}",
        f"cost     {run_cost(run.cost_usd, steps).words(money)}",
        f"created  {when(run.created_at)}   finished {when(run.finished_at)}",
    ]
    if run.concurrency_key:
        lines.append(f"key      {run.concurrency_key}")
    if run.forked_from:
        lines.append(f"forked   from run {run.forked_from} at step {run.forked_at_step}")
    if run.parent_id:
        detached = ", detached" if run.detached else ""
        lines.append(f"parent   run {run.parent_id} (its call {run.parent_call_id}{detached})")
    if run.model:
        lines.append(f"model    {run.model} (instead of the agent's)")
    if run.extra_steps:
        lines.append(f"budget   {run.extra_steps} steps beyond the agent's")
    if run.claim:
        lines.append(f"owner    {run.claim.owner} (epoch {run.claim.epoch})")
    if run.cancelled_by:
        cancelled = run.status is RunStatus.CANCELLED
        asked = RunStatus.CANCELLED.value if cancelled else "cancel requested"
        lines.append(f"{asked} by {run.cancelled_by}")
    if run.retry is not None and not run.ended:
        retry = run.retry
        line = f"model step: attempt {retry.attempts} failed ({clip(retry.error, 200)})"
        if run.retry_at is not None:
            line += f"; attempt {retry.attempts + 1} at {when(run.retry_at)}"
        lines.append(line)
    wait = run.waiting
    if wait and wait.kind == RequestKind.INPUT.value:
        question = wait.input.get("question") if isinstance(wait.input, dict) else None
        lines.append(
            f"waiting  for an answer to {_quoted(question, 200)} (question {wait.approval_id}), "
            f"expires {when(wait.expires_at)}"
        )
    elif wait:
        lines.append(
            f"waiting  approval {wait.approval_id} for {wait.tool_name}"
            f"({as_text(wait.input)}), expires {when(wait.expires_at)}"
        )
    if run.error:
        lines.append(f"error    {run.error.code}: {run.error.message}")
    if run.output is not None:
        lines.append(f"output   {clip(json.dumps(run.output), 200)}")
    if children:
        lines.append("children (their usage and cost count in this run's)")
        lines.extend("  " + child_line(c) for c in children)
    if attempts:
        lines.append("attempts (earlier, retried)")
        lines.extend("  " + attempt_line(a) for a in attempts)
    return lines


def erased_line(run: Run) -> str:
    """When and by whom the run's payloads were erased (store/pg/erasure.py)."""
    return (
        f"erased   {when(run.erased_at)} by {run.erased_by}: its payloads are gone,"
        " its ids, statuses, times and usage stay"
    )


def version_line(run: Run, titles: Mapping[str, str]) -> str:
    """The version the run is on, and the one it started on if another."""
    assert run.version is not None
    line = f"version  {titles.get(run.version, run.version)}"
    started = run.started_version
    if started and started != run.version:
        line += f", started on {titles.get(started, started)}"
    return line


def version_lines(events: list[RunEvent], titles: Mapping[str, str]) -> list[str]:
    """``runwright show``'s moves of the run to another version: from, to,
    by whom (none: its execution, on a worker of the new version), and what
    changed."""
    if not events:
        return []
    lines = ["versions (moves to another version)"]
    for event in events:
        old, new = event.data.get("from"), event.data.get("to")
        by = event.data.get("by")
        who = f" by {by}" if by else " on resuming"
        lines.append(
            f"  {when(event.at)}  {titles.get(str(old), old)} -> {titles.get(str(new), new)}{who}"
        )
        changes = event.data.get("changes")
        said = [str(c) for c in changes] if isinstance(changes, list) else []
        lines.extend(f"    {clip(change, 200)}" for change in said or ["no change of behaviour"])
    return lines


def requests_lines(
    approvals: list[Approval],
    standing: list[StandingApproval],
    changes: Mapping[str, ToolChange] | None = None,
) -> list[str]:
    """``runwright show``'s approvals and questions, each with what became of
    it and by whom, then the tools approved for the rest of the run.
    ``changes``: how the tools of pending calls changed since they were
    requested, by approval id (runner/core/approvals/changes.py)."""
    lines = []
    if approvals:
        lines.append("approvals and questions")
        for approval in approvals:
            lines.append("  " + request_line(approval))
            change = (changes or {}).get(approval.approval_id)
            if change is not None:
                lines.append("    tool changed since requested:")
                lines.extend(f"      {line}" for line in change.lines)
    if standing:
        lines.append(
            "approved for the rest of the run (a retry or fork asks again, unless --keep-standing)"
        )
        lines.extend(
            f"  {s.tool_name}  by {s.granted_by or 'someone'} at {when(s.granted_at)}"
            f" (approval {s.approval_id})"
            for s in standing
        )
    return lines


def request_line(approval: Approval) -> str:
    """One approval or question: what was asked, at which step, and its decision."""
    if approval.kind is RequestKind.INPUT:
        asked = f"question {_quoted(approval.question, 120)}"
    else:
        asked = f"{approval.tool_name}({clip(as_text(approval.input))})"
    words = decision_words(
        kind=approval.kind,
        decision=approval.decision,
        decided_by=approval.decided_by,
        reason=approval.reason,
        input=approval.input,
        arguments=approval.arguments,
        answer=approval.answer,
        for_run=approval.for_run,
        standing_from=approval.standing_from,
        expired=expired(approval),
        expires_at=approval.expires_at,
    )
    return f"{approval.approval_id}  step {approval.step_index}  {asked}: {words}"


def decision_words(
    *,
    kind: RequestKind | str | None,
    decision: Decision | str | None,
    decided_by: str | None,
    reason: str | None,
    input: Any,
    arguments: Any,
    answer: Any,
    for_run: bool,
    standing_from: str | None,
    expired: bool,
    expires_at: datetime | None,
) -> str:
    """What became of a request, in words: for ``show`` (from the approval)
    and ``watch`` (from its ``approval`` event, which has the same fields)."""
    if decision is None:
        return f"pending, expires {when(expires_at)}"
    who = decided_by or "someone"
    question = kind == RequestKind.INPUT
    if decision == Decision.WITHDRAWN:
        return "withdrawn: the run ended before anyone decided"
    if expired:  # the engine's own denial, never a person's (runner/core/approvals/expiry.py)
        return f"{'not answered' if question else 'not approved'}: expired at {when(expires_at)}"
    if decision == Decision.ANSWERED:
        return f"answered by {who}: {_quoted(answer, 120)}"
    if decision == Decision.DENIED:
        return f"denied by {who}" + (f": {clip(reason, 120)}" if reason else "")
    if standing_from:
        words = f"approved by the standing approval of {who} (approval {standing_from})"
    else:
        words = f"approved by {who}"
    if arguments is not None:
        words += f", edited: {clip(as_text(input), 60)} -> {clip(as_text(arguments), 60)}"
    if for_run:
        words += ", for the rest of the run"
    return words


def _quoted(value: Any, width: int) -> str:
    """Text as a quoted string, anything else as JSON: a question or an
    answer reads as what was said, and an empty or missing one shows."""
    return clip(json.dumps(value, ensure_ascii=False), width)


def child_line(child: Run) -> str:
    """One child run: ``runwright show <id>`` shows it whole."""
    return (
        f"{child.id}  {child.agent}  {child.status.value}  call {child.parent_call_id}  "
        f"{child.usage.input_tokens} in, {child.usage.output_tokens} out  "
        f"{listed_cost(child.cost_usd, child.cost_unpriced).words(money)}"
    )


def attempt_line(attempt: RunAttempt) -> str:
    error = f" {attempt.error.code}: {clip(attempt.error.message, 120)}" if attempt.error else ""
    extra = f", +{attempt.extra_steps} steps" if attempt.extra_steps else ""
    return (
        f"{attempt.attempt:>3}  {attempt.status.value}{error}; after {attempt.steps_used} steps,"
        f" {attempt.usage.total} tokens; {when(attempt.started_at)} to"
        f" {when(attempt.finished_at)}; retried {when(attempt.retried_at)}{extra}"
    )


def status_cell(row: dict[str, Any], workers: Mapping[str, WorkerInfo] | None = None) -> str:
    """``runwright runs``' status, with why in a few words where the status
    does not say (``runwright show`` has the sentence: runner/core/engine/explain.py):
    a retry's time, a drain, the approval a run waits on, a worker of the
    version a pinned run waits for, an agent no live worker has
    (``workers``: the live ones, None if unknown)."""
    status = str(row["status"])
    at = row.get("retry_at")
    if status == RunStatus.QUEUED and at is not None and row.get("retry_attempts"):
        # The attempt to come, as `runwright show` and the console count it.
        return f"{status} (attempt {row['retry_attempts'] + 1} at {at:%H:%M:%S})"
    if status == RunStatus.WAITING and row.get("waiting_on"):
        if row.get("waiting_kind") == "input":
            return f"{status} (a person's answer)"
        return f"{status} (approval of {row['waiting_on']})"
    parked = row.get("parked_key")
    if status == RunStatus.QUEUED and parked and parked.startswith(WAITING_PREFIX):
        return f"{status} (for a worker of its version)"  # pinned (runner/core/versions.py)
    reason = None
    if status == RunStatus.INTERRUPTED:
        reason = _GIVEN_BACK.get(str(row.get("interrupted_reason")))
    waits = status in (RunStatus.QUEUED, RunStatus.INTERRUPTED)
    if waits and workers is not None and not serving(workers.values(), row["agent"]):
        reason = "no live worker has the agent"
    return f"{status} ({reason})" if reason else status


_GIVEN_BACK = {
    Interruption.DRAIN.value: "drained",
    Interruption.AGENT_MISSING.value: "worker lacked the agent",
}
