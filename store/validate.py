"""The front door: a new run's trigger is checked here before the store
writes anything, so both refuse the same input with one clear error.

What Postgres cannot store (NUL characters, lone surrogates, bytes, NaN), what
would break its indexes (a B-tree entry holds at most about 2,700 bytes) and
what would exhaust the interpreter (deep or endlessly shared nesting) is
refused as :class:`InvalidInput` or :class:`PayloadTooLarge`. The walk over the
payload is iterative and bounded, so no input reaches ``RecursionError``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from store.errors import InvalidApprovalId, InvalidInput, PayloadTooLarge, RunNotFound
from store.models import NewRun

# Documented in docs/operations.md ("Input limits").
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024  # RUNWRIGHT_MAX_PAYLOAD_BYTES
MAX_DEPTH = 64  # nesting levels of the payload and of nothing else
MAX_ID_CHARS = 512  # trigger id, thread
MAX_KEY_CHARS = 576  # concurrency key: "thread:" plus a thread fits
MAX_AGENT_CHARS = 128
# Four bytes per character at most: agent + trigger id (one unique index) and a
# concurrency key plus a run id stay below Postgres's B-tree entry limit.

_SCALARS = (str, int, float, bool, type(None))

# Flow control: a run's priority, and the longest tenant and limit key.
MIN_PRIORITY, MAX_PRIORITY = 0, 9
MAX_TENANT_CHARS = 200
MAX_LIMIT_KEY_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_text(value: object, what: str, *, max_chars: int | None = None) -> str:
    """A string Postgres can store: no NUL, valid UTF-8 (no lone surrogates)."""
    if isinstance(value, bytes | bytearray):
        raise InvalidInput(f"{what} is bytes; pass text (decoded UTF-8)")
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise InvalidInput(f"{what} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} is not valid UTF-8 (it holds a lone surrogate)") from None
    if max_chars is not None and len(value) > max_chars:
        raise InvalidInput(f"{what} is {len(value)} characters long; the limit is {max_chars}")
    return value


def check_json(value: object, what: str, limit: int) -> None:
    """JSON that the store can write (``store.db.dumps``), at most ``MAX_DEPTH`` deep.

    Visiting more than ``limit`` values means the encoding is larger than
    ``limit`` bytes (every value takes at least one), which also bounds
    payloads that share one list many times over.
    """
    stack: list[tuple[object, str, int]] = [(value, what, 0)]
    visited = 0
    while stack:
        item, path, depth = stack.pop()
        visited += 1
        if visited > limit:
            raise PayloadTooLarge(f"{what} is larger than {limit} bytes")
        if isinstance(item, str):
            check_text(item, path)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidInput(f"{path} is {item}, which is not JSON")
        elif isinstance(item, _SCALARS):
            continue
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise InvalidInput(f"{what} is nested deeper than {MAX_DEPTH} levels")
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise InvalidInput(
                            f"{path} has a key of type {type(key).__name__}; JSON keys are text"
                        )
                    check_text(key, f"a key in {path}")
                    stack.append((child, f"{path}.{key[:40]}", depth + 1))
            else:
                stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))
        elif isinstance(item, bytes | bytearray):
            raise InvalidInput(f"{path} is bytes, which is not JSON; decode it to text")
        else:
            raise InvalidInput(f"{path} is a {type(item).__name__}, which is not JSON")


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def check_new_run(new: NewRun, limit: int) -> None:
    """Refuse a new run that cannot be stored exactly as given; ``limit`` is
    ``RUNWRIGHT_MAX_PAYLOAD_BYTES``."""
    check_text(new.agent, "the agent name", max_chars=MAX_AGENT_CHARS)
    if not new.agent:
        raise InvalidInput("agent name is empty")
    trigger = new.trigger
    check_text(trigger.id, "the trigger id", max_chars=MAX_ID_CHARS)
    if trigger.thread is not None:
        check_text(trigger.thread, "the thread", max_chars=MAX_ID_CHARS)
    if new.concurrency_key is not None:
        check_text(new.concurrency_key, "the concurrency key", max_chars=MAX_KEY_CHARS)
    check_tenant(new.tenant)
    check_priority(new.priority)
    check_text(trigger.source, "the trigger source")
    check_text(trigger.trigger, "the trigger name")
    if not isinstance(trigger.keys, dict):
        raise InvalidInput("the trigger keys must be a mapping of text to text")
    for key, value in trigger.keys.items():
        check_text(key, "a trigger key")
        check_text(value, f"trigger key {key[:40]!r}")
    envelope = [trigger.id, trigger.thread, trigger.source, trigger.trigger, trigger.keys]
    envelope_size = _size(envelope)
    if envelope_size > limit:
        raise PayloadTooLarge(
            f"the trigger's source, name, keys and ids are {envelope_size} bytes; the limit is"
            f" {limit} (RUNWRIGHT_MAX_PAYLOAD_BYTES)"
        )
    check_json(trigger.payload, "trigger payload", limit)
    payload_size = _size(trigger.payload)
    if payload_size > limit:
        raise PayloadTooLarge(
            f"trigger payload is {payload_size} bytes; the limit is {limit} "
            "(RUNWRIGHT_MAX_PAYLOAD_BYTES)"
        )


def check_tenant(tenant: object) -> str | None:
    """A run's tenant: None, or a name of at most :data:`MAX_TENANT_CHARS`
    characters with no control characters."""
    if tenant is None:
        return None
    text = check_text(tenant, "the tenant", max_chars=MAX_TENANT_CHARS)
    if not text.strip():
        raise InvalidInput("the tenant must be a non-empty name, or None for no tenant")
    if _CONTROL.search(text):
        raise InvalidInput(f"the tenant {shown_id(text)} contains a control character")
    return text


def check_priority(priority: object) -> int:
    """A run's priority: an int from :data:`MIN_PRIORITY` to :data:`MAX_PRIORITY`."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise InvalidInput(f"the priority must be an int, not {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidInput(
            f"the priority is {priority}; it must be from {MIN_PRIORITY} to {MAX_PRIORITY}"
        )
    return priority


