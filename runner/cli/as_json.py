"""What ``runwright ... --json`` prints: every document's shape, built here once.

The field names are an interface (scripts read them; docs/operations.md,
"JSON output"): add fields, never rename one. Ids and statuses are strings (a
status is its enum's value), times ISO 8601 in UTC, counts and costs numbers.
A cost is null when it is not known: a model litellm has no price for leaves
the run's total incomplete (runner/core/costs.py), and ``priced_usd`` then says
what the priced steps cost.

Stored text (model and tool output, errors, payloads) is hostile: :func:`dumps`
escapes every character a terminal would act on, so a document is printable
ASCII on one line.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from runner.core.approvals.expiry import expired
from runner.core.costs import Cost, listed_cost, run_cost
from store.events import step_data
from store.models import RequestKind
from store.status import RunStatus

if TYPE_CHECKING:
    from runner.core.engine.versioning import UpgradeReport, VersionLine
    from runner.core.limits import ModelLimit
    from store.events import RunEvent
    from store.migrate import Migrated, Revision
    from store.models import (
        Approval,
        Checkpoint,
        DatasetInfo,
        Effect,
        Firing,
        ParkedKey,
        Run,
        RunAttempt,
        RunError,
        Schedule,
        StandingApproval,
        Step,
    )
    from store.pg.audit import AuditEntry
    from store.pg.erasure import ErasedRun
    from store.workers import WorkerInfo

Document = dict[str, Any]


def dumps(document: object, *, indent: int | None = None) -> str:
    """``document`` as one line of JSON with nothing a terminal acts on
    (with ``indent``, laid out on lines for a file people read).

    ``ensure_ascii`` writes every non-ASCII character (C1 controls,
    bidirectional overrides, line separators) as ``\\uXXXX``, and JSON itself
    escapes the C0 controls; DEL is the one ASCII control it leaves raw. It can
    only be inside a string there, where ``\\u007f`` means the same character.
    """
    text = json.dumps(document, ensure_ascii=True, default=str, indent=indent)
    return text.replace("\x7f", "\\u007f")


def json_option(command: Callable[..., Document | None]) -> Callable[..., None]:
    """Adds ``--json``. With it the command returns its result as a document,
    printed as one line of JSON and alone on stdout: anything else printed
    meanwhile (an agent module's ``print`` as it is imported) goes to stderr.
    Errors are as without it: one ``error:`` line on stderr and exit status 1."""

    @functools.wraps(command)
    def run(*args: Any, as_json: bool, **kwargs: Any) -> None:
        if not as_json:
            command(*args, as_json=False, **kwargs)
            return
        with contextlib.redirect_stdout(sys.stderr):
            document = command(*args, as_json=True, **kwargs)
        click.echo(dumps(document))

    flag = click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
    return flag(run)


def when(value: datetime | None) -> str | None:
    """A time in UTC, ISO 8601 (Postgres hands them over in the session's zone)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat()


def _usd(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def cost_json(known: Cost) -> Document:
    """``cost_usd``: what the run cost, null unless every model step that used
    tokens had a price; ``priced_usd``: what the priced steps cost."""
    usd = _usd(known.usd)
    return {"cost_usd": usd if known.complete else None, "priced_usd": usd}


def _error(error: RunError | None) -> Document | None:
    return None if error is None else {"code": error.code, "message": error.message}


def run_json(run: Run, known: Cost | None = None) -> Document:
    """A run with everything a script acts on. ``known`` is its cost from its
    steps (:func:`runner.core.costs.run_cost`); without it, the cost a listing
    shows, which reads no steps (``listed_cost``)."""
    if known is None:
        known = listed_cost(run.cost_usd, run.cost_unpriced)
    waiting = run.waiting
    claim = run.claim
    retry = run.retry
    trigger = run.trigger
    return {
        "id": run.id,
        "agent": run.agent,
        "status": run.status.value,
        "concurrency_key": run.concurrency_key,
        "thread": run.thread,
        "created_at": when(run.created_at),
        "updated_at": when(run.updated_at),
        "enqueued_at": when(run.enqueued_at),
        "started_at": when(run.started_at),
        "finished_at": when(run.finished_at),
        "steps_used": run.steps_used,
        "extra_steps": run.extra_steps,
        "input_tokens": run.usage.input_tokens,
        "output_tokens": run.usage.output_tokens,
        "usage_estimated": run.usage.estimated,
        **cost_json(known),
        "error": _error(run.error),
        "output": run.output,
        "state": run.state,
        # Its payloads were erased (store/pg/erasure.py): output and state are gone.
        "erased": None
        if run.erased_at is None
        else {"at": when(run.erased_at), "by": run.erased_by},
        "waiting": None
        if waiting is None
        else {
            "kind": waiting.kind,
            "approval_id": waiting.approval_id,
            "tool_name": waiting.tool_name,
            "input": waiting.input,
            "question": _question(waiting.kind, waiting.input),
            "expires_at": when(waiting.expires_at),
            "notified_at": when(waiting.notified_at),
        },
        "claim": None
        if claim is None
        else {"owner": claim.owner, "epoch": claim.epoch, "expires_at": when(claim.expires_at)},
        "takeovers": run.takeovers,
        "cancel_requested": run.cancel_requested,
        "cancelled_by": run.cancelled_by,
        "needs_attention": run.needs_attention,
        "interrupted_reason": None
        if run.interrupted_reason is None
        else run.interrupted_reason.value,
        "interrupted_by": run.interrupted_by,
        "retry": None
        if retry is None
        else {
            "attempts": retry.attempts,
            "since": when(retry.since),
            "error": retry.error,
            "at": when(retry.at),
        },
        "retry_attempts": 0 if retry is None else retry.attempts,
        "retry_at": when(run.retry_at),
        "model": run.model,
        "version": run.version,
        "started_version": run.started_version,
        "parked_key": run.parked_key,
        "forked_from": run.forked_from,
        "forked_at_step": run.forked_at_step,
        "parent_id": run.parent_id,
        "parent_call_id": run.parent_call_id,
        "detached": run.detached,
        "trigger": {
            "id": trigger.id,
            "source": trigger.source,
            "trigger": trigger.trigger,
            "payload": trigger.payload,
            "keys": trigger.keys,
            "thread": trigger.thread,
            "received_at": when(trigger.received_at),
        },
    }


def _question(kind: str, asked: Any) -> str | None:
    """What a question (a request of kind ``input``) asks; None for an approval."""
    if kind != RequestKind.INPUT.value or not isinstance(asked, dict):
        return None
    question = asked.get("question")
    return question if isinstance(question, str) else None


def approval_json(approval: Approval) -> Document:
    """An approval or a question, under its ``approval`` event's names
    (docs/events.md): what the model asked (``input``), what a person
    changed (``arguments``, ``edited``) or answered (``answer``), who decided,
    and whether the tool was approved for the rest of the run (``for_run``) or
    by such an approval (``standing_from``). ``expired``: denied by its
    expiry, not by a person. Never its token."""
    return {
        "approval_id": approval.approval_id,
        "kind": approval.kind.value,
        "step_index": approval.step_index,
        "tool_call_id": approval.tool_call_id,
        "tool_name": approval.tool_name,
        "input": approval.input,
        "question": approval.question,
        "schema": approval.schema,
        "decision": None if approval.decision is None else approval.decision.value,
        "reason": approval.reason,
        "decided_by": approval.decided_by,
        "decided_at": when(approval.decided_at),
        "expired": expired(approval),
        "arguments": approval.arguments,
        "edited": approval.edited,
        "answer": approval.answer,
        "for_run": approval.for_run,
        "standing_from": approval.standing_from,
        "on_deny": approval.on_deny.value,
        "created_at": when(approval.created_at),
        "expires_at": when(approval.expires_at),
    }


def standing_json(standing: StandingApproval) -> Document:
    """A tool approved for the rest of the run: by whom, when, and the
    approval whose decision granted it."""
    return {
        "tool_name": standing.tool_name,
        "approval_id": standing.approval_id,
        "granted_by": standing.granted_by,
        "granted_at": when(standing.granted_at),
    }


def listed_run_json(row: Mapping[str, Any]) -> Document:
    """A row of ``runwright runs`` (store/summary.py): the fields of :func:`run_json`
    that a listing reads, under the same names. Its cost is ``listed_cost``'s."""
    status = str(row["status"])
    waits = status == RunStatus.QUEUED and bool(row["retry_attempts"])
    code = row["error_code"]
    return {
        "id": str(row["id"]),
        "agent": row["agent"],
        "status": status,
        "concurrency_key": row["concurrency_key"],
        "created_at": when(row["created_at"]),
        "updated_at": when(row["updated_at"]),
        "finished_at": when(row["finished_at"]),
        "steps_used": row["steps_used"],
        "input_tokens": row["input_tokens"],
        "output_tokens": row["output_tokens"],
        "usage_estimated": row["usage_estimated"],
        **cost_json(listed_cost(row["cost_usd"], row["cost_unpriced"])),
        "error": None if code is None else {"code": code, "message": row["error_message"]},
        "needs_attention": row["needs_attention"],
        "retry_attempts": row["retry_attempts"],
        "retry_at": when(row["retry_at"]) if waits else None,
        "interrupted_reason": row["interrupted_reason"]
        if status == RunStatus.INTERRUPTED
        else None,
        "waiting_on": row["waiting_on"] if status == RunStatus.WAITING else None,
        "waiting_kind": row["waiting_kind"] if status == RunStatus.WAITING else None,
        "version": row["version"],
        "parked_key": row["parked_key"],
    }


def runs_json(rows: Iterable[Mapping[str, Any]]) -> Document:
    return {"runs": [listed_run_json(row) for row in rows]}


def step_json(step: Step) -> Document:
    """A step as its ``step`` event carries it (store/events.py), times in UTC."""
    return {
        **step_data(step),
        "started_at": when(step.started_at),
        "finished_at": when(step.finished_at),
    }


def attempt_json(attempt: RunAttempt) -> Document:
    return {
        "attempt": attempt.attempt,
        "status": attempt.status.value,
        "error": _error(attempt.error),
        "steps_used": attempt.steps_used,
        "input_tokens": attempt.usage.input_tokens,
        "output_tokens": attempt.usage.output_tokens,
        "usage_estimated": attempt.usage.estimated,
        "extra_steps": attempt.extra_steps,
        "started_at": when(attempt.started_at),
        "finished_at": when(attempt.finished_at),
        "retried_at": when(attempt.retried_at),
    }


def effect_json(effect: Effect) -> Document:
    outcome = effect.resolved_outcome
    return {
        "call_id": effect.call_id,
        "key": effect.key,
        "tool": effect.tool,
        "input": effect.input,
        "status": effect.status.value,
        "epoch": effect.epoch,
        "attempts": effect.attempts,
        "output": effect.output,
        "error": effect.error,
        "started_at": when(effect.started_at),
        "finished_at": when(effect.finished_at),
        "resolved_outcome": None if outcome is None else outcome.value,
        "resolved_by": effect.resolved_by,
        "resolved_note": effect.resolved_note,
        "resolved_at": when(effect.resolved_at),
    }


def show_json(
    shown_run: Run,
    steps: list[Step],
    attempts: list[RunAttempt],
    unknown: list[Effect],
    checkpoint: Checkpoint | None,
    *,
    messages: bool,
    why: str | None = None,
    children: list[Run] | None = None,
    approvals: list[Approval] | None = None,
    standing: list[StandingApproval] | None = None,
    version_events: list[RunEvent] | None = None,
    version_titles: Mapping[str, str] | None = None,
) -> Document:
    """``runwright show --json``: the run, its child runs, its approvals and
    questions, the tools approved for the rest of it, its steps, earlier
    attempts, effects of unknown outcome, its checkpoint and (unless
    ``messages`` is False, then null) the checkpoint's messages; ``why``: why
    the run is where it is (runner/core/engine/explain.py); its moves to
    another version (``version_events``) and how its versions read
    (``version_titles``: label and id, by id)."""
    return {
        "run": {**run_json(shown_run, run_cost(shown_run.cost_usd, steps)), "why": why},
        "version_titles": dict(version_titles or {}),
        "version_events": [version_event_json(e) for e in version_events or ()],
        "children": [run_json(c) for c in children or ()],
        "approvals": [approval_json(a) for a in approvals or ()],
        "standing_approvals": [standing_json(s) for s in standing or ()],
        "attempts": [attempt_json(a) for a in attempts],
        "unknown_effects": [effect_json(e) for e in unknown],
        "steps": [step_json(s) for s in steps],
        "checkpoint": None
        if checkpoint is None
        else {
            "step_index": checkpoint.step_index,
            "message_count": len(checkpoint.messages),
            "finish_reason": checkpoint.finish_reason,
            "created_at": when(checkpoint.created_at),
        },
        "messages": (checkpoint.messages if checkpoint is not None else []) if messages else None,
    }


def doctor_json(
    checks: Iterable[tuple[str, str, str]], healthy: bool, version: str | None
) -> Document:
    """``runwright doctor --json``: each check's name, state (``ok``, ``FAIL``
    or ``skipped``, as its line says) and detail, whether all passed, and
    Runwright's version (null: run from a source tree)."""
    return {
        "version": version,
        "healthy": healthy,
        "checks": [
            {"name": name, "state": state, "detail": detail} for name, state, detail in checks
        ],
    }


@dataclass(frozen=True)
class KeyLine:
    """What ``runwright limits`` says of one key (runner/cli/limits.py), in
    words or as :func:`limits_json`."""

    key: str
    pattern: str | None  # the pattern whose limit governs the key (None: none does)
    source: str | None  # "code" or RUNWRIGHT_MODEL_LIMITS
    limit: ModelLimit | None
    in_use: dict[str, Any] | None  # Limiter.state, for a model's own key
    parked: ParkedKey | None


def limits_json(lines: Iterable[KeyLine]) -> Document:
    """``runwright limits --json``: each key with the pattern and limit that
    govern it (null: none), where that limit is declared (``code`` or
    ``RUNWRIGHT_MODEL_LIMITS``), what is in use under it now (null for a
    pattern ending in ``*``: each model under it has its own), and the runs
    parked on it by tenant (a null tenant: runs of none) and when the first
    may go (null: none is parked)."""

    def in_use(state: Mapping[str, Any] | None) -> Document | None:
        if state is None:
            return None
        blocked = state["blocked_until"]
        until = None if blocked is None else datetime.fromtimestamp(blocked, UTC)
        return {
            "requests": state["requests_in_window"],
            "tokens": state["tokens_in_window"],
            "in_flight": len(state["holders"]),
            "holders": list(state["holders"]),
            "share": state["factor"],
            "rpm_in_force": state["rpm_in_force"],
            "tpm_in_force": state["tpm_in_force"],
            "blocked_until": when(until),
            "waiters": dict(state["waiters"]),
        }

    def parked(found: ParkedKey | None) -> Document | None:
        if found is None:
            return None
        return {
            "runs": found.runs,
            "tenants": [
                {"tenant": tenant, "runs": runs}
                for tenant, runs in sorted(found.tenants.items(), key=lambda item: -item[1])
            ],
            "next_at": when(found.next_at),
        }

    return {
        "limits": [
            {
                "key": line.key,
                "pattern": line.pattern,
                "source": line.source,
                "limit": None
                if line.limit is None
                else {
                    "rpm": line.limit.rpm,
                    "tpm": line.limit.tpm,
                    "max_concurrent": line.limit.max_concurrent,
                },
                "in_use": in_use(line.in_use),
                "parked": parked(line.parked),
            }
            for line in lines
        ]
    }


def migration_json(migrated: Migrated) -> Document:
    """``runwright migrate --json``: the schema's revision before and after, each
    ``{"revision": "0010", "name": "0010_unknown_effects"}`` (null: no schema)."""

    def revision(found: Revision | None) -> Document | None:
        return None if found is None else {"revision": found.id, "name": found.name}

    before, after = migrated.before, migrated.after
    return {"from": revision(before), "to": revision(after), "migrated": before != after}


def workers_json(workers: Iterable[WorkerInfo]) -> Document:
    """``runwright workers --json``: each live worker's record (store/workers.py),
    its times as epoch seconds, as the record holds them."""
    return {
        "workers": [
            {
                "name": info.name,
                "agents": None if info.agents is None else list(info.agents),
                "version": info.version,
                "pool": info.pool,
                "concurrency": info.concurrency,
                "queues": list(info.queues),
                "host": info.host,
                "pid": info.pid,
                "started_at": info.started_at,
                "seen_at": info.seen_at,
                "agent_versions": None
                if info.agent_versions is None
                else dict(info.agent_versions),
            }
            for info in workers
        ]
    }


def schedule_json(schedule: Schedule, next_times: Iterable[datetime] = ()) -> Document:
    return {
        "name": schedule.name,
        "agent": schedule.agent,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "every_seconds": schedule.every_seconds,
        "payload": schedule.payload,
        "thread": schedule.thread,
        "keys": schedule.keys,
        "overlap": schedule.overlap.value,
        "catchup_window_seconds": schedule.catchup_window_seconds,
        "jitter_seconds": schedule.jitter_seconds,
        "paused": schedule.paused,
        "next_at": None if schedule.paused else when(schedule.next_at),
        "next_firings": [when(t) for t in next_times],
        "created_at": when(schedule.created_at),
        "updated_at": when(schedule.updated_at),
    }


def firing_json(firing: Firing, run_status: str | None = None) -> Document:
    return {
        "schedule": firing.schedule,
        "scheduled_at": when(firing.scheduled_at),
        "outcome": firing.outcome.value,
        "fired_at": when(firing.fired_at),
        "run_id": firing.run_id,
        "run_status": run_status,
        "reason": firing.reason,
    }


def versions_json(lines: Iterable[VersionLine]) -> Document:
    """``runwright versions --json``: each agent's versions, the agent's
    current one marked, with the runs on each that have not ended and the
    live workers that run it. ``version`` null: runs that have not run yet;
    ``label``, ``policy`` and ``last_seen`` null: a version no process recorded."""
    return {
        "versions": [
            {
                "agent": line.agent,
                "version": line.version,
                "label": None if line.record is None else line.record.label,
                "title": line.title,
                "policy": None if line.record is None else line.record.policy,
                "current": line.current,
                # The runs on it by status (parked: queued, and parked on a
                # limit or for a worker of its version).
                RunStatus.RUNNING.value: line.running,
                RunStatus.QUEUED.value: line.queued,
                "parked": line.parked,
                RunStatus.WAITING.value: line.waiting,
                "workers": list(line.workers),
                "first_seen": None if line.record is None else when(line.record.first_seen),
                "last_seen": None if line.record is None else when(line.record.last_seen),
            }
            for line in lines
        ]
    }


def dataset_json(info: DatasetInfo) -> Document:
    """A version of a dataset (``runwright dataset ... --json``): name,
    version (the digest of its cases), case_count, created_at, created_by,
    description, query (how it was built)."""
    return {
        "name": info.name,
        "version": info.version,
        "case_count": info.case_count,
        "created_at": when(info.created_at),
        "created_by": info.created_by,
        "description": info.description,
        "query": info.query,
    }


def audit_json(entry: AuditEntry) -> Document:
    """One entry of the audit log (``runwright audit --json``, a line each):
    id, at, actor, source, action, run_id, detail, prev_hash, hash."""
    return entry.to_dict()


def upgrade_json(report: UpgradeReport) -> Document:
    """``runwright runs upgrade --json``: the runs moved, those refused with
    why, and what changed from the old version to the new."""
    return {
        "agent": report.agent,
        "from": report.old,
        "to": report.new,
        "moved": list(report.moved),
        "refused": [{"run_id": run_id, "reason": why} for run_id, why in report.refused],
        "changes": list(report.changes),
    }


def erasure_json(runs: Sequence[ErasedRun], by: str) -> Document:
    """``runwright runs erase --json``: who erased, the runs erased and
    those refused with why; ``via``: the run whose erasure took a
    descendant along."""
    return {
        "by": by,
        "erased": [
            {"run_id": r.run_id, "status": r.status.value, "at": when(r.erased_at), "via": r.via}
            for r in runs
            if r.erased
        ],
        "refused": [
            {"run_id": r.run_id, "status": r.status.value, "reason": r.refused, "via": r.via}
            for r in runs
            if not r.erased
        ],
    }


def version_event_json(event: RunEvent) -> Document:
    """A run's move to another version, as its ``version`` event says it
    (store/events.py): ``from``, ``to``, what ``changes`` and who moved it
    (``by``, null: its execution did, on a worker of the new version)."""
    data = event.data
    changes = data.get("changes")
    return {
        "at": when(event.at),
        "from": data.get("from"),
        "to": data.get("to"),
        "changes": [str(c) for c in changes] if isinstance(changes, list) else [],
        "by": data.get("by"),
    }
