"""A run's erasure (docs/security.md, "Erasure"): its payloads removed, its
skeleton kept for the records.

What goes: the trigger's payload, the run's output, state and error text, its
messages, its steps' inputs, outputs and errors, its effects' inputs, outputs
and errors, its approvals' inputs, edited arguments, answers, schemas and
reasons (and the same in its approval events), its earlier attempts' error
text. What stays: ids, agent, statuses, times, usage and cost, step kinds,
indexes, names and tool call ids, effect keys and statuses, approval decisions
and who made them, checkpoints (their step and message counts: the messages
themselves are gone), standing approvals (tool names), the thread, the
concurrency key and the tenant. The trigger's keys (``customer=42``) stay
findable, hashed (:func:`hashed_key`): erasure by key finds a run erased
before. A run that is not ended may still need its payloads, so it is
refused, and so is a run one of whose ancestors has not ended (a parent
resuming reads its children's outputs). Erasing a run erases its
descendants (its child runs, theirs...) that have ended; one not ended is
refused, with the reason.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from store.db import Tx, dumps
from store.errors import InvalidInput
from store.models import StepKind, TriggerEnvelope, usage_estimated
from store.pg.base import PgBase
from store.sealing import CannotDecrypt
from store.statements import Statement
from store.status import ENDED, RunStatus
from store.validate import check_run_id

# What an erased text (an error message, a reason, a note) reads.
ERASED = "erased"

# The most runs one key may name: past it, erasure by key is refused (nothing
# changed) and the caller narrows it down (by agent, or by run ids).
KEY_RUNS_LIMIT = 1000

# A hashed key value starts with this (:func:`hashed_key`).
_HASHED = "sha256:"

# The run, locked, and an ancestor of it not ended if it has one: that
# ancestor may still read the run's output (a parent resuming reads its
# children's).
LOCK_FOR_ERASE = Statement(
    "lock_for_erase",
    """
    SELECT r.id, r.status, r.trigger,
           (SELECT a.id FROM runs AS a
             WHERE a.id = ANY(r.ancestors)
               AND NOT a.status IN ('completed', 'failed', 'cancelled')
             LIMIT 1) AS live_ancestor
      FROM runs AS r
     WHERE r.id = CAST(:run_id AS uuid)
       FOR UPDATE OF r
    """,
)

# A run's descendants, its children first, by their parents (runs_parent_idx).
DESCENDANTS = Statement(
    "erase_descendants",
    """
    WITH RECURSIVE tree (id, depth) AS (
        SELECT id, 1 FROM runs WHERE parent_id = CAST(:run_id AS uuid)
        UNION ALL
        SELECT c.id, tree.depth + 1 FROM tree JOIN runs AS c ON c.parent_id = tree.id
         WHERE tree.depth < 64
    )
    SELECT id FROM tree ORDER BY depth, id
    """,
)

# The run's row: what its user wrote goes, its skeleton stays. A status
# unchanged fires no status event (store/events.py).
ERASE_RUN = Statement(
    "erase_run",
    """
    UPDATE runs
       SET trigger = CAST(:trigger AS json), output = NULL, state = NULL,
           error_message = CASE WHEN error_message IS NOT NULL THEN CAST(:erased AS text) END,
           retry_error = CASE WHEN retry_error IS NOT NULL THEN CAST(:erased AS text) END,
           erased_at = now(), erased_by = CAST(:by AS text)
     WHERE id = CAST(:run_id AS uuid) AND status IN ('completed', 'failed', 'cancelled')
    RETURNING erased_at
    """,
)

# Everything else of the run that carries its payloads, in one statement. An
# llm step keeps the flag that says its usage is an estimate (store/rows.py
# reads it from the output); a failed step or effect stays failed.
ERASE_PAYLOADS = Statement(
    "erase_payloads",
    """
    WITH m AS (
        DELETE FROM messages WHERE run_id = CAST(:run_id AS uuid)
    ), s AS (
        UPDATE steps
           SET input = NULL,
               output = CASE WHEN (json_typeof(output) = 'object'
                                   AND output ->> 'usage_estimated' = 'true')
                                  OR id = ANY(CAST(:estimated AS bigint[]))
                             THEN CAST('{"usage_estimated": true}' AS json) END,
               error = CASE WHEN error IS NOT NULL THEN to_json(CAST(:erased AS text)) END
         WHERE run_id = CAST(:run_id AS uuid)
    ), e AS (
        UPDATE effects
           SET input = NULL, output = NULL,
               error = CASE WHEN error IS NOT NULL THEN CAST(:erased AS text) END,
               resolved_note = CASE WHEN resolved_note IS NOT NULL THEN CAST(:erased AS text) END
         WHERE run_id = CAST(:run_id AS uuid)
    ), a AS (
        UPDATE approvals
           SET input = NULL, arguments = NULL, answer = NULL, schema = NULL,
               reason = CASE WHEN reason IS NOT NULL THEN CAST(:erased AS text) END
         WHERE run_id = CAST(:run_id AS uuid)
    ), t AS (
        UPDATE run_attempts
           SET error_message = CASE WHEN error_message IS NOT NULL THEN CAST(:erased AS text) END
         WHERE run_id = CAST(:run_id AS uuid)
    )
    UPDATE run_events
       SET data = (data - 'input' - 'arguments' - 'answer' - 'reason')
                  || CAST('{"erased": true}' AS jsonb)
     WHERE run_id = CAST(:run_id AS uuid) AND type = 'approval'
    """,
)

# The run's llm steps whose output is sealed (store/sealing.py): erasure opens
# them to keep the flag that says a step's usage is an estimate.
SEALED_LLM_STEPS = Statement(
    "sealed_llm_steps",
    """
    SELECT id, run_id, kind, index, tool_call_id, output FROM steps
     WHERE run_id = CAST(:run_id AS uuid) AND kind = CAST(:llm AS text)
       AND json_typeof(output) = 'string'
    """,
)

# Runs whose trigger has the key, as written or hashed (:func:`hashed_key`).
# No index covers the trigger's keys: without an agent this reads every run
# (with one, the agent's, by runs_agent_idx); it stops past the limit.
RUNS_BY_KEY = Statement(
    "runs_by_key",
    """
    SELECT id FROM runs
     WHERE (CAST(:agent AS text) IS NULL OR agent = CAST(:agent AS text))
       AND (trigger -> 'keys' ->> CAST(:name AS text)) IN (CAST(:value AS text),
                                                           CAST(:hashed AS text))
     ORDER BY id
     LIMIT CAST(:limit AS int)
    """,
)


def hashed_key(name: str, value: str) -> str:
    """What an erased run's trigger keeps of a key's value. Unsalted, so that
    erasure by key still finds the run: it hides the value from a reader of
    the run, not from someone who guesses it and hashes the guess."""
    # A run erased again keeps its hash (not the hash of it), and a key given
    # as its hash finds the runs that keep it.
    if value.startswith(_HASHED):
        return value
    digest = hashlib.sha256(f"{name}={value}".encode()).hexdigest()
    return f"{_HASHED}{digest}"


def erased_trigger(trigger: Mapping[str, Any]) -> dict[str, Any]:
    """An erased run's trigger: its id, source, kind, thread and time as they
    were, no payload, its keys hashed. It still validates as a
    :class:`TriggerEnvelope`, so the run reads as any other."""
    envelope = TriggerEnvelope.model_validate(trigger)
    kept = envelope.model_copy(
        update={
            "payload": {},
            "keys": {name: hashed_key(name, value) for name, value in envelope.keys.items()},
        }
    )
    return kept.model_dump(mode="json")


@dataclass(frozen=True)
class ErasedRun:
    """What became of one run: erased, or refused and why. ``via``: the run
    whose erasure took this one along (its ancestor), None for a run asked
    for by id or key."""

    run_id: str
    status: RunStatus
    erased_at: datetime | None = None
    refused: str | None = None
    via: str | None = None

    @property
    def erased(self) -> bool:
        return self.erased_at is not None


def _refusal(status: RunStatus) -> str:
    return f"the run is {status.value}: it may still need its payloads; erase it once it ends"


class PgErasure(PgBase):
    def erase_runs(self, run_ids: Sequence[str], by: str) -> list[ErasedRun]:
        """Erase each run and its ended descendants, each in a transaction of
        its own (module docstring); a run not ended is refused with the
        reason and left as it is. One :class:`ErasedRun` per run met, those
        asked for in order, each followed by its descendants. Raises
        :class:`RunNotFound` for an id no run has, before erasing any."""
        ids = list(dict.fromkeys(check_run_id(run_id) for run_id in run_ids))
        with self.db.tx() as tx:
            for run_id in ids:
                self._require_run(tx, run_id)
        done: list[ErasedRun] = []
        seen: set[str] = set()
        for run_id in ids:
            if run_id in seen:
                continue
            seen.add(run_id)
            done.extend(self._erase_one(run_id, by, via=None))
            for row in self.db.rows(DESCENDANTS, {"run_id": run_id}):
                child = str(row["id"])
                if child not in seen:
                    seen.add(child)
                    done.extend(self._erase_one(child, by, via=run_id))
        return done

    def _erase_one(self, run_id: str, by: str, *, via: str | None) -> list[ErasedRun]:
        """The run erased or refused; nothing if the prune deleted it meanwhile."""
        with self.db.tx() as tx:
            row = tx.first(LOCK_FOR_ERASE, {"run_id": run_id})
            if row is None:
                return []
            status = RunStatus(row["status"])
            if status not in ENDED:
                return [ErasedRun(run_id, status, refused=_refusal(status), via=via)]
            if row["live_ancestor"] is not None:
                why = (
                    f"its ancestor run {row['live_ancestor']} has not ended and may still"
                    " read its output; erase that run once it ends"
                )
                return [ErasedRun(run_id, status, refused=why, via=via)]
            erased = self._erase_locked(tx, run_id, row["trigger"], by)
        self._committed(run_id)
        return [ErasedRun(run_id, status, erased_at=erased, via=via)]

    def _estimated(self, step: Mapping[str, Any], run_id: str) -> bool:
        """Whether a sealed llm step's output says its usage is an estimate
        (False when its key is gone: erasure never waits on a key)."""
        try:
            return usage_estimated(self.sealing.step(step, run_id, opening=True)["output"])
        except CannotDecrypt:
            return False

    def _erase_locked(self, tx: Tx, run_id: str, trigger: Mapping[str, Any], by: str) -> datetime:
        params = {
            "run_id": run_id,
            "by": by,
            "trigger": dumps(erased_trigger(trigger)),
            "erased": ERASED,
        }
        row = tx.first(ERASE_RUN, params)
        assert row is not None  # locked, and ended
        estimated = [
            int(step["id"])
            for step in tx.rows(SEALED_LLM_STEPS, {"run_id": run_id, "llm": StepKind.LLM.value})
            if self._estimated(step, run_id)
        ]
        tx.execute(ERASE_PAYLOADS, {"run_id": run_id, "erased": ERASED, "estimated": estimated})
        erased_at: datetime = row["erased_at"]
        return erased_at

    def runs_by_key(
        self, name: str, value: str, *, agent: str | None = None, limit: int = KEY_RUNS_LIMIT
    ) -> list[str]:
        """The ids of the runs whose trigger has the key ``name`` = ``value``
        (erased runs too, by the hash they keep), of ``agent`` if given, at
        most ``limit``. Without an agent it reads every run: no index covers
        the trigger's keys."""
        if not name or not value:
            raise InvalidInput("a trigger key is name=value, both not empty")
        params = {
            "name": name,
            "value": value,
            "hashed": hashed_key(name, value),
            "agent": agent,
            "limit": limit,
        }
        return [str(row["id"]) for row in self.db.rows(RUNS_BY_KEY, params)]
