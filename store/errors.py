"""Every error Runwright raises on purpose derives from :class:`RunwrightError`.

The class docstring is the default message, so ``raise RunNotFound()`` reads
well on its own and ``raise RunNotFound(f"no run {run_id!r}")`` adds detail.
Driver errors (psycopg2, redis) are translated at the store boundary into
:class:`StoreUnavailable`, so callers never import a driver to catch them.
"""

from __future__ import annotations

from typing import NamedTuple


class RunwrightError(Exception):
    """Runwright failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class RunNotFound(RunwrightError):
    """No run has that id."""


class InvalidInput(RunwrightError):
    """The input is not valid."""


class ConfigurationError(RunwrightError):
    """The configuration is not valid."""


class SchemaMismatch(ConfigurationError):
    """The database schema is not the one this code needs."""


class PayloadTooLarge(InvalidInput):
    """The trigger payload is larger than the configured limit."""


class EffectNotFound(RunwrightError):
    """The run has no effect for that tool call."""


class InvalidTransition(RunwrightError):
    """The run is not in a status that allows this change."""


class RanEffect(NamedTuple):
    """An effect a run journaled: its tool, the step that called it, and
    whether it completed (False: it started and its outcome is unknown)."""

    tool: str
    step_index: int
    completed: bool = True


class ThreadBusy(InvalidTransition):
    """A message to a thread whose agent takes none while a run of the thread
    is in progress (``on_new_message="reject"``)."""


class ForkRepeatsEffects(InvalidTransition):
    """A fork at that step would run again effects that already ran after it.

    The fork's model takes the run up again from that step, so it is likely
    to ask for the same effects again; they would run under the fork's own
    idempotency keys, which downstream deduplication does not recognise.
    ``effects`` names them in step order; ``rerun_effects=True`` (the CLI's
    ``--rerun-effects``) forks anyway."""

    # At most this many are named in the message; ``effects`` holds them all.
    SHOWN = 10

    def __init__(
        self,
        run_id: str,
        at_step: int,
        effects: list[RanEffect],
        *,
        how: str = "pass rerun_effects=True",
    ) -> None:
        self.run_id = run_id
        self.at_step = at_step
        self.effects = effects
        named = ", ".join(
            f"{e.tool} (step {e.step_index}{'' if e.completed else ', outcome unknown'})"
            for e in effects[: self.SHOWN]
        )
        if len(effects) > self.SHOWN:
            named += f" and {len(effects) - self.SHOWN} more"
        # The list last: a caller that clips long messages keeps what to do.
        super().__init__(
            f"run {run_id} ran effects after step {at_step}; a fork there would run them"
            " again under new idempotency keys, which downstream deduplication does not"
            f" catch (fork at a later step, or {how} to fork anyway): {named}"
        )


class CheckpointConflict(RunwrightError):
    """A checkpoint with a higher step index is already stored."""


class LeaseLostError(RunwrightError):
    """This execution no longer holds the run's claim; another owner carries it on."""


class ApprovalError(RunwrightError):
    """The approval cannot be decided."""


class ApprovalNotFound(ApprovalError):
    """No approval has that id."""


class ApprovalAlreadyDecided(ApprovalError):
    """The approval was already decided."""


class ApprovalExpired(ApprovalError):
    """The approval expired before it was decided."""


class RunNotWaiting(ApprovalError):
    """The run no longer waits for this approval (it ended or moved on)."""


class InvalidApprovalInput(ApprovalError, InvalidInput):
    """The approval id or the reason is malformed.

    Both an :class:`ApprovalError` (the decision cannot be made) and an
    :class:`InvalidInput` (the caller's input is bad), so handlers of either
    answer it."""


class InvalidApprovalId(InvalidApprovalInput, ApprovalNotFound):
    """That is not an approval id, so no approval has it."""


class WrongRequestKind(InvalidApprovalInput):
    """The request does not take that decision: an approval is approved or
    denied, a question is answered."""


class ScheduleNotFound(InvalidInput):
    """No schedule has that name."""


class DatasetNotFound(RunwrightError):
    """No dataset has that name (or that version)."""


class EvaluationNotFound(RunwrightError):
    """No evaluation has that id."""


class StoreUnavailable(RunwrightError):
    """The database or Redis could not be reached."""


class StoreRefused(RunwrightError):
    """The database refused a value or a statement."""


class ConstraintViolation(StoreRefused):
    """The database refused a write on a constraint; ``constraint`` names it,
    so the store can tell an expected race (a key holder) from a bug."""

    def __init__(self, message: str = "", constraint: str | None = None) -> None:
        super().__init__(message)
        self.constraint = constraint


class LocalStackError(RunwrightError):
    """The local stack (embedded Postgres and Redis) could not be started."""
