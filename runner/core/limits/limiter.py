"""The limiter: model limits taken in Redis, shared by every process.

One Lua script per operation, so that no check and its write can be split by
another process, and time from the Redis server (``TIME``), so that workers'
clocks do not matter. Each limit key (a model deployment, say) has these Redis
keys, all under one hash tag ``{<key>}`` (one cluster slot):

``<prefix>{<key>}:state``
    A hash: the declared limit (``rpm``, ``tpm``, ``max_concurrent``, written by
    every acquisition, for :meth:`Limiter.learn` and :meth:`Limiter.state`),
    the sums of the two logs (``requests``, ``tokens``), what the provider
    taught (``factor``, ``factor_at``, ``blocked_until``, ``lowered_at``),
    whose turn it is (``turn``, ``credit``), and a counter of arrivals.
``<prefix>{<key>}:requests`` and ``:tokens``
    Sliding-window logs: sorted sets whose members are ``<id>:<amount>``,
    scored by when they were taken. What a window holds is the sum of the
    amounts scored within it. A log, not a token bucket, because a bucket of
    capacity C lets 2C through in some window of a minute (a full bucket, then
    its refill), and a provider that counts per minute would refuse the second
    C; a log never lets more than C through in any window.
``<prefix>{<key>}:holders``
    A sorted set of who holds a concurrency slot, scored by when the slot
    expires (a holder that died frees it then); ``:slots`` maps each holder to
    the grant that holds its slot.
``<prefix>{<key>}:grant:<id>``
    A grant's reservation (tokens, when), kept until it is finished or released
    (which delete it: finishing twice changes nothing), or expires.
``<prefix>{<key>}:ring``, ``:queue:<tenant>``, ``:waiters``, ``:deadlines``, ``:weights``
    Fair admission (see :class:`Waiter`): the tenants with waiters in turn
    order, each tenant's waiters by priority then arrival, each waiter's
    tenant and deadline, and each tenant's weight.

Every key of a limit key expires ``idle_seconds`` after its last write (or
after the end of a longer block): an idle key forgets everything.

Times inside the scripts are whole microseconds since the epoch; the Python
API speaks seconds.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Any

import redis

from runner.core.coordination.leases import redis_errors
from runner.core.limits.model_limits import ModelLimit
from store.errors import ConfigurationError

PREFIX = "runwright:limit:"
MAX_PRIORITY = 9
MAX_NAME_LENGTH = 200
MICROSECONDS = 1_000_000

# Shared by every script: key names, the clock, the logs, the factor, the
# wait structures. KEYS[1] is the limit key's base name.
_COMMON = """
local base = KEYS[1]
local K_STATE = base .. ':state'
local K_LOG = {requests = base .. ':requests', tokens = base .. ':tokens'}
local K_HOLDERS = base .. ':holders'
local K_SLOTS = base .. ':slots'
local K_RING = base .. ':ring'
local K_WAITERS = base .. ':waiters'
local K_DEADLINES = base .. ':deadlines'
local K_WEIGHTS = base .. ':weights'
local function queue_key(tenant) return base .. ':queue:' .. tenant end

local function int(x) return string.format('%.0f', x) end

-- ARGV[1]: a time given by the caller (tests), else the server's.
local function clock(given)
  if given ~= '' then return tonumber(given) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function state_number(field, default)
  local v = redis.call('HGET', K_STATE, field)
  if v then return tonumber(v) end
  return default
end

local function amount_of(member)
  return tonumber(string.match(member, ':(%-?%d+)$'))
end

-- Drop what left the window; the sum of what is in it.
local function log_sum(kind, now, window)
  local log = K_LOG[kind]
  local cutoff = int(now - window)
  local old = redis.call('ZRANGEBYSCORE', log, '-inf', cutoff)
  if #old > 0 then
    local freed = 0
    for _, member in ipairs(old) do freed = freed + amount_of(member) end
    redis.call('ZREMRANGEBYSCORE', log, '-inf', cutoff)
    redis.call('HINCRBY', K_STATE, kind, -freed)
  end
  if redis.call('ZCARD', log) == 0 then
    redis.call('HSET', K_STATE, kind, 0)
    return 0
  end
  return state_number(kind, 0)
