"""An execution's admission to a model call under its model's limits
(docs/flow-control.md).

Before a step's model call, the call takes its model's limit in Redis
(:class:`~runner.core.limits.limiter.Limiter`): one request, the tokens it is
expected to take, a concurrency slot. A call that can go within a short wait
(``RUNWRIGHT_LIMIT_WAIT_SECONDS``) waits in place; a longer wait raises
:class:`Park`, and the execution parks the run: back to the queue until the
time it may go, holding no lease and no worker thread. Nothing of the step
was journaled yet, so parking repeats no model call and no effect.

After the call, its grant is finished with the tokens the provider reported,
and the waiters whose turn it now is are handed back to be woken. A 429 or
the ``x-ratelimit-*`` headers of an answer lower the limit for every process
(:meth:`Admission.learn`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import redis

from runner.core.clock import SYSTEM, Clock
from runner.core.coordination.leases import redis_errors
from runner.core.errors import RunwrightError
from runner.core.limits.limiter import Denial, Grant, Limiter, Reason, Waiter
from runner.core.limits.model_limits import ModelLimit, ModelLimits
from runner.core.limits.model_limits import limits as in_code
from runner.core.runtime import in_io
from store.models import Run

log = logging.getLogger(__name__)

# How many parked runs a call's end wakes, in turn order: what it gave back
# may let more than one go; those that cannot park again.
WAKE_AT_ONCE = 3

# How long a run refused for its turn parks (its place kept meanwhile: the
# limiter's grace is longer); it comes back sooner when its turn comes.
TURN_PARK_SECONDS = 5.0

# How often a call waiting in place for a concurrency slot looks again.
SLOT_POLL_SECONDS = 0.05

# The tenant of a run whose agent declares none: all such runs take turns as one.
NO_TENANT = "-"


class Park(RunwrightError):
    """The step's model call cannot go before ``at``: park the run on ``key``.
    The execution catches it and parks the run; it never reaches a caller."""

    def __init__(self, key: str, at: datetime, reason: Reason, wake: Sequence[str] = ()) -> None:
        super().__init__(f"parked on {key} until {at:%H:%M:%S} ({reason.value})")
        self.key = key
        self.at = at
        self.reason = reason
        # The waiters whose turn it is, to be sent now: the limit has room
        # and they are parked, so nobody else would wake them.
        self.wake = tuple(wake)


@dataclass(frozen=True)
class Admitted:
    """A call that may go: finish its grant after the call (:meth:`Admission.leave`)."""

    grant: Grant


def waiter_of(run: Run, weights: Mapping[str, int] | None = None) -> Waiter:
    """How a run waits its turn: by its tenant (of ``weights[tenant]`` turns
    a round, 1 unless given), then its priority."""
    tenant = run.tenant or NO_TENANT
    return Waiter(run.id, tenant, run.priority, (weights or {}).get(tenant, 1))


class Admission:
    """Model calls admitted under the limits in force, taken in ``limiter``'s
    Redis: those declared in code (:func:`~runner.core.limits.model_limits.register`,
    read at each call, so an agent module imported later counts), with the
    patterns of ``env`` (``RUNWRIGHT_MODEL_LIMITS``) replacing theirs.
    ``wait_seconds``: how long a call waits in place before its run parks."""

    def __init__(
        self,
        limiter: Limiter,
        env: ModelLimits,
        *,
        wait_seconds: float,
        clock: Clock = SYSTEM,
        weights: Mapping[str, int] | None = None,
    ) -> None:
        self.limiter = limiter
        self.env = env
        # Tenants' turns a round when they contend (RUNWRIGHT_TENANT_WEIGHTS).
        self.weights = dict(weights or {})
        self.wait_seconds = wait_seconds
        self.clock = clock

    def limit_for(self, model: str) -> ModelLimit | None:
        """The limit of ``model`` (the most specific pattern's), or None."""
        if not len(in_code):
            found = self.env.for_model(model)
        else:
            found = in_code.overlaid(self.env).for_model(model)
        return None if found is None else found[1]

    async def enter(
        self,
        model: str,
        tokens: int,
        run: Run,
        waited: Callable[[float], Awaitable[bool]],
        *,
        hold_seconds: float | None = None,
    ) -> Admitted | None:
        """Take ``model``'s limit for a call expected to take ``tokens``:
        :class:`Admitted`, or None if the run was aborted while it waited in
        place (``waited(seconds)`` waits and says whether it was). Raises
        :class:`Park` when the call cannot go within the short wait, and
        :class:`~runner.core.limits.limiter.CallTooLarge` when it never can.
        The key is the model's name: each deployment its own budget, the
        matched pattern giving only the numbers."""
        limit = self.limit_for(model)
        assert limit is not None
        got = await self._acquire(model, limit, tokens, run, waited, hold_seconds)
        return None if got is None else Admitted(got)

    async def _acquire(
        self,
        key: str,
        limit: ModelLimit,
        tokens: int,
        run: Run,
        waited: Callable[[float], Awaitable[bool]],
        hold: float | None,
    ) -> Grant | None:
        """Take ``limit`` under ``key``, waiting in place up to the short wait:
        the grant, None if aborted meanwhile, or :class:`Park`.

        Refused for its turn while the limit has room, a caller that is not
        among the next in turn does not hold its thread waiting: it parks a
        while (its place kept), and wakes those whose turn it is, who may be
        parked themselves; nobody else would wake them, since no call is in
        flight to end."""
        waiter = waiter_of(run, self.weights)
        deadline = time.monotonic() + self.wait_seconds
        while True:
            got = await in_io(
                self.limiter.acquire, key, limit, tokens, run.id, waiter=waiter, hold_seconds=hold
            )
            if isinstance(got, Grant):
                return got
            pause = got.retry_after
            ahead: list[str] = []
            if got.reason is Reason.TURN:
                turns = await in_io(self.limiter.next_waiters, key, WAKE_AT_ONCE)
                ahead = [turn.waiter for turn in turns]
                if run.id not in ahead:
                    deadline = 0.0  # not among the next: park now
            elif got.reason is Reason.CONCURRENCY:
                # A slot frees when a call ends, any moment: look again soon.
                # (The denial's time is when the oldest holder's slot would
                # expire, the bound for a holder that died.)
                pause = min(pause, SLOT_POLL_SECONDS)
            if time.monotonic() + pause > deadline:
                if got.reason is Reason.TURN:
                    at = self.clock.now() + timedelta(seconds=TURN_PARK_SECONDS)
                    raise Park(key, at, got.reason, wake=ahead)
                raise Park(key, self._at(got), got.reason)
            if await waited(pause):
                await in_io(self.limiter.withdraw, key, run.id)
                return None

    async def enter_run(
        self,
        limits: list[tuple[str, int]],
        run: Run,
        waited: Callable[[float], Awaitable[bool]],
        *,
        hold_seconds: float,
    ) -> list[Grant] | None:
        """Take the run's own limits before its first step (``Agent.run_limits``:
        a key's ``Concurrency`` above 1, the agent's ``max_running``), a slot
        each, held ``hold_seconds`` unless renewed (:meth:`renew`): the
        grants, or None if the run was aborted while it waited. Raises
        :class:`Park` as :meth:`enter` does; the slots taken before it are
        given back."""
        taken: list[Grant] = []
        try:
            for key, many in limits:
                got = await self._slot(key, many, run, waited, hold_seconds)
                if got is None:
                    await self.leave_run(taken)
                    return None
                taken.append(got)
        except BaseException:
            await asyncio.shield(self.leave_run(taken))
            raise
        return taken

    async def _slot(
        self,
        key: str,
        many: int,
        run: Run,
        waited: Callable[[float], Awaitable[bool]],
        hold: float,
    ) -> Grant | None:
        # Its turn comes when a run of the key ends its execution (which wakes
        # it); the slot's hold is the bound if that run died.
        return await self._acquire(key, ModelLimit(max_concurrent=many), 0, run, waited, hold)

    async def renew(self, grants: list[Grant], hold_seconds: float) -> None:
        """The execution holding ``grants`` is alive: hold their slots on."""
        for grant in grants:
            await in_io(self.limiter.renew, grant, hold_seconds)

    async def leave_run(self, grants: list[Grant]) -> list[str]:
        """Give back the run's slots: the waiters whose turn it now is."""
        woken: list[str] = []
        for grant in grants:
            await in_io(self.limiter.release, grant)
            woken += [turn.waiter for turn in await in_io(self.limiter.next_waiters, grant.key)]
        return woken

    def _at(self, denial: Denial) -> datetime:
        return self.clock.now() + timedelta(seconds=denial.retry_after)

    async def leave(self, admitted: Admitted, used_tokens: int) -> list[str]:
        """Finish the call's grant with the tokens it used (0: it failed or
        was cancelled; its request still counts): the ids of the waiters whose
        turn it now is, to be woken."""
        grant = admitted.grant
        await in_io(self.limiter.finish, grant, used_tokens)
        turns = await in_io(self.limiter.next_waiters, grant.key, WAKE_AT_ONCE)
        return [turn.waiter for turn in turns]

    async def learn(
        self,
        model: str,
        *,
        retry_after: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """What the provider said of ``model``'s limits, for every process: a
        429 (``retry_after``, 0 when it named no pause), or the
        ``x-ratelimit-*`` headers of an answer."""
        news = rate_limit_headers(headers or {})
        if retry_after is None and not news:
            return
        await in_io(self.limiter.learn, model, retry_after=retry_after, **news)

    async def note_throttled(self, model: str) -> None:
        """A 429 from ``model``'s provider, limit or not: kept a day in Redis
        for ``runwright doctor`` (a model that sees 429s and has no limit)."""
        await in_io(note_throttled, self.limiter.redis, model)

    async def withdraw(self, key: str, run_id: str) -> None:
        """A parked run that will not come back (cancelled) gives up its turn."""
        await in_io(self.limiter.withdraw, key, run_id)


# Models whose providers answered 429, and when last (epoch seconds): a hash
# whose fields expire with the key, a day after the last 429.
THROTTLED_KEY = "runwright:throttled"
THROTTLED_SECONDS = 86400


def note_throttled(client: redis.Redis, model: str) -> None:
    """Record a 429 from ``model``'s provider (see :data:`THROTTLED_KEY`)."""
    with redis_errors():
        pipe = client.pipeline(transaction=False)
        pipe.hset(THROTTLED_KEY, model, f"{time.time():.3f}")
        pipe.expire(THROTTLED_KEY, THROTTLED_SECONDS)
        pipe.execute()


def throttled_models(client: redis.Redis) -> dict[str, float]:
    """The models whose providers answered 429 in the last day, with when last."""
    with redis_errors():
        raw = client.hgetall(THROTTLED_KEY)
    found = {}
    for name, at in raw.items():
        model = name.decode() if isinstance(name, bytes) else str(name)
        try:
            found[model] = float(at)
        except (TypeError, ValueError):
            continue
    return found


# OpenAI-compatible providers' headers, and the names learn() takes them by.
_HEADERS = {
    "x-ratelimit-remaining-requests": "remaining_requests",
    "x-ratelimit-remaining-tokens": "remaining_tokens",
    "x-ratelimit-limit-requests": "limit_requests",
    "x-ratelimit-limit-tokens": "limit_tokens",
}


def rate_limit_headers(headers: Mapping[str, str]) -> dict[str, int]:
    """The ``x-ratelimit-*`` counts in ``headers`` (litellm passes them on as
    they are, and prefixed ``llm_provider-``); a value that is not a whole
    number is left out."""
    found: dict[str, int] = {}
    for name, value in headers.items():
        bare = name.lower().removeprefix("llm_provider-")
        field = _HEADERS.get(bare)
        if field is None:
            continue
        try:
            count = int(str(value).strip())
        except ValueError:
            continue
        if count >= 0:
            found[field] = count
    return found
