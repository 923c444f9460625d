"""Flow control toward model providers: limits declared per model
(:mod:`.model_limits`) and taken in Redis by every process together
(:mod:`.limiter`), tenants admitted in turn when a limit is contended."""

from __future__ import annotations

from runner.core.limits.limiter import (
    CallTooLarge,
    Denial,
    Grant,
    Limiter,
    Reason,
    Turn,
    Waiter,
)
from runner.core.limits.model_limits import (
    LimitError,
    ModelLimit,
    ModelLimits,
    configured,
    limits,
    register,
)

__all__ = [
    "CallTooLarge",
    "Denial",
    "Grant",
    "LimitError",
    "Limiter",
    "ModelLimit",
    "ModelLimits",
    "Reason",
    "Turn",
    "Waiter",
    "configured",
    "limits",
    "register",
]