end

local function log_add(kind, member, amount, at)
  if amount == 0 then return end
  redis.call('ZADD', K_LOG[kind], int(at), member .. ':' .. int(amount))
  redis.call('HINCRBY', K_STATE, kind, amount)
end

-- Microseconds until `need` more fits under `cap`, by the entries leaving the
-- window oldest first; nil if it cannot fit under `cap` at all.
local function log_wait(kind, sum, need, cap, now, window)
  if sum + need <= cap then return 0 end
  if need > cap then return nil end
  local freed, start = 0, 0
  while true do
    local page = redis.call('ZRANGE', K_LOG[kind], start, start + 99, 'WITHSCORES')
    if #page == 0 then return window end
    for i = 1, #page, 2 do
      freed = freed + amount_of(page[i])
      if sum - freed + need <= cap then
        return math.max(0, tonumber(page[i + 1]) + window - now)
      end
    end
    start = start + 100
  end
end

-- The share of the declared limit in force: lowered by the provider, rising
-- back by the whole of it over `rise` microseconds after a block ends.
local function factor(now, rise)
  local f = state_number('factor', 1)
  if f >= 1 then return 1 end
  local from = math.max(state_number('factor_at', 0), state_number('blocked_until', 0))
  if now <= from then return f end
  return math.min(1, f + (now - from) / rise)
end

local function cap(limit, f) return math.max(1, math.floor(limit * f)) end

local function expire_holders(now)
  local gone = redis.call('ZRANGEBYSCORE', K_HOLDERS, '-inf', int(now))
  for _, holder in ipairs(gone) do redis.call('HDEL', K_SLOTS, holder) end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', K_HOLDERS, '-inf', int(now)) end
end

local function free_slot(holder, grant)
  if redis.call('HGET', K_SLOTS, holder) == grant then
    redis.call('HDEL', K_SLOTS, holder)
    redis.call('ZREM', K_HOLDERS, holder)
  end
end

local function weight(tenant)
  return tonumber(redis.call('HGET', K_WEIGHTS, tenant) or '1')
end

local function forget_waiter(waiter)
  local tenant = redis.call('HGET', K_WAITERS, waiter)
  redis.call('HDEL', K_WAITERS, waiter)
  redis.call('ZREM', K_DEADLINES, waiter)
  if not tenant then return end
  redis.call('ZREM', queue_key(tenant), waiter)
  if redis.call('ZCARD', queue_key(tenant)) == 0 then
    redis.call('LREM', K_RING, 0, tenant)
    redis.call('HDEL', K_WEIGHTS, tenant)
  end
end

