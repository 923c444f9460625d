"""Persistence: the schema, the Postgres store, the local stack.

``store`` knows nothing of Celery, litellm or Redis (``runner/core/coordination/``
talks to Redis). Names are imported on first use, so that a command touching
one module does not pay for all of them.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from store.lazy import lazy_attributes

if TYPE_CHECKING:
    from store.errors import (
        ApprovalError,
        CheckpointConflict,
        InvalidInput,
        InvalidTransition,
        LeaseLostError,
        LocalStackError,
        PayloadTooLarge,
        RunNotFound,
        RunwrightError,
        StoreUnavailable,
    )
    from store.models import (
        Approval,
        Checkpoint,
        Claim,
        Decision,
        Effect,
        EffectStatus,
        Fence,
        NewRun,
        Outcome,
        Run,
        RunError,
        RunStatus,
        Step,
        StepCommit,
        StepKind,
        StepRecord,
        TriggerEnvelope,
        Usage,
        WaitPoint,
    )
    from store.pg.approvals import CancelResult, DecisionResult
    from store.pg.execution import EffectBegin
    from store.pg.runs import ThreadStart
    from store.postgres import PostgresStore

_LAZY = {
    "Approval": "store.models",
    "ApprovalError": "store.errors",
    "CancelResult": "store.pg.approvals",
    "Checkpoint": "store.models",
    "CheckpointConflict": "store.errors",
    "Claim": "store.models",
    "Decision": "store.models",
    "DecisionResult": "store.pg.approvals",
    "Effect": "store.models",
    "EffectBegin": "store.pg.execution",
    "EffectStatus": "store.models",
    "Fence": "store.models",
    "InvalidInput": "store.errors",
    "InvalidTransition": "store.errors",
    "LeaseLostError": "store.errors",
    "LocalStackError": "store.errors",
    "NewRun": "store.models",
    "Outcome": "store.models",
    "PayloadTooLarge": "store.errors",
    "PostgresStore": "store.postgres",
    "Run": "store.models",
    "RunError": "store.models",
    "RunNotFound": "store.errors",
    "RunStatus": "store.models",
    "RunwrightError": "store.errors",
    "Step": "store.models",
    "StepCommit": "store.models",
    "StepKind": "store.models",
    "StepRecord": "store.models",
    "StoreUnavailable": "store.errors",
    "ThreadStart": "store.pg.runs",
    "TriggerEnvelope": "store.models",
    "Usage": "store.models",
    "WaitPoint": "store.models",
}


_lazy = lazy_attributes(__name__, _LAZY)

# Moved out of the store, which imports no Redis: deprecated here for one release.
_MOVED = {"Leases": "runner.core.coordination.leases", "Claims": "runner.core.coordination.claims"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(
            f"store.{name} is deprecated: import it from {_MOVED[name]}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    return _lazy(name)


__all__ = [
    "Approval",
    "ApprovalError",
    "CancelResult",
    "Checkpoint",
    "CheckpointConflict",
    "Claim",
    "Decision",
    "DecisionResult",
    "Effect",
    "EffectBegin",
    "EffectStatus",
    "Fence",
    "InvalidInput",
    "InvalidTransition",
    "LeaseLostError",
    "LocalStackError",
    "NewRun",
    "Outcome",
    "PayloadTooLarge",
    "PostgresStore",
    "Run",
    "RunError",
    "RunNotFound",
    "RunStatus",
    "RunwrightError",
    "Step",
    "StepCommit",
    "StepKind",
    "StepRecord",
    "StoreUnavailable",
    "ThreadStart",
    "TriggerEnvelope",
    "Usage",
    "WaitPoint",
]