def check_limit_key(key: object) -> str:
    """The limit a run is parked on: non-empty text of at most
    :data:`MAX_LIMIT_KEY_CHARS` characters."""
    text = check_text(key, "the limit key", max_chars=MAX_LIMIT_KEY_CHARS)
    if not text:
        raise InvalidInput("the limit key is empty")
    return text


# Runwright writes every id as a lowercase, hyphenated UUID, and only that
# spelling is accepted. uuid.UUID() would also take "urn:uuid:...", braces,
# uppercase, no hyphens, "_" and non-ASCII digits; one spelling per id keeps
# lookups, logs and links in agreement and keeps odd text away from the driver.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_canonical_id(value: object) -> bool:
    """True if ``value`` is an id as Runwright writes it (a lowercase UUID)."""
    return isinstance(value, str) and _CANONICAL_UUID.fullmatch(value) is not None


def shown_id(value: object) -> str:
    """``value`` for an error message: quoted, escaped, and cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# Longest name of who did something (a decision, a cancel, a resolution).
MAX_ACTOR_CHARS = 200


def check_actor(by: str | None) -> str | None:
    """Who did it, as the caller names them: text of at most
    :data:`MAX_ACTOR_CHARS` characters, or None."""
    if by is None:
        return None
    check_text(by, "who did it (by)", max_chars=MAX_ACTOR_CHARS)
    if not by.strip():
        raise InvalidInput("who did it (by) must be a non-empty name")
    return by


def check_run_id(run_id: str) -> str:
    """Run ids are UUIDs; anything else cannot name a run."""
    if not is_canonical_id(run_id):
        raise RunNotFound(f"no run with id {shown_id(run_id)}")
    return run_id


def check_page_from(run_id: str | None) -> str | None:
    """A page's starting point (``before``): a run id, as Runwright writes them."""
    if run_id is not None and not is_canonical_id(run_id):
        raise InvalidInput(f"before must be a run id, not {shown_id(run_id)}")
    return run_id


def check_approval_id(approval_id: str) -> str:
    """Approval ids are UUIDs; anything else cannot name an approval."""
    if not is_canonical_id(approval_id):
        raise InvalidApprovalId(f"no approval with id {shown_id(approval_id)}")
    return approval_id