local function prune_waiters(now)
  for _, waiter in ipairs(redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', int(now))) do
    forget_waiter(waiter)
  end
end

-- The waiter whose turn it is, and its tenant.
local function head()
  local tenant = redis.call('LINDEX', K_RING, 0)
  if not tenant then return nil, nil end
  return redis.call('ZRANGE', queue_key(tenant), 0, 0)[1], tenant
end

-- Admissions left to the head tenant in its turn.
local function credit(tenant)
  if redis.call('HGET', K_STATE, 'turn') == tenant then return state_number('credit', 1) end
  return weight(tenant)
end

-- The head waiter was admitted: it leaves, and its tenant's turn goes on or passes.
local function admitted(waiter, tenant)
  local left = credit(tenant) - 1
  forget_waiter(waiter)
  if redis.call('LINDEX', K_RING, 0) ~= tenant then
    redis.call('HDEL', K_STATE, 'turn', 'credit')
  elseif left <= 0 then
    redis.call('RPUSH', K_RING, redis.call('LPOP', K_RING))
    redis.call('HDEL', K_STATE, 'turn', 'credit')
  else
    redis.call('HSET', K_STATE, 'turn', tenant, 'credit', left)
  end
end

-- Every key of this limit key lives `ttl` microseconds past its last write,
-- or past the end of a longer block.
local function touch(now, ttl)
  local keep = math.max(ttl, state_number('blocked_until', 0) - now + ttl)
  local ms = int(math.ceil(keep / 1000))
  for _, key in ipairs({K_STATE, K_LOG.requests, K_LOG.tokens, K_HOLDERS, K_SLOTS,
                        K_RING, K_WAITERS, K_DEADLINES, K_WEIGHTS}) do
    redis.call('PEXPIRE', key, ms)
  end
  for _, tenant in ipairs(redis.call('LRANGE', K_RING, 0, -1)) do
    redis.call('PEXPIRE', queue_key(tenant), ms)
  end
end
"""

# KEYS: base, grant record. ARGV: now, window, rpm, tpm, max_concurrent (0:
# none), tokens, holder, grant id, hold, waiter ('' for none), tenant,
# priority, weight, grace, poll, ttl.
_ACQUIRE = (
    _COMMON
    + """
local now = clock(ARGV[1])
local window = tonumber(ARGV[2])
local rpm, tpm, most = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local tokens, holder, grant = tonumber(ARGV[6]), ARGV[7], ARGV[8]
local hold, waiter, tenant = tonumber(ARGV[9]), ARGV[10], ARGV[11]
local priority, tenant_weight = tonumber(ARGV[12]), tonumber(ARGV[13])
local grace, poll, ttl = tonumber(ARGV[14]), tonumber(ARGV[15]), tonumber(ARGV[16])

redis.call('HSET', K_STATE, 'rpm', rpm, 'tpm', tpm, 'max_concurrent', most)
prune_waiters(now)
expire_holders(now)

-- Whether it is this caller's turn: no one waits, or it heads the head tenant.
local first, first_tenant = head()
local turn = first == nil or first == waiter

-- What the limits allow now; the most constraining part says how long.
local reason, wait = nil, 0
local function deny(why, micros)
  if reason == nil or micros > wait then reason, wait = why, micros end
end
local blocked = state_number('blocked_until', 0)
if blocked > now then deny('blocked', blocked - now) end
local f = factor(now, window)
if rpm > 0 then
  local w = log_wait('requests', log_sum('requests', now, window), 1, cap(rpm, f), now, window)
  if w == nil then w = window end
  if w > 0 then deny('requests', w) end
end
if tpm > 0 then
  local sum = log_sum('tokens', now, window)
  local w = log_wait('tokens', sum, tokens, cap(tpm, f), now, window)
  if w == nil then
    -- More than the lowered limit allows: wait for the factor to rise enough.
    local rise = (tokens / tpm - f) * window
    w = math.max(rise, log_wait('tokens', sum, tokens, tpm, now, window) or window)
  end
  if w > 0 then deny('tokens', w) end
end
if most > 0 then
  local others = redis.call('ZCARD', K_HOLDERS)
  if redis.call('ZSCORE', K_HOLDERS, holder) then others = others - 1 end
  if others >= most then
    local soonest = redis.call('ZRANGE', K_HOLDERS, 0, 0, 'WITHSCORES')
    deny('concurrency', math.max(0, tonumber(soonest[2]) - now))
  end
end

if turn and reason == nil then
  log_add('requests', grant, rpm > 0 and 1 or 0, now)
  log_add('tokens', grant, tpm > 0 and tokens or 0, now)
  if most > 0 then
    redis.call('ZADD', K_HOLDERS, int(now + hold), holder)
    redis.call('HSET', K_SLOTS, holder, grant)
  end
  redis.call('HSET', KEYS[2], 'tokens', tpm > 0 and tokens or 0, 'at', int(now),
             'request', rpm > 0 and 1 or 0, 'metered', tpm > 0 and 1 or 0)
  redis.call('PEXPIRE', KEYS[2], int(math.ceil((hold + 2 * window) / 1000)))
  if first ~= nil then admitted(first, first_tenant) end
  local next_waiter, next_tenant = head()
  touch(now, ttl)
  return {'grant', int(now), next_waiter or '', next_tenant or ''}
end

if not turn and (reason == nil or wait < poll) then reason, wait = 'turn', poll end
if waiter ~= '' then
  if not redis.call('HGET', K_WAITERS, waiter) then
    -- Higher priority first, then arrival (a counter: exact, unlike clocks).
    local arrival = redis.call('HINCRBY', K_STATE, 'arrivals', 1)
    local queue = queue_key(tenant)
    -- A tenant is in the ring exactly while its queue holds someone.
    if redis.call('ZCARD', queue) == 0 then redis.call('RPUSH', K_RING, tenant) end
    redis.call('ZADD', queue, int((9 - priority) * 1e12 + arrival), waiter)
    redis.call('HSET', K_WAITERS, waiter, tenant)
  end
  redis.call('HSET', K_WEIGHTS, tenant, tenant_weight)
  redis.call('ZADD', K_DEADLINES, int(now + wait + grace), waiter)
end
touch(now, ttl)
return {'deny', int(now), reason, int(wait)}
"""
)

# KEYS: base, grant record. ARGV: now, window, holder, grant id, used tokens
# ('' for a release: the call never went), ttl.
_FINISH = (
    _COMMON
    + """
local now = clock(ARGV[1])
local window, holder, grant = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local went, ttl = ARGV[5] ~= '', tonumber(ARGV[6])
free_slot(holder, grant)
local record = redis.call('HMGET', KEYS[2], 'tokens', 'at', 'request', 'metered')
if not record[2] then
  return 0  -- finished already, or expired
end
redis.call('DEL', KEYS[2])
local reserved, at = tonumber(record[1]), tonumber(record[2])
local used = went and tonumber(ARGV[5]) or 0
log_sum('tokens', now, window)
log_sum('requests', now, window)
if record[4] == '1' then
  if redis.call('ZREM', K_LOG.tokens, grant .. ':' .. int(reserved)) == 1 then
    redis.call('HINCRBY', K_STATE, 'tokens', -reserved)
  end
  if at > now - window then
    log_add('tokens', grant, used, at)
  elseif used > reserved then
    -- The reservation has left the window already: the excess counts from now.
    log_add('tokens', grant .. '+', used - reserved, now)
  end
end
if not went and record[3] == '1' then
  if redis.call('ZREM', K_LOG.requests, grant .. ':1') == 1 then
    redis.call('HINCRBY', K_STATE, 'requests', -1)
  end
end
touch(now, ttl)
return 1
"""
)

# KEYS: base. ARGV: now, holder, grant id, hold, ttl. The holder's slot, if
# it is still this grant's, is held ``hold`` from now.
_RENEW = (
    _COMMON
    + """
local now = clock(ARGV[1])
local holder, grant, hold, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
expire_holders(now)
if redis.call('HGET', K_SLOTS, holder) ~= grant then return 0 end
redis.call('ZADD', K_HOLDERS, 'XX', int(now + hold), holder)
touch(now, ttl)
return 1
"""
)

# KEYS: base. ARGV: now, window, retry_after ('' for none: no 429), remaining
# requests, remaining tokens, limit requests, limit tokens ('' for unknown), ttl.
_LEARN = (
    _COMMON
    + """
local now = clock(ARGV[1])
local window, ttl = tonumber(ARGV[2]), tonumber(ARGV[8])
local rpm, tpm = state_number('rpm', 0), state_number('tpm', 0)
local f = factor(now, window)
local lowered = f
-- A 429 halves the limit, once per sixtieth of a window (a burst of 429s
-- seen by many workers at once is one signal), never below a tenth.
if ARGV[3] ~= '' then
  if now - state_number('lowered_at', 0) >= window / 60 then
    lowered = math.max(0.1, f / 2)
    redis.call('HSET', K_STATE, 'lowered_at', int(now))
  end
  local until_ = now + tonumber(ARGV[3])
  if until_ > state_number('blocked_until', 0) then
    redis.call('HSET', K_STATE, 'blocked_until', int(until_))
  end
end
-- A provider's own limit below the declared one lowers the share to match.
if ARGV[6] ~= '' and rpm > 0 then lowered = math.min(lowered, tonumber(ARGV[6]) / rpm) end
if ARGV[7] ~= '' and tpm > 0 then lowered = math.min(lowered, tonumber(ARGV[7]) / tpm) end
lowered = math.max(0.1, lowered)
if lowered < f then
  redis.call('HSET', K_STATE, 'factor', tostring(lowered), 'factor_at', int(now))
  f = lowered
end
-- Less remaining than the logs think (someone else uses the deployment):
-- what is missing counts as taken now.
local function remaining(kind, limit, said)
  if said == '' or limit <= 0 then return end
  local free = cap(limit, f) - log_sum(kind, now, window)
  local taken = free - tonumber(said)
  if taken > 0 then
    log_add(kind, 'learned.' .. redis.call('HINCRBY', K_STATE, 'seq', 1), taken, now)
  end
end
remaining('requests', rpm, ARGV[4])
remaining('tokens', tpm, ARGV[5])
touch(now, ttl)
return int(now)
"""
)

# KEYS: base. ARGV: now, count.
_NEXT = (
    _COMMON
    + """
local now = clock(ARGV[1])
prune_waiters(now)
local ring = redis.call('LRANGE', K_RING, 0, -1)
local taken, out = {}, {}
local i = 1
local left = ring[1] and credit(ring[1]) or 0
while #out < tonumber(ARGV[2]) * 2 and #ring > 0 do
  local tenant = ring[i]
  local at = taken[tenant] or 0
  local waiter = redis.call('ZRANGE', queue_key(tenant), at, at)[1]
  if waiter == nil then
    table.remove(ring, i)
    if i > #ring then i = 1 end
    if ring[i] then left = weight(ring[i]) end
  else
    out[#out + 1] = waiter
    out[#out + 1] = tenant
    taken[tenant] = at + 1
    left = left - 1
    if left <= 0 then
      i = i % #ring + 1
      left = weight(ring[i])
    end
  end
end
return out
"""
)

# KEYS: base. ARGV: waiter.
_WITHDRAW = (
    _COMMON
    + """
local was = redis.call('HEXISTS', K_WAITERS, ARGV[1])
forget_waiter(ARGV[1])
return was
"""
)

# KEYS: base. ARGV: now.
_STATE = (
    _COMMON
    + """
local now = clock(ARGV[1])
local window = tonumber(ARGV[2])
prune_waiters(now)
expire_holders(now)
local f = factor(now, window)
local out = {
  'now', int(now), 'factor', tostring(f),
  'rpm', int(state_number('rpm', 0)), 'tpm', int(state_number('tpm', 0)),
  'max_concurrent', int(state_number('max_concurrent', 0)),
  'requests', int(log_sum('requests', now, window)),
  'tokens', int(log_sum('tokens', now, window)),
  'blocked_until', int(state_number('blocked_until', 0)),
  'holders', table.concat(redis.call('ZRANGE', K_HOLDERS, 0, -1), '\\n'),
}
local tenants = {}
for _, tenant in ipairs(redis.call('LRANGE', K_RING, 0, -1)) do
  tenants[#tenants + 1] = tenant .. '\\t' .. redis.call('ZCARD', queue_key(tenant))
end
out[#out + 1] = 'tenants'
out[#out + 1] = table.concat(tenants, '\\n')
return out
"""
)


class CallTooLarge(ConfigurationError):
    """The call needs more tokens than its model's whole tokens-per-minute
    limit: it could never go, however long it waited."""


class Reason(enum.StrEnum):
    """Which part of a limit denied an acquisition."""

    BLOCKED = "blocked"  # the provider asked for a pause (learn(retry_after=...))
    REQUESTS = "requests"  # requests per minute
    TOKENS = "tokens"  # tokens per minute
    CONCURRENCY = "concurrency"  # calls in flight
    TURN = "turn"  # others wait, and it is not this caller's turn


@dataclass(frozen=True)
class Waiter:
    """A caller that waits its turn when a key is contended.

    ``id`` names the waiting thing (a run) and stays the same on every attempt;
    ``tenant`` names whose it is. Tenants take turns; within a tenant, higher
    ``priority`` (0 to 9) goes first, then earlier arrival. A tenant of
    ``weight`` N is admitted N times in its turn."""

    id: str
    tenant: str
    priority: int = 0
    weight: int = 1

    def __post_init__(self) -> None:
        _check_name("a waiter's id", self.id)
        _check_name("a tenant", self.tenant)
        if not _whole(self.priority) or not 0 <= self.priority <= MAX_PRIORITY:
            raise ConfigurationError(
                f"a priority must be a whole number from 0 to {MAX_PRIORITY}, "
                f"not {self.priority!r:.40}"
            )
        if not _whole(self.weight) or not 1 <= self.weight <= 1000:
            raise ConfigurationError(
                f"a tenant's weight must be a whole number from 1 to 1000, not {self.weight!r:.40}"
            )


@dataclass(frozen=True)
class Turn:
    """A waiter whose turn it is: the one to wake."""

    waiter: str
    tenant: str


@dataclass(frozen=True)
class Grant:
    """An acquisition that went through: finish it after the call, or release
    it if the call never went. ``at`` is the Redis server's time (epoch
    seconds); ``next`` is the waiter whose turn it now is, if any."""

    key: str
    id: str
    holder: str
    tokens: int
    at: float
    next: Turn | None = None


@dataclass(frozen=True)
class Denial:
    """An acquisition that did not go through: nothing was taken. It may go in
    ``retry_after`` seconds at the soonest, by the part that denied it
    (``reason``, the most constraining one); a denied waiter keeps its place
    for ``retry_after`` plus the limiter's grace."""

    key: str
    reason: Reason
    retry_after: float
    at: float


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_name(what: str, value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_LENGTH:
        raise ConfigurationError(
            f"{what} must be a non-empty string of at most {MAX_NAME_LENGTH} characters, "
            f"not {value!r:.40}"
        )
    if any(not char.isprintable() for char in value):
        raise ConfigurationError(f"{what} must hold printable characters only, not {value!r:.40}")
    return value


def _micros(seconds: float) -> int:
    return round(seconds * MICROSECONDS)


def _seconds(micros: Any) -> float:
    return int(micros) / MICROSECONDS


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class Limiter:
    """Model limits in one Redis database, shared by every process that uses it.

    ``window_seconds`` is the "minute" of requests and tokens per minute, and
    the time a lowered limit takes to rise back fully (tests shorten it);
    ``hold_seconds``, how long a concurrency slot outlives a holder that never
    finishes; ``grace_seconds``, how long a denied waiter keeps its place past
    the time it was told to come back; ``poll_seconds``, what a waiter that is
    not next is told to wait when the limits themselves would let it go;
    ``idle_seconds``, how long a key unused keeps its state."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = PREFIX,
        window_seconds: float = 60.0,
        hold_seconds: float = 300.0,
        grace_seconds: float = 10.0,
        poll_seconds: float = 0.05,
        idle_seconds: float = 3600.0,
    ) -> None:
        for name, value in (
            ("window_seconds", window_seconds),
            ("hold_seconds", hold_seconds),
            ("grace_seconds", grace_seconds),
            ("poll_seconds", poll_seconds),
            ("idle_seconds", idle_seconds),
        ):
            if not value > 0:
                raise ConfigurationError(f"{name} must be more than 0, not {value!r}")
        self.redis = client
        self.prefix = prefix
        self.window = _micros(window_seconds)
        self.hold = _micros(hold_seconds)
        self.grace = _micros(grace_seconds)
        self.poll = _micros(poll_seconds)
        self.ttl = max(_micros(idle_seconds), 2 * self.window, self.hold)
        self._acquire = client.register_script(_ACQUIRE)
        self._finish = client.register_script(_FINISH)
        self._renew = client.register_script(_RENEW)
        self._learn = client.register_script(_LEARN)
        self._next = client.register_script(_NEXT)
        self._withdraw = client.register_script(_WITHDRAW)
        self._state = client.register_script(_STATE)

    def base(self, key: str) -> str:
        """The prefix of every Redis key of limit key ``key``."""
        return f"{self.prefix}{{{_check_name('a limit key', key)}}}"

    def _grant_key(self, key: str, grant_id: str) -> str:
        return f"{self.base(key)}:grant:{grant_id}"

    def acquire(
        self,
        key: str,
        limit: ModelLimit,
        tokens: int,
        holder: str,
        *,
        waiter: Waiter | None = None,
        hold_seconds: float | None = None,
        now: float | None = None,
    ) -> Grant | Denial:
        """Take one request, ``tokens`` tokens and a concurrency slot for
        ``holder`` under ``limit``, all or nothing.

        With ``waiter``, a denied caller keeps a place in the key's turn order
        and is granted only in its turn; without one, it is granted only
        while no one waits. ``now`` (epoch seconds) replaces the Redis
        server's clock, for tests. A call of more tokens than ``limit.tpm``
        raises :class:`CallTooLarge`."""
        if not _whole(tokens) or tokens < 0:
            raise ConfigurationError(
                f"tokens must be a whole number of 0 or more, not {tokens!r:.40}"
            )
        if limit.tpm is not None and tokens > limit.tpm:
            raise CallTooLarge(
                f"a call of {tokens} tokens is more than the {limit.tpm} tokens per minute "
                f"of limit key {key!r}: it could never go; lower its output cap or its prompt, "
                "or raise the limit"
            )
        _check_name("a holder", holder)
        hold = self.hold if hold_seconds is None else _micros(hold_seconds)
        if hold <= 0:
            raise ConfigurationError(f"hold_seconds must be more than 0, not {hold_seconds!r}")
        grant_id = uuid.uuid4().hex
        args = [
            "" if now is None else _micros(now),
            self.window,
            limit.rpm or 0,
            limit.tpm or 0,
            limit.max_concurrent or 0,
            tokens,
            holder,
            grant_id,
            hold,
            "" if waiter is None else waiter.id,
            "" if waiter is None else waiter.tenant,
            0 if waiter is None else waiter.priority,
            1 if waiter is None else waiter.weight,
            self.grace,
            self.poll,
            self.ttl,
        ]
        with redis_errors():
            reply = self._acquire(keys=[self.base(key), self._grant_key(key, grant_id)], args=args)
        kind, at = _text(reply[0]), _seconds(reply[1])
        if kind == "grant":
            next_waiter, next_tenant = _text(reply[2]), _text(reply[3])
            turn = Turn(next_waiter, next_tenant) if next_waiter else None
            reserved = tokens if limit.tpm is not None else 0
            return Grant(key, grant_id, holder, reserved, at, turn)
        return Denial(key, Reason(_text(reply[2])), _seconds(reply[3]), at)

    def finish(self, grant: Grant, used_tokens: int, *, now: float | None = None) -> bool:
        """The call of ``grant`` is over and used ``used_tokens``: correct the
        tokens taken by the difference (giving back, or taking more, which
        later calls then wait for) and free its slot. False if it was finished
        or released already (which this changes nothing of), or its record
        expired (a call longer than the hold time plus two windows)."""
        if not _whole(used_tokens) or used_tokens < 0:
            raise ConfigurationError(
                f"used tokens must be a whole number of 0 or more, not {used_tokens!r:.40}"
            )
        return self._end(grant, str(used_tokens), now)

    def release(self, grant: Grant, *, now: float | None = None) -> bool:
        """The call of ``grant`` never went: give back its request and its
        tokens, and free its slot. False as for :meth:`finish`."""
        return self._end(grant, "", now)

    def renew(self, grant: Grant, hold_seconds: float, *, now: float | None = None) -> bool:
        """Hold ``grant``'s slot ``hold_seconds`` from now (a holder that is
        alive says so; one that died lets its slot expire). False if the slot
        is no longer the grant's: it expired, or was freed."""
        args = ["" if now is None else _micros(now), grant.holder, grant.id]
        with redis_errors():
            done = self._renew(
                keys=[self.base(grant.key)], args=[*args, _micros(hold_seconds), self.ttl]
            )
        return bool(done)

    def _end(self, grant: Grant, used: str, now: float | None) -> bool:
        args = ["" if now is None else _micros(now), self.window, grant.holder, grant.id, used]
        with redis_errors():
            done = self._finish(
                keys=[self.base(grant.key), self._grant_key(grant.key, grant.id)],
                args=[*args, self.ttl],
            )
        return bool(done)

    def learn(
        self,
        key: str,
        *,
        retry_after: float | None = None,
        remaining_requests: int | None = None,
        remaining_tokens: int | None = None,
        limit_requests: int | None = None,
        limit_tokens: int | None = None,
        now: float | None = None,
    ) -> None:
        """Tell every process what the provider said about ``key``.

        ``retry_after`` given (0 too) means a 429: the limit in force halves
        (once per sixtieth of a window, at least a tenth of the declared one)
        and nothing goes for ``retry_after`` seconds. ``limit_*`` below the
        declared limit lowers the share in force to match; ``remaining_*``
        below what the logs think is free counts the difference as taken now.
        A lowered limit rises back to the declared one over one window."""
        if retry_after is not None and not (0 <= retry_after < 10**7):
            raise ConfigurationError(f"retry_after must be 0 or more seconds, not {retry_after!r}")
        counts = {
            "remaining_requests": remaining_requests,
            "remaining_tokens": remaining_tokens,
            "limit_requests": limit_requests,
            "limit_tokens": limit_tokens,
        }
        for name, value in counts.items():
            if value is not None and (not _whole(value) or value < 0):
                raise ConfigurationError(
                    f"{name} must be a whole number of 0 or more, not {value!r:.40}"
                )
        args = [
            "" if now is None else _micros(now),
            self.window,
            "" if retry_after is None else _micros(retry_after),
            *("" if value is None else value for value in counts.values()),
            self.ttl,
        ]
        with redis_errors():
            self._learn(keys=[self.base(key)], args=args)

    def next_waiters(self, key: str, count: int = 1, *, now: float | None = None) -> list[Turn]:
        """The next ``count`` waiters of ``key`` in the order their turns come,
        the first of them the one whose turn it is: whom to wake after a
        finish or a release."""
        with redis_errors():
            reply = self._next(
                keys=[self.base(key)], args=["" if now is None else _micros(now), count]
            )
        items = [_text(item) for item in reply]
        return [Turn(items[i], items[i + 1]) for i in range(0, len(items), 2)]

    def withdraw(self, key: str, waiter_id: str) -> bool:
        """``waiter_id`` waits no more (its run was cancelled): its place goes
        at once rather than after its grace. False if it was not waiting."""
        with redis_errors():
            return bool(self._withdraw(keys=[self.base(key)], args=[waiter_id]))

    def state(self, key: str, *, now: float | None = None) -> dict[str, Any]:
        """What an operator sees of ``key``: the declared limit (as the last
        acquisition gave it), the share in force, what the window holds, the
        holders, the block, and the tenants waiting (in turn order, with how
        many waiters each)."""
        with redis_errors():
            reply = self._state(
                keys=[self.base(key)], args=["" if now is None else _micros(now), self.window]
            )
        raw = {_text(reply[i]): _text(reply[i + 1]) for i in range(0, len(reply), 2)}
        at = int(raw["now"])
        factor = float(raw["factor"])
        declared = {name: int(raw[name]) or None for name in ("rpm", "tpm", "max_concurrent")}
        blocked = int(raw["blocked_until"])
        tenants = [line.split("\t") for line in raw["tenants"].split("\n") if line]

        def in_force(limit: int | None) -> int | None:
            return None if limit is None else max(1, int(limit * factor))

        return {
            "key": key,
            "at": _seconds(at),
            **declared,
            "factor": factor,
            "rpm_in_force": in_force(declared["rpm"]),
            "tpm_in_force": in_force(declared["tpm"]),
            "requests_in_window": int(raw["requests"]),
            "tokens_in_window": int(raw["tokens"]),
            "holders": [h for h in raw["holders"].split("\n") if h],
            "blocked_until": _seconds(blocked) if blocked > at else None,
            "waiters": {tenant: int(count) for tenant, count in tenants},
        }
