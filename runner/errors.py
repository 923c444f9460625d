"""Errors of the engine. Store errors are re-exported so that callers of
``runner`` never import ``store`` to catch them."""

from __future__ import annotations

from store.errors import (
    AgentNotFound,
    ApprovalAlreadyDecided,
    ApprovalError,
    ApprovalExpired,
    ApprovalNotFound,
    CheckpointConflict,
    ConfigurationError,
    InvalidApprovalId,
    InvalidApprovalInput,
    InvalidApprovalToken,
    InvalidInput,
    InvalidTransition,
    LeaseLostError,
    PayloadTooLarge,
    RunNotFound,
    RunNotWaiting,
    RunwrightError,
    SchemaMismatch,
    StoreRefused,
    StoreUnavailable,
)


class ModelError(RunwrightError):
    """The model provider failed, and retrying did not help."""


class ToolDefinitionError(RunwrightError):
    """The tool cannot be built from that function."""


__all__ = [
    "AgentNotFound",
    "ApprovalAlreadyDecided",
    "ApprovalError",
    "ApprovalExpired",
    "ApprovalNotFound",
    "CheckpointConflict",
    "ConfigurationError",
    "InvalidApprovalId",
    "InvalidApprovalInput",
    "InvalidApprovalToken",
    "InvalidInput",
    "InvalidTransition",
    "LeaseLostError",
    "ModelError",
    "PayloadTooLarge",
    "RunNotFound",
    "RunNotWaiting",
    "RunwrightError",
    "SchemaMismatch",
    "StoreRefused",
    "StoreUnavailable",
    "ToolDefinitionError",
]
