"""The records the store reads and writes.

Names here are persisted (status values, step kinds, effect states): renaming
one strands runs that are in flight, and ``tests/unit/test_compat.py`` pins them.
"""

from __future__ import annotations

import enum
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from store.errors import InvalidInput, InvalidTransition
from store.ids import new_id
from store.jsonsafe import clean_message
from store.status import CANCELLABLE as CANCELLABLE
from store.status import CLAIMABLE as CLAIMABLE
from store.status import ENDED as ENDED
from store.status import KEY_HOLDING as KEY_HOLDING
from store.status import Interruption as Interruption
from store.status import RunStatus as RunStatus

JSON = Any
M = TypeVar("M", bound=BaseModel)
Message = dict[str, Any]
MAX_ERROR_CHARS = 4000
MAX_ERROR_CODE_CHARS = 64


def utcnow() -> datetime:
    return datetime.now(UTC)


class StepKind(enum.StrEnum):
    LLM = "llm"
    TOOL = "tool"
    WAIT = "wait"
    # The run's state as the step left it (written only when it changed).
    STATE = "state"


class EffectStatus(enum.StrEnum):
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    # Started by an execution that died before writing its outcome, and found
    # so by a later one: it may or may not have happened (a person resolves it).
    UNKNOWN = "unknown"


class EffectOutcome(enum.StrEnum):
    """What a person (or the effect's reconcile callable) says an effect of
    unknown outcome did."""

    DONE = "done"
    NOT_DONE = "not_done"


class Decision(enum.StrEnum):
    APPROVED = "approved"
    DENIED = "denied"
    # The run ended (cancelled, failed) before anyone decided.
    WITHDRAWN = "withdrawn"
    # A person answered a question (a request of kind ``input``).
    ANSWERED = "answered"


class RequestKind(enum.StrEnum):
    """What a person is asked (an ``approvals`` row's ``kind``): to approve a
    tool call, or to answer the model's question (``ask_human``)."""

    APPROVAL = "approval"
    INPUT = "input"


class OnDeny(enum.StrEnum):
    """What a person's denial does: the model is told and the run goes on
    (``continue``), or the run fails ``approval_denied`` (``fail``)."""

    CONTINUE = "continue"
    FAIL = "fail"


class TriggerEnvelope(BaseModel):
    """The event that starts a run. ``id`` deduplicates runs per agent."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    source: str = "manual"
    trigger: str = "manual"
    payload: JSON = Field(default_factory=dict)
    keys: dict[str, str] = Field(default_factory=dict)
    thread: str | None = None
    received_at: datetime = Field(default_factory=utcnow)


# The key of an llm step's output that says its usage is estimated (persisted).
USAGE_ESTIMATED = "usage_estimated"


def usage_estimated(output: object) -> bool:
    """Whether a step's stored output says its usage is an estimate."""
    return isinstance(output, dict) and output.get(USAGE_ESTIMATED) is True


@dataclass(frozen=True)
class Usage:
    """Tokens a model call used. ``estimated``: the provider reported none, so
    the figures are litellm's count of the request and the reply
    (``runner/core/model.py``); a sum is estimated if any of its parts is."""

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.estimated or other.estimated,
        )


@dataclass(frozen=True)
class Claim:
    owner: str
    expires_at: datetime
    epoch: int


@dataclass(frozen=True)
class Fence:
    """What every write of a running run is conditional on."""

    run_id: str
    owner: str
    epoch: int


@dataclass(frozen=True)
class RunError:
    """Why a run failed. The message often quotes untrusted text (a tool's
    exception, a provider's answer): it is cleaned and clipped here, so that
    writing a failure can never fail on its text."""

    code: str
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", clean_message(self.code, MAX_ERROR_CODE_CHARS))
        object.__setattr__(self, "message", clean_message(self.message, MAX_ERROR_CHARS))


@dataclass(frozen=True)
class WaitPoint:
    approval_id: str
    tool_name: str
    input: JSON
    expires_at: datetime
    token_id: str
    notified_at: datetime | None = None
    kind: str = "approval"


