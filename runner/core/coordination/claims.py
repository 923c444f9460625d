"""Claiming a run: a Redis lease in front, the Postgres fencing epoch behind.

``acquire_run`` is step 0 of an execution. ``heartbeat`` renews both every
``ttl / 3``. ``check`` runs before every fenced write: a lease held by a newer
epoch fails fast; anything unclear (a missing key after a Redis restart, a
claimer that has not reached Postgres yet, Redis down) defers to the Postgres
fence, which is the authority. A claim refused is explained by ``refusal``:
who holds the run, or why it is not claimable.

The check answers from this process's memory while the lease is known to be
its own: Redis confirmed it (the claim's bind, a heartbeat's renewal) less
than half a TTL ago, by the monotonic clock. Nobody else can hold it then:
another claim needs the key gone, which only its expiry (a TTL after that
confirmation) or a lost Redis could do, and a claim after a lost Redis still
needs the Postgres claim lapsed, which the same heartbeat renewed. A process
stopped past that (SIGSTOP, a long pause: the monotonic clock runs on) asks
Redis again, and fails fast as before.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from runner.core.coordination.leases import Leases, Renewal
from store.errors import LeaseLostError, StoreUnavailable
from store.models import Ended, Fence, Run, RunStatus

if TYPE_CHECKING:
    from store.postgres import PostgresStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Heartbeat:
    cancel_requested: bool
    lease: Renewal | None  # None when Redis could not be reached


class Refusal(enum.Enum):
    """Why a claim was refused."""

    # Another owner has the run: it is executing somewhere else.
    HELD = "held"
    # The run has ended: there is nothing left to execute.
    ENDED = "ended"
    # Nobody has it, and it cannot be claimed now: it waits for a decision,
    # for its retry or for its concurrency key.
    NOT_CLAIMABLE = "not claimable"


@dataclass(frozen=True)
class NotClaimed:
    """A refused claim, as the store had the run right after: the run, and the
    owner holding it with its epoch (0: a claimer whose Postgres claim has not
    returned yet), if anyone held it."""

    run: Run
    owner: str | None = None
    epoch: int | None = None

    @property
    def why(self) -> Refusal:
        if self.run.ended:
            return Refusal.ENDED
        if self.owner is not None:
            return Refusal.HELD
        return Refusal.NOT_CLAIMABLE

    def __str__(self) -> str:
        run = self.run
        why = self.why
        if why is Refusal.ENDED:
            return f"run {run.id} is already {run.status.value}"
        if why is Refusal.HELD:
            epoch = "its claim pending" if self.epoch == 0 else f"epoch {self.epoch}"
            return f"run {run.id} is held by {self.owner} ({epoch})"
        text = f"run {run.id} is {run.status.value} and not claimable now"
        if run.retry_at is not None:
            text += f" (its retry is due at {run.retry_at.isoformat()})"
        elif run.status is RunStatus.QUEUED and run.concurrency_key is not None:
            text += " (it waits for its concurrency key)"
        return text


class Claims:
    def __init__(
        self,
        store: PostgresStore,
        leases: Leases | None,
        ttl_seconds: float,
        *,
        max_takeovers: int | None = None,
        now: Callable[[], datetime | None] = lambda: None,
    ) -> None:
        self.store = store
        # The time claims are measured from; None: Postgres's (runner/core/clock.py).
        self.now = now
        self.leases = leases
        self.ttl_seconds = ttl_seconds
        # None: a run may be taken over any number of times (store-level tools).
        self.max_takeovers = max_takeovers
        # Run id -> (epoch, monotonic time) Redis last confirmed this process's lease.
        self._confirmed: dict[str, tuple[int, float]] = {}

    @property
    def ttl_ms(self) -> int:
        return int(self.ttl_seconds * 1000)

    def acquire_run(self, run_id: str, owner: str) -> tuple[Fence, Run] | Ended | None:
        """Claim the run for ``owner``: its fence and the claimed run; None
        (quietly) if someone else has it or it is not claimable. A
        :class:`Ended` means the claim was a takeover of a run that kept
        crashing its executions: the store ended it ``failed/crashed``
        instead, and the caller hands on its concurrency key
        (``Deps.after_end``)."""
        if self.leases is not None and not self.leases.acquire(run_id, owner, self.ttl_ms):
            return None
        try:
            run = self.store.claim_run(
                run_id, owner, self.ttl_seconds, max_takeovers=self.max_takeovers, now=self.now()
            )
        except BaseException:
            self._release_pending(run_id, owner)
            raise
        if isinstance(run, Ended):
            log.error("run %s: %s", run_id, run.run.error.message if run.run.error else "crashed")
            self._release_pending(run_id, owner)
            return run
        if run is None or run.claim is None:
            self._release_pending(run_id, owner)
            return None
        claim = run.claim
        if self.leases is not None:
            try:
                if self.leases.bind(run_id, owner, claim.epoch, self.ttl_ms):
                    self._confirm(run_id, claim.epoch)
            except StoreUnavailable:
                log.warning("could not record epoch %s in the lease of %s", claim.epoch, run_id)
        return Fence(run_id=run_id, owner=owner, epoch=claim.epoch), run

    def refusal(self, run_id: str) -> NotClaimed:
        """Why a claim of the run was just refused. Postgres's claim names the
        owner of a running run; otherwise the Redis lease may name a claimer
        still on its way to Postgres (or one whose run just left `running`)."""
        run = self.store.get_run(run_id)
        if run.ended:
            return NotClaimed(run)
        if run.status is RunStatus.RUNNING and run.claim is not None:
            return NotClaimed(run, run.claim.owner, run.claim.epoch)
        holder = None
        if self.leases is not None:
            with contextlib.suppress(StoreUnavailable):  # only for the explanation
                holder = self.leases.holder(run_id)
        if holder is None:
            return NotClaimed(run)
        return NotClaimed(run, holder.owner, holder.epoch)

    def _release_pending(self, run_id: str, owner: str) -> None:
        if self.leases is None:
            return
        with contextlib.suppress(StoreUnavailable):  # it expires on its own
            self.leases.release(run_id, owner, 0)

    def heartbeat(self, fence: Fence) -> Heartbeat:
        """Renew the Postgres claim, then the lease (re-created if Redis lost it).

        Raises LeaseLostError if Postgres says the claim is gone.
        """
        cancel = self.store.renew(fence, self.ttl_seconds, now=self.now())
        renewal: Renewal | None = None
        if self.leases is not None:
            try:
                renewal = self.leases.renew(fence.run_id, fence.owner, fence.epoch, self.ttl_ms)
            except StoreUnavailable as exc:
                log.warning("lease renewal of %s skipped: %s", fence.run_id, exc)
            else:
                if renewal is Renewal.RESTORED:
                    log.info("re-created the lost lease of run %s", fence.run_id)
                if renewal is Renewal.FOREIGN:
                    self._confirmed.pop(fence.run_id, None)
                else:
                    self._confirm(fence.run_id, fence.epoch)
        return Heartbeat(cancel_requested=cancel, lease=renewal)

    def _confirm(self, run_id: str, epoch: int) -> None:
        self._confirmed[run_id] = (epoch, time.monotonic())

    def answers_from_memory(self, fence: Fence) -> bool:
        """Whether :meth:`check` asks nothing of Redis now."""
        return self.leases is None or self._known_own(fence)

    def _known_own(self, fence: Fence) -> bool:
        """Redis confirmed this lease to this epoch less than half a TTL ago."""
        known = self._confirmed.get(fence.run_id)
        return (
            known is not None
            and known[0] == fence.epoch
            and time.monotonic() - known[1] < self.ttl_seconds / 2
        )

    def check(self, fence: Fence) -> None:
        """Fail fast if the lease shows that a newer epoch took the run over
        (from memory while the lease is known to be this fence's: the module's
        docstring says why that is the same answer)."""
        if self.leases is None or self._known_own(fence):
            return
        try:
            holder = self.leases.holder(fence.run_id)
        except StoreUnavailable:
            return  # the Postgres fence decides
        if holder is not None and holder.owner != fence.owner and holder.epoch > fence.epoch:
            raise LeaseLostError(
                f"run {fence.run_id} was taken over (epoch {holder.epoch} > {fence.epoch})"
            )

    def release(self, fence: Fence) -> None:
        if self._confirmed.get(fence.run_id, (None, 0.0))[0] == fence.epoch:
            self._confirmed.pop(fence.run_id, None)
        if self.leases is None:
            return
        with contextlib.suppress(StoreUnavailable):  # the TTL removes it
            self.leases.release(fence.run_id, fence.owner, fence.epoch)
