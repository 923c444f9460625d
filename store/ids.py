"""Sortable ids (UUIDv7, RFC 9562): creation order is id order, so ``ORDER BY id``
is "oldest first" without a second index."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_id() -> str:
    """A UUIDv7 string, monotonic within this process."""
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            # Same millisecond (or a clock step back): bump the 12-bit counter so
            # ids from this process stay strictly increasing.
            _counter += 1
            if _counter > 0xFFF:
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        else:
            _last_ms = ms
            _counter = int.from_bytes(os.urandom(2), "big") & 0x3FF
        rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
        value = (ms & ((1 << 48) - 1)) << 80
        value |= 0x7 << 76
        value |= _counter << 64
        value |= 0b10 << 62
        value |= rand_b
    return str(uuid.UUID(int=value))


def first_id_at(ms: int) -> str:
    """The smallest id created at or after ``ms`` (epoch milliseconds): with
    ``id >= first_id_at(...)`` a query reads "created since" off the primary key."""
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | 0b10 << 62
    return str(uuid.UUID(int=value))