@dataclass(frozen=True)
class RetryWait:
    """A model step that keeps failing with transient errors: how many attempts
    failed since ``since``, the last error, and when the next one may start.
    While ``at`` is in the future the run is queued and no execution claims it."""

    attempts: int
    since: datetime
    error: str
    at: datetime | None = None


@dataclass(frozen=True)
class RunAttempt:
    """An earlier attempt of a run, kept when :meth:`Engine.retry` started the next."""

    attempt: int
    status: RunStatus
    error: RunError | None
    steps_used: int
    usage: Usage
    started_at: datetime | None
    finished_at: datetime | None
    retried_at: datetime
    extra_steps: int = 0


@dataclass(frozen=True)
class Run:
    id: str
    agent: str
    status: RunStatus
    trigger: TriggerEnvelope
    usage: Usage
    created_at: datetime
    updated_at: datetime
    concurrency_key: str | None = None
    thread: str | None = None
    output: JSON = None
    error: RunError | None = None
    waiting: WaitPoint | None = None
    claim: Claim | None = None
    cancel_requested: bool = False
    steps_used: int = 0
    state: JSON = None
    enqueued_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # Takeovers since the run last made progress (the step's journal write or
    # its commit); after a claim, more than 0 means that claim took the run
    # over from a stopped execution.
    takeovers: int = 0
    # Transient model failures of the current step (None: none since the last progress).
    retry: RetryWait | None = None
    # Steps added to the agent's budget (a retry's extra steps, a fork's prefix).
    extra_steps: int = 0
    # A model that overrides the agent's (a fork onto another model).
    model: str | None = None
    forked_from: str | None = None
    forked_at_step: int | None = None
    # An effect of the run has an unknown outcome that nobody resolved yet.
    needs_attention: bool = False
    # Who asked for the run's cancel (``Engine.cancel(by=...)``), if anyone named.
    cancelled_by: str | None = None
    # Why an execution last gave the run back to the queue (``drain`` or
    # ``agent_missing``, runner/core/engine/explain.py) and which owner did: read
    # while the run is interrupted.
    interrupted_reason: Interruption | None = None
    interrupted_by: str | None = None
    # When a worker that lacked the run's agent first gave it back.
    agent_missing_since: datetime | None = None
    # What the model calls cost, in USD (0 when the models are unpriced).
    cost_usd: float = 0.0
    # A model step of the run had no price: ``cost_usd`` is a lower bound.
    cost_unpriced: bool = False
    # W3C trace context of the request that started the run.
    trace_context: dict[str, str] | None = None
    # A child run: the run whose tool call started it, and the call's id;
    # ``detached``: it runs on when its parent is cancelled (runner/core/children.py).
    parent_id: str | None = None
    parent_call_id: str | None = None
    detached: bool = False
    # The ancestors' token and cost budgets that bound the run too.
    budget_bounds: tuple[BudgetBound, ...] = ()
    # A child's ancestors, its parent first and its top-level run last; a
    # top-level run has none.
    ancestors: tuple[str, ...] = ()
    # Flow control (docs/architecture.md): the tenant the run belongs to, and
    # its priority, 0 to 9 (a child takes its parent's).
    tenant: str | None = None
    priority: int = 0
    # The limit the queued run is parked on (``PostgresStore.park``), and
    # when it may go; None when it is not parked.
    parked_key: str | None = None
    parked_until: datetime | None = None
    # The agent version of its latest execution (None before its first), and
    # the one it started on (runner/core/versions.py).
    version: str | None = None
    started_version: str | None = None
    # Erased by a person (``erased_by``): its payloads removed, its skeleton kept.
    erased_at: datetime | None = None
    erased_by: str | None = None

    @property
    def depth(self) -> int:
        """How many levels below its top-level run the run is (0: it is one)."""
        return len(self.ancestors)

    @property
    def root_id(self) -> str:
        """The top-level run of the run's tree (the run itself if it is no child)."""
        return self.ancestors[-1] if self.ancestors else self.id

    @property
    def ended(self) -> bool:
        return self.status.ended

    @property
    def settled(self) -> bool:
        """Deprecated: :attr:`ended` (docs/concepts.md, Glossary)."""
        warnings.warn(
            "Run.settled is deprecated; use Run.ended (docs/concepts.md, Glossary)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.status.ended

    def output_as(self, model: type[M]) -> M:
        """The run's output validated as ``model`` (typically the agent's
        ``output=`` model). :class:`InvalidTransition` unless the run
        completed; :class:`InvalidInput` if the output does not fit ``model``."""
        if self.status is not RunStatus.COMPLETED:
            why = f" ({self.error.code}: {self.error.message})" if self.error else ""
            raise InvalidTransition(
                f"run {self.id} is {self.status.value}{why}; only a completed run has a result"
            )
        try:
            return model.model_validate(self.output)
        except ValidationError as exc:
            raise InvalidInput(
                f"the output of run {self.id} is not a {model.__name__}: "
                f"{clean_message(str(exc), 1000)}"
            ) from None

    @property
    def retry_at(self) -> datetime | None:
        """When a run waiting to retry a failing model step may run again."""
        if self.status is RunStatus.QUEUED and self.retry is not None:
            return self.retry.at
        return None


@dataclass(frozen=True)
class Step:
    run_id: str
    id: int
    index: int
    kind: StepKind
    started_at: datetime
    finished_at: datetime | None
    name: str | None = None
    tool_call_id: str | None = None
    input: JSON = None
    output: JSON = None
    error: JSON = None
    usage: Usage | None = None
    cost_usd: float | None = None


@dataclass(frozen=True)
class Checkpoint:
    run_id: str
    step_index: int
    messages: list[Message]
    created_at: datetime
    finish_reason: str | None = None


@dataclass(frozen=True)
class Approval:
    approval_id: str
    run_id: str
    step_index: int
    tool_call_id: str
    tool_name: str
    input: JSON
    expires_at: datetime
    on_expire: str
    token_id: str
    created_at: datetime
    next_notify_at: datetime | None = None
    notified_at: datetime | None = None
    attempts: int = 0
    decision: Decision | None = None
    reason: str | None = None
    decided_at: datetime | None = None
    # Who decided (the host app's user, the console's login, "link"); None for
    # the engine's own decisions: expiry, and a cancel's withdrawal.
    decided_by: str | None = None
    kind: RequestKind = RequestKind.APPROVAL
    # The JSON schema a person's edited arguments (or answer) must fit.
    schema: JSON = None
    # The arguments a person approved in place of the model's ``input``
    # (None: not edited); the call ran with them.
    arguments: JSON = None
    # A question's answer (kind ``input``).
    answer: JSON = None
    # The decision approved the tool for the rest of the run.
    for_run: bool = False
    # The approval whose "for this run" decided this one (a standing approval).
    standing_from: str | None = None
    on_deny: OnDeny = OnDeny.CONTINUE
    # The agent version that asked, and the kind of tool it asked about
    # (``tool``, ``effect``, ``child``); None for a request made before versions.
    version: str | None = None
    tool_kind: str | None = None
    # "requester": addressed to the thread's own user (runner/core/threads.py);
    # None: to anyone who may decide.
    addressed_to: str | None = None

    @property
    def pending(self) -> bool:
        return self.decision is None

    @property
    def edited(self) -> bool:
        """A person changed the call's arguments before approving it."""
        return self.arguments is not None

    @property
    def question(self) -> str | None:
        """What the model asked, for a request of kind ``input``."""
        if self.kind is not RequestKind.INPUT or not isinstance(self.input, dict):
            return None
        asked = self.input.get("question")
        return asked if isinstance(asked, str) else None


@dataclass(frozen=True)
class StandingApproval:
    """A tool a person approved for the rest of a run: its later calls are
    approved without asking, each recorded as decided by this grant."""

    run_id: str
    tool_name: str
    approval_id: str
    granted_by: str | None
    granted_at: datetime


@dataclass(frozen=True)
class Effect:
    run_id: str
    key: str
    tool: str
    input: JSON
    status: EffectStatus
    started_at: datetime
    epoch: int = 0
    attempts: int = 1
    output: JSON = None
    error: str | None = None
    finished_at: datetime | None = None
    # For an effect of unknown outcome: what was said to have happened, by whom.
    resolved_outcome: EffectOutcome | None = None
    resolved_by: str | None = None
    resolved_note: str | None = None
    resolved_at: datetime | None = None
    # The agent version whose execution started it (None: before versions).
    version: str | None = None

    @property
    def unresolved(self) -> bool:
        """Of unknown outcome, and nobody has said what happened."""
        return self.status is EffectStatus.UNKNOWN and self.resolved_outcome is None

    @property
    def call_id(self) -> str:
        """The tool call the effect was made for (its key is ``run_id:call_id``)."""
        return self.key.split(":", 1)[1] if ":" in self.key else self.key


class Overlap(enum.StrEnum):
    """What a schedule's firing does while a run an earlier firing started
    has not ended (runner/core/schedules/)."""

    # The firing is skipped, and recorded so.
    SKIP = "skip"
    # One firing waits for the earlier run to end, then starts; more are skipped.
    BUFFER_ONE = "buffer_one"
    # Every firing starts a run, whatever runs already.
    ALLOW_ALL = "allow_all"
    # The earlier runs are cancelled, and the firing starts its run.
    CANCEL_OTHER = "cancel_other"


class FiringOutcome(enum.StrEnum):
    """What became of one of a schedule's firings."""

    STARTED = "started"
    SKIPPED = "skipped"
    # Waiting for the schedule's earlier run to end (``buffer_one``).
    BUFFERED = "buffered"
    # Older than the catch-up window when tick() came to it (beat was down).
    MISSED = "missed"
    # Started by hand (``schedules.trigger``), outside the schedule.
    TRIGGERED = "triggered"


@dataclass(frozen=True)
class Schedule:
    """A stored schedule: which agent it starts, with what, and when. Exactly
    one of ``cron`` (in ``timezone``) and ``every_seconds`` is set."""

    name: str
    agent: str
    cron: str | None
    timezone: str
    every_seconds: float | None
    payload: JSON
    thread: str | None
    keys: dict[str, str]
    overlap: Overlap
    catchup_window_seconds: float
    jitter_seconds: float
    paused: bool
    # The next scheduled time, and when tick() fires it (its jitter added).
    next_at: datetime
    next_due_at: datetime
    created_at: datetime
    updated_at: datetime
    # The priority its runs take (docs/flow-control.md).
    priority: int = 0


@dataclass(frozen=True)
class Firing:
    """One of a schedule's firings: its scheduled time, when it was recorded
    (for a started one, its run's start), its run, or why it has none."""

    schedule: str
    scheduled_at: datetime
    outcome: FiringOutcome
    fired_at: datetime
    run_id: str | None = None
    reason: str | None = None


class EvaluationStatus(enum.StrEnum):
    """Where an evaluation is (``evaluations.status``): its cases are being
    replayed, or it ended, with its summary or cancelled."""

    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class EvaluationCaseStatus(enum.StrEnum):
    """Where one case of an evaluation is (``evaluation_cases.status``):
    waiting for a worker, claimed by one (until its claim lapses), done."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"


@dataclass(frozen=True)
class DatasetInfo:
    """A version of a dataset, without its cases: ``version`` is the digest
    of its cases (the same cases, the same version); ``query``, how it was
    built (the journal query, or the file), if it was said."""

    name: str
    version: str
    created_at: datetime
    case_count: int
    created_by: str | None = None
    description: str | None = None
    query: dict[str, Any] | None = None


@dataclass(frozen=True)
class Dataset:
    """A version of a dataset and its cases, in order (each the JSON of a
    case, runner/evals/recording.py)."""

    info: DatasetInfo
    cases: list[dict[str, Any]]


@dataclass(frozen=True)
class EvaluationInfo:
    """An evaluation, without its cases: which dataset version it replays,
    against which agent and label (the version under test), the evaluation
    it compares with (``baseline``), how far it got (``done`` of
    ``case_count``) and, once ended, its summary per scorer."""

    id: str
    dataset: str
    dataset_version: str
    agent: str
    label: str
    status: EvaluationStatus
    created_at: datetime
    case_count: int
    done: int = 0
    baseline: str | None = None
    finished_at: datetime | None = None
    created_by: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] | None = None


@dataclass(frozen=True)
class EvaluationCase:
    """One case of an evaluation (``position``: the dataset case it
    replays): its claim while a worker holds it, how many claims it took,
    and once done its replay report (``result``), its scores by scorer
    (``{"passed": bool | None, "score": float | None, "detail": str | None}``)
    and what it took."""

    evaluation_id: str
    position: int
    status: EvaluationCaseStatus
    attempts: int = 0
    claimed_by: str | None = None
    claimed_until: datetime | None = None
    result: dict[str, Any] | None = None
    scores: dict[str, Any] | None = None
    duration_ms: float | None = None
    cost_usd: float | None = None
    tokens: int | None = None


@dataclass(frozen=True)
class Evaluation:
    """An evaluation and its cases, by position."""

    info: EvaluationInfo
    cases: list[EvaluationCase]


# ---------------------------------------------------------------- write inputs


@dataclass(frozen=True)
class NewRun:
    agent: str
    trigger: TriggerEnvelope
    concurrency_key: str | None = None
    id: str = field(default_factory=new_id)
    # W3C trace context to carry to the executions (runner/observe).
    trace_context: dict[str, str] | None = None
    # The tenant the run belongs to, and its priority, 0 to 9 (store/validate.py).
    tenant: str | None = None
    priority: int = 0

    @property
    def thread(self) -> str | None:
        return self.trigger.thread


@dataclass(frozen=True)
class BudgetBound:
    """An ancestor's token or cost budget, which its descendants share: its
    totals (its own use and theirs) must stay below it (runner/core/children.py)."""

    run_id: str
    max_tokens: int | None = None
    max_cost_usd: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "max_tokens": self.max_tokens,
            "max_cost_usd": self.max_cost_usd,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BudgetBound:
        return cls(str(data["run"]), data.get("max_tokens"), data.get("max_cost_usd"))


@dataclass(frozen=True)
class SharedUse:
    """What an ancestor whose budget a child shares has spent (its own use
    and its descendants') and what its descendants' model calls in flight
    reserved of it, other than the asking run's own."""

    run_id: str
    agent: str
    tokens: int
    cost_usd: float
    reserved: int


class AdmissionVerdict(enum.StrEnum):
    ADMITTED = "admitted"  # the call goes out; its tokens are reserved
    SPENT = "spent"  # a shared budget is used up: the run stops
    HELD = "held"  # others' calls in flight hold what is left: ask again soon


@dataclass(frozen=True)
class Admission:
    """The shared budgets' answer to a child's model call (store.rules.admit):
    for a verdict other than admitted, the budget that gave it and its use."""

    verdict: AdmissionVerdict
    bound: BudgetBound | None = None
    use: SharedUse | None = None


@dataclass(frozen=True)
class NewChild:
    """A child run a parent's tool call starts (runner/core/children.py): its
    identity is the parent and the call (``trigger.id``), so a parent that
    asks again finds the child it started."""

    agent: str
    trigger: TriggerEnvelope
    call_id: str
    detached: bool = False
    id: str = field(default_factory=new_id)
    trace_context: dict[str, str] | None = None
    bounds: tuple[BudgetBound, ...] = ()
    # None: the parent's tenant. A child always takes its parent's priority.
    tenant: str | None = None


@dataclass(frozen=True)
class StepRecord:
    """A step row to write: the llm step in the step's journal write, tool steps
    in its commit."""

    index: int
    kind: StepKind
    started_at: datetime
    finished_at: datetime | None
    name: str | None = None
    tool_call_id: str | None = None
    input: JSON = None
    output: JSON = None
    error: JSON = None
    usage: Usage | None = None
    cost_usd: float | None = None


@dataclass(frozen=True)
class NewApproval:
    tool_call_id: str
    tool_name: str
    input: JSON
    expires_at: datetime
    on_expire: str
    token_id: str
    next_notify_at: datetime | None  # None: the agent has no notifier
    approval_id: str = field(default_factory=new_id)
    kind: RequestKind = RequestKind.APPROVAL
    schema: JSON = None
    on_deny: OnDeny = OnDeny.CONTINUE
    # Approved already, by a standing approval of the run: recorded, not asked.
    granted: StandingApproval | None = None
    # The agent version that asks, and the kind of the tool asked about.
    version: str | None = None
    tool_kind: str | None = None
    addressed_to: str | None = None

    @property
    def pending(self) -> bool:
        return self.granted is None


@dataclass(frozen=True)
class Outcome:
    """How a write ends (or pauses) the run."""

    status: RunStatus
    output: JSON = None
    error: RunError | None = None
    # A run given back to the queue: not claimable before this time.
    not_before: datetime | None = None
    # Why an ``interrupted`` run was given back.
    interruption: Interruption | None = None


@dataclass(frozen=True)
class StepCommit:
    """The step's commit: everything one step leaves behind, written in one
    fenced transaction.

    The checkpoint's messages are the first ``base_count`` messages already in
    the log followed by ``new_messages``. ``base_count`` equal to the stored
    count is the common append; a smaller one (only at an equal index) truncates.
    """

    step_index: int
    base_count: int
    new_messages: list[Message]
    finish_reason: str | None = None
    tool_steps: list[StepRecord] = field(default_factory=list)
    state: JSON = None
    state_changed: bool = False
    approvals: list[NewApproval] = field(default_factory=list)
    # The calls whose child runs this step started (runner/core/children.py).
    child_calls: list[str] = field(default_factory=list)
    # The step waits (for approvals, or for children): the run goes to waiting.
    waits: bool = False
    outcome: Outcome | None = None


@dataclass(frozen=True)
class Ended:
    """The result of a write that moved a run out of ``running``."""

    run: Run
    next_in_key: str | None = None
    # Parents (or the run itself) this write's commit let out of their wait for
    # children: queued again, to be sent (store/pg/base.RESUME_IF_DONE).
    resumed: tuple[str, ...] = ()

    @property
    def hands_on(self) -> bool:
        """Whether the end leaves anything to queue or send: the run again
        (interrupted), the next run of its concurrency key, the parents it
        resumed, or the delayed message of its retry or its park. Everything
        ``Deps.after_end`` acts on, which an execution skips (and the
        thread it takes) when this is False."""
        run = self.run
        return (
            run.status is RunStatus.INTERRUPTED
            or self.next_in_key is not None
            or bool(self.resumed)
            or run.retry_at is not None
            or run.parked_until is not None
        )


@dataclass(frozen=True)
class ParkedKey:
    """The runs parked on one limit (``PostgresStore.parked``): how many, how
    many of each tenant (None: runs of no tenant), and when the first may go."""

    key: str
    runs: int
    tenants: dict[str | None, int]
    next_at: datetime


@dataclass(frozen=True)
class DueNotification:
    approval: Approval
    agent: str


# What the journal port (runner/core/journal.py) hands an execution: plain data.


@dataclass(frozen=True)
class ThreadSummary:
    """A thread in a list: its latest run's agent, status and time, and how
    many runs it had in the list's window."""

    thread: str
    agent: str
    status: RunStatus
    last_at: datetime
    runs: int


@dataclass(frozen=True)
class ThreadStart:
    """Where a thread's next run starts: the history of its latest run that
    ended with one (``run_id``, its messages and state), then the triggers of
    the runs that ended after it without a step (a message cancelled while
    it queued, under ``on_new_message="interrupt"``: its message is not
    lost), and that run's effects (what a rollback tells the model ran)."""

    run_id: str | None
    messages: list[Message]
    state: object
    skipped: tuple[TriggerEnvelope, ...] = ()
    effects: tuple[Effect, ...] = ()


@dataclass(frozen=True)
class EffectBegin:
    """The journal's answer to "may I run this effect?"."""

    effect: Effect
    execute: bool
