"""A new attempt at a run: retry an ended run, or fork a new run from another's history.

``retry`` queues a ``failed`` or ``cancelled`` run again from its checkpoint:
steps it recorded are not repeated (no model call is paid twice, no completed
effect runs again), and the outcome it replaces is kept as an attempt. ``fork``
starts a new run whose history is another run's as it stood after a step, on
the same agent or another one, optionally on another model; the original is not
written. The fork runs again what its model asks for after that step, effects
included, under its own idempotency keys, so a fork past an effect that ran is
refused unless the caller says ``rerun_effects=True``. The rules are the
store's (``store/retry_fork.py``, ``store/pg/retry_fork.py``);
this module hands the runs to workers.
"""

from __future__ import annotations

import uuid
from typing import Any

import pydantic

from runner.core.engine.deps import Deps
from runner.core.errors import InvalidInput
from store.models import NewRun, Run, TriggerEnvelope
from store.pg.retry_fork import RetryResult


def retry(
    deps: Deps, run_id: str, *, extra_steps: int = 0, keep_standing: bool = False
) -> RetryResult:
    """Queue a failed or cancelled run again, with ``extra_steps`` more in its
    budget, and send it to a worker. A live run is left as it is; a completed
    one is refused (:class:`InvalidTransition`). The tools people approved for
    the rest of the run must be approved again, unless ``keep_standing``."""
    result = deps.store.retry_run(run_id, extra_steps, keep_standing=keep_standing)
    if result.retried:
        deps.send([result.run.id])
    return result


def fork(
    deps: Deps,
    run_id: str,
    at_step: int,
    *,
    agent: str | None = None,
    model: str | None = None,
    id: str | None = None,
    rerun_effects: bool = False,
    keep_standing: bool = False,
) -> Run:
    """A new run that starts from ``run_id``'s history after step ``at_step``,
    sent to a worker. Idempotent on ``id`` (the fork's trigger id). Refused
    (:class:`ForkRepeatsEffects`, nothing written) if effects ran after that
    step, unless ``rerun_effects``: the fork would run them again under its
    own idempotency keys."""
    original = deps.store.get_run(run_id)
    spec = deps.registry.get(original.agent if agent is None else agent)
    fields: dict[str, Any] = {
        **original.trigger.model_dump(),
        # A trigger of its own, so that it deduplicates apart from the original;
        # no thread, so that the thread's conversation does not take it in.
        "id": str(uuid.uuid4()) if id is None else id,
        "thread": None,
    }
    try:
        envelope = TriggerEnvelope(**fields)
    except pydantic.ValidationError as exc:
        raise InvalidInput(f"invalid fork id: {exc}") from None
    carrier: dict[str, str] = {}
    with deps.observer.starting(spec.name, carrier):
        new = NewRun(
            agent=spec.name,
            trigger=envelope,
            concurrency_key=spec.key_for(envelope),
            trace_context=carrier or None,
        )
        run = deps.store.fork_run(
            original.id,
            at_step,
            new,
            model=model,
            rerun_effects=rerun_effects,
            keep_standing=keep_standing,
        )
    deps.send([run.id])
    return run
