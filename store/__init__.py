"""Persistence: the schema, the Postgres and in-memory stores, Redis leases, the local stack.

``store`` knows nothing of Celery or litellm.
"""

from store.base import CancelResult, DecisionResult, EffectBegin, Store, ThreadStart
from store.claims import Claims
from store.config import Settings
from store.errors import (
    AgentNotFound,
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
from store.memory import MemoryStore
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

__all__ = [
    "AgentNotFound",
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
    "MemoryStore",
    "NewRun",
    "Outcome",
    "PayloadTooLarge",
    "Run",
    "RunError",
    "RunNotFound",
    "RunStatus",
    "RunwrightError",
    "Settings",
    "Step",
    "StepCommit",
    "StepKind",
    "StepRecord",
    "Store",
    "StoreUnavailable",
    "ThreadStart",
    "TriggerEnvelope",
    "Usage",
    "WaitPoint",
]
