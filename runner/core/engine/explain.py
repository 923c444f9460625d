"""Why a run is where it is, in one sentence: what ``runwright show``,
``runwright runs`` and the console's run page print next to a status that
does not explain itself (``queued``, ``interrupted``, ``waiting``).

The live workers' records (store/workers.py) tell a run that waits for a
worker with its agent from one that waits for a free thread; without them
(Redis unreachable) the sentence says only what the run's row says."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from runner.core.versions import waiting_for
from store.jsonsafe import clip
from store.models import Interruption, RequestKind, Run
from store.status import RunStatus
from store.workers import WorkerInfo, serving, worker_of


def at(value: datetime) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S} UTC"


def explain(
    run: Run,
    workers: Mapping[str, WorkerInfo] | None,
    *,
    grace_seconds: float | None = None,
    children: Sequence[Run] = (),
) -> str | None:
    """Why ``run`` is queued, interrupted or waiting; None for other statuses.
    ``children``: its child runs (a run waiting for them says which);
    ``workers``: the live workers by name (None: unknown); ``grace_seconds``:
    RUNWRIGHT_AGENT_GRACE_SECONDS, to say when a run no worker can take fails."""
    if run.status is RunStatus.WAITING:
        return _waiting(run, children)
    if run.status is RunStatus.QUEUED:
        return _queued(run, workers)
    if run.status is RunStatus.INTERRUPTED:
        return _interrupted(run, workers, grace_seconds)
    return None


def _waiting(run: Run, children: Sequence[Run]) -> str:
    wait = run.waiting
    open_children = [c for c in children if not c.status.ended]
    if wait is None and open_children:
        listed = ", ".join(f"{c.agent} {c.id} ({c.status.value})" for c in open_children[:5])
        more = f" and {len(open_children) - 5} more" if len(open_children) > 5 else ""
        return f"waiting for its child runs: {listed}{more}"
    if wait is None:
        return "waiting for a decision"
    if wait.kind == RequestKind.INPUT.value:
        question = wait.input.get("question") if isinstance(wait.input, dict) else None
        asked = f": {clip(question, 200)!r}" if isinstance(question, str) else ""
        return (
            f"waiting for a person's answer to question {wait.approval_id}{asked}, "
            f"which expires at {at(wait.expires_at)}"
        )
    return (
        f"waiting for a decision on approval {wait.approval_id} ({wait.tool_name}), "
        f"which expires at {at(wait.expires_at)}"
    )


def _queued(run: Run, workers: Mapping[str, WorkerInfo] | None) -> str:
    pinned = waiting_for(run.parked_key)
    if pinned is not None:
        return _for_its_version(run, *pinned, workers)
    if run.parked_key is not None and run.parked_until is not None:
        # Parked on a limit (docs/flow-control.md): no worker holds it meanwhile.
        return (
            f"waiting: rate_limit on {run.parked_key!r}, may go at {at(run.parked_until)} "
            "(parked: it holds no worker; it goes sooner if its turn comes)"
        )
    retry = run.retry
    if retry is not None and run.retry_at is not None:
        return (
            f"waiting to retry its model step: attempt {retry.attempts + 1} at "
            f"{at(run.retry_at)}, after {retry.error}"
        )
    since = run.enqueued_at or run.created_at
    said = f"since {at(since)}, {_for_a_worker(run, workers)}"
    if run.concurrency_key:
        said += f"; runs with key {run.concurrency_key!r} run one at a time, oldest first"
    return said


def _interrupted(
    run: Run, workers: Mapping[str, WorkerInfo] | None, grace_seconds: float | None
) -> str:
    by = ""
    if run.interrupted_by:
        worker = worker_of(run.interrupted_by, (workers or {}).values())
        by = f" ({worker.name if worker is not None else run.interrupted_by})"
    if run.interrupted_reason is Interruption.AGENT_MISSING:
        said = f"a worker without agent {run.agent!r}{by} gave it back"
        if run.agent_missing_since is not None and grace_seconds is not None:
            ends = run.agent_missing_since + timedelta(seconds=grace_seconds)
            said += f"; it fails at {at(ends)} unless a worker that has the agent takes it"
        return f"{said}; {_for_a_worker(run, workers)}"
    if run.interrupted_reason is Interruption.DRAIN:
        return (
            f"its worker{by} shut down mid-run (a drain) at {at(run.updated_at)}; "
            f"{_for_a_worker(run, workers)}"
        )
    return f"given back by its execution at {at(run.updated_at)}; {_for_a_worker(run, workers)}"


def _for_its_version(
    run: Run, agent: str, version: str, workers: Mapping[str, WorkerInfo] | None
) -> str:
    """A pinned run (``on_new_version="pin"``) parked until a worker of the
    version it ran on takes it (runner/core/engine/execution.py)."""
    said = f"waiting for a worker of version {version} of {agent!r} (the agent pins its runs)"
    move = f"`runwright runs upgrade --agent {agent} --from {version}` moves it to the current one"
    if workers is None:
        return f"{said}; which workers are live is unknown: Redis is unreachable"
    able = [w for w in workers.values() if w.serves_version(agent, version)]
    if able:
        return f"{said}; sent to its queue, which {len(able)} live worker(s) of that version take"
    return f"{said}: none of the {len(workers)} live worker(s) runs it; {move}"


def _for_a_worker(run: Run, workers: Mapping[str, WorkerInfo] | None) -> str:
    if workers is None:
        return "waiting for a worker (which workers are live is unknown: Redis is unreachable)"
    if not workers:
        return f"waiting for a worker that has agent {run.agent!r}: no worker is live"
    able = serving(workers.values(), run.agent)
    if not able:
        return (
            f"waiting for a worker that has agent {run.agent!r}: none of the "
            f"{len(workers)} live worker(s) has it"
        )
    return f"waiting for a free worker ({len(able)} live worker(s) have agent {run.agent!r})"
