"""Erasing runs (docs/security.md, "Erasure"): the runs named by id, or by a
trigger key (``customer=42``), lose their payloads and keep their skeleton;
the store says what goes and what stays (store/pg/erasure.py). Each run
erased gets one entry in the audit log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runner.core.engine.deps import Deps
from runner.core.errors import InvalidInput
from store.pg.erasure import KEY_RUNS_LIMIT, ErasedRun
from store.validate import check_text

# The audit action of an erasure. Plain text until the audit actions have
# their enum (runner/core/audit*): use its member then.
ERASED_ACTION = "erased"

# The longest name of a person that erases.
MAX_BY_CHARS = 200


@dataclass(frozen=True)
class ErasureReport:
    """The runs erased and those refused, with why, in the order met."""

    runs: list[ErasedRun]

    @property
    def erased(self) -> list[ErasedRun]:
        return [run for run in self.runs if run.erased]

    @property
    def refused(self) -> list[ErasedRun]:
        return [run for run in self.runs if not run.erased]


def parse_key(key: str) -> tuple[str, str]:
    """``name=value`` as its two parts (the value may hold ``=``)."""
    name, sep, value = check_text(key, "the trigger key").partition("=")
    if not sep or not name.strip() or not value:
        raise InvalidInput(f"a trigger key is name=value (customer=42), not {key!r}")
    return name.strip(), value


def select(
    deps: Deps, run_ids: Sequence[str] | None, key: str | None, agent: str | None
) -> list[str]:
    """The runs to erase: the ids given, or the runs of the trigger key (of
    ``agent`` if given). Exactly one of the two; refused past
    :data:`KEY_RUNS_LIMIT` runs for a key."""
    if isinstance(run_ids, str):
        raise InvalidInput("run_ids is a list of run ids, not one string")
    if bool(run_ids) == (key is not None):
        raise InvalidInput("name the runs to erase by their ids or by one trigger key, not both")
    if key is None:
        if agent is not None:
            raise InvalidInput("an agent narrows erasure by key; run ids need none")
        return list(run_ids or ())
    name, value = parse_key(key)
    found = deps.store.runs_by_key(name, value, agent=agent, limit=KEY_RUNS_LIMIT + 1)
    if len(found) > KEY_RUNS_LIMIT:
        raise InvalidInput(
            f"more than {KEY_RUNS_LIMIT} runs have {name}={value}: name the agent, or the runs"
        )
    return found


def erase(
    deps: Deps,
    *,
    run_ids: Sequence[str] | None = None,
    key: str | None = None,
    agent: str | None = None,
    by: str,
    source: str | None = None,
) -> ErasureReport:
    """Erase the runs :func:`select` names, and their ended descendants; a
    run not ended is refused. Bad input (no runs named, both ways, a run id
    no run has, no ``by``) raises one error before anything changes."""
    by = check_text(by, "by", max_chars=MAX_BY_CHARS).strip()
    if not by:
        raise InvalidInput("say who erases (by)")
    ids = select(deps, run_ids, key, agent)
    runs = deps.store.erase_runs(ids, by) if ids else []
    for run in runs:
        if run.erased:
            detail = {"status": run.status.value} | ({"via": run.via} if run.via else {})
            deps.store.append_audit(
                by, ERASED_ACTION, run_id=run.run_id, source=source, detail=detail
            )
    return ErasureReport(runs)
