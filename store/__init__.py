"""Persistence: the schema, the Postgres store, Redis leases, the local stack.

``store`` knows nothing of Celery or litellm. Names are imported on first use, so
that a command touching one module does not pay for all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from store.lazy import lazy_attributes

if TYPE_CHECKING:
    from store.claims import Claims
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
    from store.leases import Leases
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
    "Claims": "store.claims",
    "Decision": "store.models",
    "DecisionResult": "store.pg.approvals",
    "Effect": "store.models",
    "EffectBegin": "store.pg.execution",
    "EffectStatus": "store.models",
    "Fence": "store.models",
    "InvalidInput": "store.errors",
    "InvalidTransition": "store.errors",
    "LeaseLostError": "store.errors",
    "Leases": "store.leases",
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


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "Approval",
    "ApprovalError",
    "CancelResult",
    "Checkpoint",
    "CheckpointConflict",
    "Claim",
    "Claims",
    "Decision",
    "DecisionResult",
    "Effect",
    "EffectBegin",
    "EffectStatus",
    "Fence",
    "InvalidInput",
    "InvalidTransition",
    "LeaseLostError",
    "Leases",
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
