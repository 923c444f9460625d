"""Errors of the engine. Store errors are re-exported so that callers of
``runner`` never import ``store`` to catch them.

Every error Runwright raises derives from :class:`RunwrightError` (its root is
in ``store/errors.py``), with one deliberate exception:
``runner.core.faults.FaultInjected``, a ``BaseException`` (see there why). Errors of
the test and demo helpers are defined beside them (``runner.testing``,
``runner.cli.demo``) and derive from it too."""

from __future__ import annotations

from store.errors import (
    ApprovalAlreadyDecided,
    ApprovalError,
    ApprovalExpired,
    ApprovalNotFound,
    CheckpointConflict,
    ConfigurationError,
    DatasetNotFound,
    EffectNotFound,
    EvaluationNotFound,
    ForkRepeatsEffects,
    InvalidApprovalId,
    InvalidApprovalInput,
    InvalidInput,
    InvalidTransition,
    LeaseLostError,
    PayloadTooLarge,
    RanEffect,
    RunNotFound,
    RunNotWaiting,
    RunwrightError,
    ScheduleNotFound,
    SchemaMismatch,
    StoreRefused,
    StoreUnavailable,
    ThreadBusy,
    WrongRequestKind,
)


class ContextExceeded(RunwrightError):
    """The latest turn of the history alone is over its request's token budget
    (an agent's ``History``): the run fails ``context_exceeded``."""

    code = "context_exceeded"


class AgentNotFound(RunwrightError):
    """No agent is registered under that name."""


class AgentAlreadyRegistered(RunwrightError, ValueError):
    """Another agent is registered under that name already: two definitions
    of one name would replace each other silently. Pass ``replace=True`` to
    the one that is meant to replace it (a module reloaded on purpose)."""


class InvalidApprovalToken(ApprovalError):
    """The token is missing or not valid for this approval."""


class ModelError(RunwrightError):
    """The model provider failed, and retrying within the call did not help.

    ``transient``: the failure may pass (429, 5xx, a connection error, a
    timeout), so the run may be retried later (runner/core/retry.py);
    ``retry_after``: the provider asked for that many seconds' pause;
    ``rate_limited``: it was a 429, the provider's limit (runner/core/limits/)."""

    code = "model_error"  # what the run fails with once no retry is left

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        retry_after: float | None = None,
        rate_limited: bool = False,
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.retry_after = retry_after
        self.rate_limited = rate_limited


class ModelRequestsBlocked(ModelError):
    """A real model was called where model requests are blocked (a test):
    only ``scripted/`` models answer there. Never transient: the run fails
    ``model_error`` at once, and nothing is retried."""


class MCPUnavailable(RunwrightError):
    """An MCP server cannot be reached now: down, refusing, or not answering
    within its timeout (runner/core/mcp/sessions.py). Transient: the run waits in
    ``queued`` under the agent's retry policy, as for a model provider's outage,
    and fails ``mcp_unavailable`` once the policy gives up."""

    code = "mcp_unavailable"
    transient = True
    retry_after: float | None = None


class MCPAuthFailed(MCPUnavailable):
    """An MCP server refused the credentials (HTTP 401 or 403): the run fails
    ``mcp_auth`` at once; no retry can help before a person fixes them."""

    code = "mcp_auth"
    transient = False


class MCPCredentialsInvalid(MCPAuthFailed, ConfigurationError):
    """An MCP server's credentials cannot be sent as they are: a header's
    value holds a control character (a token read from a file with its
    newline) or what is not ASCII, or an environment variable's name or value
    cannot be one. The message names the header or the variable, never its
    value. Raised when the server is declared, and, for credentials from a
    callable, when a session connects: the run fails ``mcp_auth`` at once,
    since no retry helps before a person fixes them."""


class OutcomeUnknown(RunwrightError):
    """An effect's call went out and no answer came back (its connection
    broke, or it timed out): whether it took place is unknown. Its journal
    says so and the run needs a person, as after a process death."""


class MCPToolError(RunwrightError):
    """An MCP server answered a tool call with an error; the model is told it."""


class NotifierGone(RunwrightError):
    """A notifier's endpoint said it wants no more (HTTP 410 Gone): the
    request is not re-sent. A notifier of your own may raise it too."""


class ToolDefinitionError(RunwrightError):
    """The tool cannot be built from that function."""


class ToolInputError(InvalidInput):
    """The model's arguments for a tool call are unusable. The step loop answers
    the model with the message; it never reaches a caller."""


class LoopMisuse(RunwrightError):
    """A call made on the wrong loop: a blocking call into the runtime from
    the runtime's own loop, where it would wait for itself (``await`` the
    coroutine instead), or an abort signal's future asked for on a loop other
    than the one it lives on."""


__all__ = [
    "AgentNotFound",
    "ApprovalAlreadyDecided",
    "ApprovalError",
    "ApprovalExpired",
    "ApprovalNotFound",
    "CheckpointConflict",
    "ConfigurationError",
    "ContextExceeded",
    "DatasetNotFound",
    "EffectNotFound",
    "EvaluationNotFound",
    "ForkRepeatsEffects",
    "InvalidApprovalId",
    "InvalidApprovalInput",
    "InvalidApprovalToken",
    "InvalidInput",
    "InvalidTransition",
    "LeaseLostError",
    "LoopMisuse",
    "ModelError",
    "ModelRequestsBlocked",
    "NotifierGone",
    "PayloadTooLarge",
    "RanEffect",
    "RunNotFound",
    "RunNotWaiting",
    "RunwrightError",
    "ScheduleNotFound",
    "SchemaMismatch",
    "StoreRefused",
    "StoreUnavailable",
    "ThreadBusy",
    "ToolDefinitionError",
    "ToolInputError",
    "WrongRequestKind",
]
