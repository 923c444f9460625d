"""Effects whose outcome is unknown: found, listed and resolved.

An effect started by an execution that died before writing its outcome may or
may not have happened. The execution that finds it so marks it ``unknown`` and
flags its run (``needs_attention``), in one fenced transaction; the model is told
the outcome is unknown. Only a person can know the truth: they resolve the
effect (``done`` or ``not_done``, with a note and who they are), and the flag
clears when no unknown effect of the run is left unresolved.
"""

from __future__ import annotations

from store.db import Tx
from store.errors import EffectNotFound, InvalidInput, InvalidTransition, LeaseLostError
from store.models import Effect, EffectOutcome, EffectStatus, Fence
from store.pg.base import PgBase, fence_params
from store.pg.execution import LOCK_FENCED
from store.rows import effect_from_row
from store.statements import Statement
from store.validate import check_actor, check_run_id, check_text

# Longest note a resolution records (who resolved it: store.validate.check_actor).
MAX_NOTE_CHARS = 2000
# No tool call id is longer (providers send a few dozen characters).
MAX_CALL_ID_CHARS = 1000

MARK_UNKNOWN = Statement(
    "mark_effect_unknown",
    """
    UPDATE effects SET status = 'unknown'
     WHERE run_id = CAST(:run_id AS uuid) AND key = CAST(:key AS text)
       AND status IN ('started', 'unknown')
    RETURNING *
    """,
)

UNKNOWN_EFFECTS = Statement(
    "unknown_effects",
    """
    SELECT * FROM effects WHERE run_id = CAST(:run_id AS uuid) AND status = 'unknown'
     ORDER BY started_at, key
    """,
)

EFFECT_FOR_UPDATE = Statement(
    "effect_for_update",
    """
    SELECT * FROM effects WHERE run_id = CAST(:run_id AS uuid) AND key = CAST(:key AS text)
     FOR UPDATE
    """,
)

RESOLVE = Statement(
    "resolve_effect",
    """
    UPDATE effects SET resolved_outcome = CAST(:outcome AS text),
                       resolved_by = CAST(:by AS text),
                       resolved_note = CAST(:note AS text),
                       resolved_at = now()
     WHERE run_id = CAST(:run_id AS uuid) AND key = CAST(:key AS text)
    RETURNING *
    """,
)

# The flag follows the journal: set while an unknown effect is unresolved.
FLAG = Statement(
    "flag_needs_attention",
    """
    UPDATE runs SET needs_attention = EXISTS (
               SELECT 1 FROM effects AS e
                WHERE e.run_id = runs.id AND e.status = 'unknown' AND e.resolved_outcome IS NULL),
           updated_at = now()
     WHERE id = CAST(:run_id AS uuid)
    """,
)

EFFECTS_OF_CALLS = Statement(
    "effects_of_calls",
    """
    SELECT * FROM effects
     WHERE run_id = CAST(:run_id AS uuid) AND key = ANY(CAST(:keys AS text[]))
    """,
)


class PgEffects(PgBase):
    def mark_effect_unknown(self, fence: Fence, key: str) -> Effect:
        """The effect under ``key``, started by an execution that died, is of
        unknown outcome: mark it so and flag its run (unless a person already
        resolved it). Fenced."""
        with self.db.tx() as tx:
            if tx.first(LOCK_FENCED, fence_params(fence)) is None:
                raise LeaseLostError(
                    f"run {fence.run_id} is no longer held by {fence.owner} (epoch {fence.epoch})"
                )
            row = tx.first(MARK_UNKNOWN, {"run_id": fence.run_id, "key": key})
            if row is None:
                raise InvalidTransition(f"effect {key!r} is not started: its outcome is known")
            tx.execute(FLAG, {"run_id": fence.run_id})
        self._committed(fence.run_id)
        return effect_from_row(row, sealing=self.sealing)

    def journaled_effects(self, run_id: str, call_ids: list[str]) -> dict[str, Effect]:
        """The effects journaled for these tool calls of the run, by call id."""
        keys = [f"{check_run_id(run_id)}:{call_id}" for call_id in call_ids]
        rows = self.db.rows(EFFECTS_OF_CALLS, {"run_id": run_id, "keys": keys})
        return {
            effect.call_id: effect
            for effect in (effect_from_row(r, sealing=self.sealing) for r in rows)
        }

    def unknown_effects(self, run_id: str) -> list[Effect]:
        """The run's effects of unknown outcome, resolved or not, oldest first."""
        run_id = check_run_id(run_id)
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
            return [
                effect_from_row(r, sealing=self.sealing)
                for r in tx.rows(UNKNOWN_EFFECTS, {"run_id": run_id})
            ]

    def resolve_effect(
        self,
        run_id: str,
        call_id: str,
        outcome: EffectOutcome | str,
        *,
        note: str | None = None,
        by: str | None = None,
    ) -> Effect:
        """Record what a person says the unknown effect of tool call
        ``call_id`` did; the run's flag clears with its last unresolved one."""
        run_id = check_run_id(run_id)
        said = _outcome(outcome)
        note = _note(note)
        by = check_actor(by)
        check_text(call_id, "the tool call id", max_chars=MAX_CALL_ID_CHARS)
        key = f"{run_id}:{call_id}"
        with self.db.tx() as tx:
            self._require_run(tx, run_id)
            effect = self._effect(tx, run_id, key, call_id)
            if effect.status is not EffectStatus.UNKNOWN:
                raise InvalidTransition(
                    f"the effect of tool call {call_id!r} is {effect.status}, not of unknown "
                    "outcome: there is nothing to resolve"
                )
            if effect.resolved_outcome is not None:
                who = f" by {effect.resolved_by}" if effect.resolved_by else ""
                raise InvalidTransition(
                    f"the effect of tool call {call_id!r} was already resolved "
                    f"{effect.resolved_outcome}{who}"
                )
            row = tx.first(
                RESOLVE,
                {"run_id": run_id, "key": key, "outcome": said.value, "by": by, "note": note},
            )
            tx.execute(FLAG, {"run_id": run_id})
        assert row is not None  # locked above
        self._committed(run_id)
        return effect_from_row(row, sealing=self.sealing)

    def _effect(self, tx: Tx, run_id: str, key: str, call_id: str) -> Effect:
        row = tx.first(EFFECT_FOR_UPDATE, {"run_id": run_id, "key": key})
        if row is None:
            raise EffectNotFound(f"run {run_id} has no effect for tool call {call_id!r}")
        return effect_from_row(row, sealing=self.sealing)


def _outcome(outcome: EffectOutcome | str) -> EffectOutcome:
    try:
        return EffectOutcome(outcome)
    except ValueError:
        known = " or ".join(repr(o.value) for o in EffectOutcome)
        raise InvalidInput(f"an effect's outcome is {known}, not {outcome!r}") from None


def _note(value: str | None) -> str | None:
    return None if value is None else check_text(value, "the note", max_chars=MAX_NOTE_CHARS)
