"""The Postgres schema. Alembic migrations in ``store/migrations`` must produce
exactly this metadata; ``tests/integration/test_migrations.py`` compares them.

Every query that ``tick()`` runs has a partial index here, so its cost follows
the due work and not the size of the table.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from store.events import EVENT_IDS, TRIGGERS
from store.models import Overlap

metadata = sa.MetaData()

# The one sequence of event ids (store/events.py): steps and run_events take theirs from it.
event_ids = sa.Sequence(EVENT_IDS, metadata=metadata)
_NEXT_EVENT_ID = sa.text("nextval('run_event_ids'::regclass)")
# The order the database takes runs in (runs.arrival).
arrivals = sa.Sequence("runs_arrival_seq", metadata=metadata)

_TS = sa.DateTime(timezone=True)
_NOW = sa.text("now()")

# Statuses in constraints and index predicates are spelled as their enums
# spell them, in the enums' order (tests/unit/test_store_statements.py checks);
# the text must equal the migrations' (tests/integration/test_migrations.py).

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Uuid(as_uuid=False), primary_key=True),
    sa.Column("agent", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    # json, not jsonb, for every value a run's user writes (the trigger, the
    # output, the state; the steps', messages', effects' and approvals' values):
    # jsonb sorts object keys, json reads back in the order written (0012).
    sa.Column("trigger", sa.JSON, nullable=False),
    sa.Column("trigger_id", sa.Text, nullable=False),
    sa.Column("concurrency_key", sa.Text),
    sa.Column("thread", sa.Text),
    sa.Column("output", sa.JSON),
    sa.Column("error_code", sa.Text),
    sa.Column("error_message", sa.Text),
    sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("steps_used", sa.Integer, nullable=False, server_default="0"),
    sa.Column("state", sa.JSON),
    sa.Column("claim_owner", sa.Text),
    sa.Column("claim_expires_at", _TS),
    sa.Column("claim_epoch", sa.Integer, nullable=False, server_default="0"),
    # Takeovers since the run last made progress (the step's journal write or
    # its commit): a run whose
    # executions keep dying ends failed/crashed instead of retrying forever.
    sa.Column("takeovers", sa.Integer, nullable=False, server_default="0"),
    # First time a worker claimed the run without knowing its agent (see
    # Execution: the run is given back until RUNWRIGHT_AGENT_GRACE_SECONDS pass).
    sa.Column("agent_missing_since", _TS),
    sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false()),
    # A run waiting to retry a failing model step (runner/core/retry.py): queued, not
    # claimable before retry_at; the attempts and the error of the current step.
    sa.Column("retry_at", _TS),
    sa.Column("retry_attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("retry_since", _TS),
    sa.Column("retry_error", sa.Text),
    # Steps added to the agent's budget (a retry's --extra-steps, a fork's prefix).
    sa.Column("extra_steps", sa.Integer, nullable=False, server_default="0"),
    # A model that overrides the agent's (a fork onto another model).
    sa.Column("model", sa.Text),
    sa.Column(
        "forked_from",
        sa.Uuid(as_uuid=False),
        sa.ForeignKey("runs.id", name="runs_forked_from_fkey", ondelete="SET NULL"),
    ),
    sa.Column("forked_at_step", sa.Integer),
    # W3C trace context of the request that started the run (its executions
    # join that trace), and what its model calls cost in USD.
    sa.Column("trace_context", sa.JSON),
    sa.Column("cost_usd", sa.Float, nullable=False, server_default="0"),
    # The provider reported no usage for one of its model calls or more: the
    # token figures (and a cost priced from them) are litellm's estimate.
    sa.Column("usage_estimated", sa.Boolean, nullable=False, server_default=sa.false()),
    # An effect of the run has an unknown outcome nobody resolved (store/pg/effects.py).
    sa.Column("needs_attention", sa.Boolean, nullable=False, server_default=sa.false()),
    # Who asked for the run's cancel, the first to ask.
    sa.Column("cancelled_by", sa.Text),
    # Why an execution last gave the run back (store/models.Interruption), and
    # which owner did.
    sa.Column("interrupted_reason", sa.Text),
    sa.Column("interrupted_by", sa.Text),
    # A model step had no price (store/rules.unpriced_call): cost_usd is a lower bound.
    sa.Column("cost_unpriced", sa.Boolean, nullable=False, server_default=sa.false()),
    # A child run (runner/core/children.py): the run whose tool call started it, that
    # call's id, and whether it runs on when its parent is cancelled.
    sa.Column(
        "parent_id",
        sa.Uuid(as_uuid=False),
        sa.ForeignKey("runs.id", name="runs_parent_id_fkey", ondelete="SET NULL"),
    ),
    sa.Column("parent_call_id", sa.Text),
    sa.Column("detached", sa.Boolean, nullable=False, server_default=sa.false()),
    # Its ancestors' token and cost budgets, which bound it too (runner/core/children.py).
    sa.Column("budget_bounds", sa.JSON),
    # A child's ancestors, its parent first, and its top-level run (0016): its
    # usage is added to theirs by id, whatever the tree's depth; and the tokens
    # its model call in flight reserved from the budgets it shares.
    sa.Column("root_id", sa.Uuid(as_uuid=False)),
    sa.Column("ancestors", ARRAY(sa.Uuid(as_uuid=False))),
    sa.Column("reserved_tokens", sa.BigInteger, nullable=False, server_default="0"),
    # The order the database took the run in (0017): a concurrency key's runs
    # go oldest first by it, not by their ids, which each web server mints from
    # its own clock.
    sa.Column(
        "arrival",
        sa.BigInteger,
        nullable=False,
        server_default=sa.text("nextval('runs_arrival_seq')"),
    ),
    # Flow control (0018, docs/architecture.md): the tenant the engine computed
    # at the run's start, and its priority, 0 to 9 (a child takes its parent's).
    sa.Column("tenant", sa.Text),
    sa.Column("priority", sa.SmallInteger, nullable=False, server_default="0"),
    # The limit a queued run is parked on (a model, a concurrency key...) until
    # its retry_at: set by the park (store/pg/flow.py), cleared by the claim and
    # by an end from the queue (a cancel), so that it is set only while the run
    # is parked now.
    sa.Column("parked_key", sa.Text),
    # Agent versions (0019, runner/core/versions.py): the version of the run's
    # latest execution, the one it started on, and what changed at its last
    # move to another (its version event carries it: store/events.py).
    sa.Column("version", sa.Text),
    sa.Column("started_version", sa.Text),
    sa.Column("version_change", JSONB),
    # Erased (0020): its payloads removed by a person, its skeleton kept.
    sa.Column("erased_at", _TS),
    sa.Column("erased_by", sa.Text),
    sa.Column("enqueued_at", _TS),
    sa.Column("created_at", _TS, nullable=False, server_default=_NOW),
    sa.Column("updated_at", _TS, nullable=False, server_default=_NOW),
    sa.Column("started_at", _TS),
    sa.Column("finished_at", _TS),
    sa.CheckConstraint(
        "status IN ('queued', 'running', 'waiting', 'completed', 'failed', 'cancelled',"
        " 'interrupted')",
        name="runs_status_valid",
    ),
    sa.CheckConstraint(
        "interrupted_reason IS NULL OR interrupted_reason IN ('drain', 'agent_missing')",
        name="runs_interrupted_reason_valid",
    ),
    sa.CheckConstraint("priority BETWEEN 0 AND 9", name="runs_priority_valid"),
    sa.UniqueConstraint("agent", "trigger_id", name="runs_agent_trigger_id_key"),
    # One holder per concurrency key, race-free: a second claim fails on this index.
    sa.Index(
        "runs_key_holder_idx",
        "concurrency_key",
        unique=True,
        postgresql_where=sa.text(
            "concurrency_key IS NOT NULL AND status IN ('running', 'waiting', 'interrupted')"
        ),
    ),
    # Queued runs of a key, oldest first (claim order, free-key job).
    sa.Index(
        "runs_key_queue_idx",
        "concurrency_key",
        "arrival",
        postgresql_where=sa.text("concurrency_key IS NOT NULL AND status = 'queued'"),
    ),
    # Lapsed claims (tick() queues them to be taken over).
    sa.Index(
        "runs_running_claim_idx",
        "claim_expires_at",
        postgresql_where=sa.text("status = 'running'"),
    ),
    # Stale enqueues of claimable runs (re-enqueue job).
    sa.Index(
        "runs_claimable_enqueued_idx",
        "enqueued_at",
        postgresql_where=sa.text("status IN ('queued', 'interrupted')"),
    ),
    # A thread's latest ended run (start point of the next run on it).
    sa.Index(
        "runs_thread_idx",
        "thread",
        "id",
        postgresql_where=sa.text("thread IS NOT NULL"),
    ),
    # Retention (prune).
    sa.Index(
        "runs_settled_finished_idx",
        "finished_at",
        postgresql_where=sa.text("status IN ('completed', 'failed', 'cancelled')"),
    ),
    sa.Index("runs_status_idx", "status", "id"),
    # The runs that need a person (runwright runs --needs-attention, the gauge).
    sa.Index("runs_needs_attention_idx", "created_at", postgresql_where=sa.text("needs_attention")),
    sa.Index("runs_agent_idx", "agent", "id"),
    # A run's children (Engine.children, the wait for them).
    sa.Index(
        "runs_parent_idx", "parent_id", "id", postgresql_where=sa.text("parent_id IS NOT NULL")
    ),
    # A tree's reservations in flight (the shared budget's admission).
    sa.Index("runs_root_reserved_idx", "root_id", postgresql_where=sa.text("reserved_tokens > 0")),
    # The runs parked on each limit (``parked``: runwright limits).
    sa.Index("runs_parked_idx", "parked_key", postgresql_where=sa.text("parked_key IS NOT NULL")),
    # The runs of each version not ended (runwright versions).
    sa.Index(
        "runs_live_version_idx",
        "agent",
        "version",
        postgresql_where=sa.text("status IN ('queued', 'running', 'waiting', 'interrupted')"),
    ),
)

steps = sa.Table(
    "steps",
    metadata,
    sa.Column(
        "run_id",
        sa.Uuid(as_uuid=False),
        sa.ForeignKey("runs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("id", sa.BigInteger, event_ids, server_default=_NEXT_EVENT_ID, primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("index", sa.Integer, nullable=False),
    sa.Column("name", sa.Text),
    sa.Column("tool_call_id", sa.Text),
    sa.Column("input", sa.JSON),
    sa.Column("output", sa.JSON),
    sa.Column("error", sa.JSON),
    sa.Column("input_tokens", sa.BigInteger),
    sa.Column("output_tokens", sa.BigInteger),
    sa.Column("cost_usd", sa.Float),
    sa.Column("started_at", _TS, nullable=False),
    sa.Column("finished_at", _TS),
    sa.CheckConstraint("kind IN ('llm', 'tool', 'wait', 'state')", name="steps_kind_valid"),
    # A step is recorded once, whatever retries or takeovers happen.
    sa.Index(
        "steps_llm_once_idx",
        "run_id",
        "index",
        unique=True,
        postgresql_where=sa.text("kind = 'llm'"),
    ),
    sa.Index(
        "steps_tool_once_idx",
        "run_id",
        "index",
        "tool_call_id",
        unique=True,
        postgresql_where=sa.text("kind = 'tool'"),
    ),
    sa.Index(
        "steps_wait_once_idx",
        "run_id",
        "index",
        unique=True,
        postgresql_where=sa.text("kind = 'wait'"),
    ),
)

messages = sa.Table(
    "messages",
    metadata,
    sa.Column(
        "run_id",
        sa.Uuid(as_uuid=False),
        sa.ForeignKey("runs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("body", sa.JSON, nullable=False),
    # The step that wrote the message (a fork takes the history up to a step);
    # NULL on rows written before revision 0004.
    sa.Column("step_index", sa.Integer),
)

checkpoints = sa.Table(
    "checkpoints",
    metadata,
    sa.Column(
        "run_id",
        sa.Uuid(as_uuid=False),
        sa.ForeignKey("runs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("step_index", sa.Integer, nullable=False),
    sa.Column("message_count", sa.Integer, nullable=False),
    sa.Column("finish_reason", sa.Text),
    sa.Column("created_at", _TS, nullable=False, server_default=_NOW),
)

# A run's earlier attempts: each retry (Engine.retry) keeps the outcome it replaced.
run_attempts = sa.Table(
    "run_attempts",
    metadata,
    sa.Column(
        "run_id",
        sa.Uuid(as_uuid=False),
        sa.ForeignKey("runs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("attempt", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("error_code", sa.Text),
    sa.Column("error_message", sa.Text),
    sa.Column("steps_used", sa.Integer, nullable=False),
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
    sa.Column("started_at", _TS),
    sa.Column("finished_at", _TS),
    sa.Column("extra_steps", sa.Integer, nullable=False, server_default="0"),
    sa.Column("retried_at", _TS, nullable=False, server_default=_NOW),
)

effects = sa.Table(
    "effects",
    metadata,
    sa.Column(
        "run_id",
        sa.Uuid(as_uuid=False),
        sa.ForeignKey("runs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("tool", sa.Text, nullable=False),
    sa.Column("input", sa.JSON),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="1"),
    # The claim epoch of the execution that last started it: a retried write of
    # that same execution is not mistaken for an effect a dead process left behind.
    sa.Column("claim_epoch", sa.Integer, nullable=False),
    sa.Column("output", sa.JSON),
    sa.Column("error", sa.Text),
    sa.Column("started_at", _TS, nullable=False),
    sa.Column("finished_at", _TS),
    # For an effect of unknown outcome: what a person said it did, and who.
    sa.Column("resolved_outcome", sa.Text),
    sa.Column("resolved_by", sa.Text),
    sa.Column("resolved_note", sa.Text),
    sa.Column("resolved_at", _TS),
    # The agent version whose execution started it (0019): another version
    # that finds it ``started`` marks it unknown, whatever its tools are.
    sa.Column("version", sa.Text),
    sa.CheckConstraint(
        "status IN ('started', 'completed', 'failed', 'unknown')",
        name="effects_status_valid",
    ),
    sa.CheckConstraint(
        "resolved_outcome IS NULL OR resolved_outcome IN ('done', 'not_done')",
        name="effects_resolved_outcome_valid",
    ),
)

approvals = sa.Table(
    "approvals",
    metadata,
    sa.Column("approval_id", sa.Uuid(as_uuid=False), primary_key=True),
    sa.Column(
        "run_id",
        sa.Uuid(as_uuid=False),
        sa.ForeignKey("runs.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("step_index", sa.Integer, nullable=False),
    sa.Column("tool_call_id", sa.Text, nullable=False),
    sa.Column("tool_name", sa.Text, nullable=False),
    sa.Column("input", sa.JSON),
    sa.Column("expires_at", _TS, nullable=False),
    sa.Column("on_expire", sa.Text, nullable=False),
    sa.Column("token_id", sa.Text, nullable=False),
    sa.Column("notified_at", _TS),
    sa.Column("next_notify_at", _TS),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("decision", sa.Text),
    sa.Column("reason", sa.Text),
    sa.Column("decided_at", _TS),
    sa.Column("created_at", _TS, nullable=False, server_default=_NOW),
    sa.Column("decided_by", sa.Text),
    # A request for a person (0014): ``approval`` of a tool call, or ``input``,
    # a question the model asked (ask_human). ``schema``: what a person's
    # edited arguments, or their answer, must fit; ``arguments``: the edited
    # arguments the call ran with (NULL: the model's, ``input``); ``answer``:
    # a question's answer; ``for_run``: the decision approved the tool for the
    # rest of the run; ``standing_from``: the approval whose "for this run"
    # decided this one; ``on_deny``: ``fail`` ends the run on a person's denial.
    sa.Column("kind", sa.Text, nullable=False, server_default="approval"),
    sa.Column("schema", sa.JSON),
    sa.Column("arguments", sa.JSON),
    sa.Column("answer", sa.JSON),
    sa.Column("for_run", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("standing_from", sa.Uuid(as_uuid=False)),
    sa.Column("on_deny", sa.Text, nullable=False, server_default="continue"),
    # The agent version that asked, and the kind of the tool it asked about
    # (``tool``, ``effect``, ``child``; 0019): a decision on a tool that changed
    # since is checked against the tool as it is now.
    sa.Column("version", sa.Text),
    sa.Column("tool_kind", sa.Text),
    # "requester": the request is addressed to the thread's own user (a chat).
    sa.Column("addressed_to", sa.Text),
    sa.CheckConstraint(
        "decision IS NULL OR decision IN ('approved', 'denied', 'withdrawn', 'answered')",
        name="approvals_decision_valid",
    ),
    sa.CheckConstraint("on_expire IN ('deny', 'fail')", name="approvals_on_expire_valid"),
    sa.CheckConstraint("kind IN ('approval', 'input')", name="approvals_kind_valid"),
    sa.CheckConstraint("on_deny IN ('continue', 'fail')", name="approvals_on_deny_valid"),
    sa.UniqueConstraint("run_id", "tool_call_id", name="approvals_run_call_key"),
    # Notifications to (re-)send.
    sa.Index(
        "approvals_notify_due_idx",
        "next_notify_at",
        postgresql_where=sa.text("decision IS NULL AND notified_at IS NULL"),
    ),
    # Waits to expire.
    sa.Index(
        "approvals_pending_expiry_idx",
        "expires_at",
        postgresql_where=sa.text("decision IS NULL"),
    ),
    # The approvals inbox, oldest first.
    sa.Index(
        "approvals_pending_created_idx",
        "created_at",
        "approval_id",
        postgresql_where=sa.text("decision IS NULL"),
    ),
)

# A tool a person approved for the rest of a run (``decide(..., for_run=True)``):
# its later calls in the run are approved without asking. A retry drops them
# unless asked to keep them; a fork copies them only when asked
# (store/pg/retry_fork.py). ``approval_id``: the decision that granted it.
standing_approvals = sa.Table(
    "standing_approvals",
    metadata,
    sa.Column(
        "run_id",
        sa.Uuid(as_uuid=False),
        sa.ForeignKey("runs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("tool_name", sa.Text, primary_key=True),
    sa.Column("approval_id", sa.Uuid(as_uuid=False), nullable=False),
    sa.Column("granted_by", sa.Text),
    sa.Column("granted_at", _TS, nullable=False, server_default=_NOW),
)

# Schedules (runner/core/schedules/): an agent started by cron (in an IANA time
# zone) or every ``every_seconds``, fired by tick() (0015). ``next_at`` is the
# next scheduled time; ``next_due_at`` adds its jitter: when tick() fires it.
schedules = sa.Table(
    "schedules",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("agent", sa.Text, nullable=False),
    sa.Column("cron", sa.Text),
    sa.Column("timezone", sa.Text, nullable=False, server_default="UTC"),
    sa.Column("every_seconds", sa.Float),
    sa.Column("payload", sa.JSON),
    sa.Column("thread", sa.Text),
    sa.Column("keys", sa.JSON),
    sa.Column("overlap", sa.Text, nullable=False, server_default=Overlap.SKIP.value),
    sa.Column("catchup_window_seconds", sa.Float, nullable=False, server_default="300"),
    sa.Column("jitter_seconds", sa.Float, nullable=False, server_default="0"),
    sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("next_at", _TS, nullable=False),
    sa.Column("next_due_at", _TS, nullable=False),
    sa.Column("created_at", _TS, nullable=False, server_default=_NOW),
    sa.Column("updated_at", _TS, nullable=False, server_default=_NOW),
    # The priority its runs take (0018).
    sa.Column("priority", sa.SmallInteger, nullable=False, server_default="0"),
    sa.CheckConstraint("(cron IS NULL) <> (every_seconds IS NULL)", name="schedules_one_spec"),
    sa.CheckConstraint(
        "overlap IN ('skip', 'buffer_one', 'allow_all', 'cancel_other')",
        name="schedules_overlap_valid",
    ),
    sa.CheckConstraint("priority BETWEEN 0 AND 9", name="schedules_priority_valid"),
    # What tick() fires: the due schedules that are not paused.
    sa.Index("schedules_due_idx", "next_due_at", postgresql_where=sa.text("NOT paused")),
)

# What became of each firing: its run, or why none (skipped, missed, buffered).
# The key is the schedule and the scheduled time: a firing is recorded once,
# and its run's trigger id is derived from the same two (runner/core/schedules/).
schedule_firings = sa.Table(
    "schedule_firings",
    metadata,
    sa.Column(
        "schedule",
        sa.Text,
        sa.ForeignKey("schedules.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("scheduled_at", _TS, primary_key=True),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column(
        "run_id",
        sa.Uuid(as_uuid=False),
        sa.ForeignKey("runs.id", name="schedule_firings_run_id_fkey", ondelete="SET NULL"),
    ),
    sa.Column("reason", sa.Text),
    sa.Column("fired_at", _TS, nullable=False, server_default=_NOW),
    sa.CheckConstraint(
        "outcome IN ('started', 'skipped', 'buffered', 'missed', 'triggered')",
        name="schedule_firings_outcome_valid",
    ),
    # The buffered firings tick() starts once their schedule's run ends.
    sa.Index(
        "schedule_firings_buffered_idx",
        "schedule",
        postgresql_where=sa.text("outcome = 'buffered'"),
    ),
    # A pruned run's firings are found by it.
    sa.Index("schedule_firings_run_idx", "run_id", postgresql_where=sa.text("run_id IS NOT NULL")),
)

# Status, execution and approval events, derived by triggers from the rows of
# runs and approvals (store/events.py); step events are the steps rows.
run_events = sa.Table(
    "run_events",
    metadata,
    sa.Column(
        "run_id",
        sa.Uuid(as_uuid=False),
        sa.ForeignKey("runs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("id", sa.BigInteger, event_ids, server_default=_NEXT_EVENT_ID, primary_key=True),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("data", JSONB, nullable=False),
    sa.Column("at", _TS, nullable=False, server_default=_NOW),
    sa.CheckConstraint(
        "type IN ('status', 'execution', 'approval', 'child', 'version')",
        name="run_events_type_valid",
    ),
)

# The agent versions loaded by a worker or an execution (runner/core/versions.py):
# the definition each is the fingerprint of, so that any process can say what
# changed between two; ``policy``: the agent's on_new_version then.
agent_versions = sa.Table(
    "agent_versions",
    metadata,
    sa.Column("agent", sa.Text, primary_key=True),
    sa.Column("version", sa.Text, primary_key=True),
    sa.Column("label", sa.Text),
    sa.Column("policy", sa.Text, nullable=False, server_default="continue"),
    sa.Column("definition", JSONB, nullable=False),
    sa.Column("first_seen", _TS, nullable=False, server_default=_NOW),
    sa.Column("last_seen", _TS, nullable=False, server_default=_NOW),
    sa.CheckConstraint("policy IN ('continue', 'pin', 'fail')", name="agent_versions_policy_valid"),
)

# Every action of a person on runs' data (store/pg/audit.py, docs/security.md):
# who (``actor``), from where (``source``), what (``action``: viewed payloads,
# decided, edited, answered, cancelled, retried, forked, erased...), on which
# run, and ``detail``. Each row's ``hash`` covers its fields and the row
# before's (``prev_hash``), so that a row deleted or altered breaks the chain
# (``runwright audit verify``). No foreign key: the log outlives pruned runs.
audit = sa.Table(
    "audit",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("at", _TS, nullable=False, server_default=_NOW),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("source", sa.Text),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("run_id", sa.Uuid(as_uuid=False)),
    sa.Column("detail", JSONB),
    sa.Column("prev_hash", sa.Text, nullable=False),
    sa.Column("hash", sa.Text, nullable=False),
    sa.UniqueConstraint("hash", name="audit_hash_key"),
    sa.Index("audit_run_idx", "run_id", "id", postgresql_where=sa.text("run_id IS NOT NULL")),
)

# Datasets (store/pg/evals.py, docs/replay-and-evals.md): lists of cases, each
# the JSON of a case (runner/evals/recording.py), versioned by their content:
# ``version`` is a digest of the case list, so saving the same cases again
# adds nothing. A case is the customer's data (a run's trigger, its
# recording): ``data`` is sealed like the runs' payloads (store/sealing.py);
# ``query`` says how the dataset was built (agent, status, since), in clear.
datasets = sa.Table(
    "datasets",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("version", sa.Text, primary_key=True),
    sa.Column("created_at", _TS, nullable=False, server_default=_NOW),
    sa.Column("created_by", sa.Text),
    sa.Column("description", sa.Text),
    sa.Column("query", JSONB),
    sa.Column("case_count", sa.Integer, nullable=False),
)

dataset_cases = sa.Table(
    "dataset_cases",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("version", sa.Text, primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("data", sa.JSON, nullable=False),
    sa.ForeignKeyConstraint(
        ["name", "version"],
        ["datasets.name", "datasets.version"],
        name="dataset_cases_dataset_fkey",
        ondelete="CASCADE",
    ),
)

# Evaluations: a dataset's cases replayed against an agent (``label``: the
# version under test) and scored, one row of ``evaluation_cases`` per case.
# Workers claim cases with a lease (``claimed_by``, ``claimed_until``) and
# write a case's result only while they hold it. No foreign key to the
# dataset: an evaluation's record outlives the dataset it ran. ``result``
# (the case's replay report) is the customer's data, sealed; ``options``,
# ``summary`` and ``scores`` are numbers and names, in clear.
evaluations = sa.Table(
    "evaluations",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("dataset", sa.Text, nullable=False),
    sa.Column("dataset_version", sa.Text, nullable=False),
    sa.Column("agent", sa.Text, nullable=False),
    sa.Column("label", sa.Text, nullable=False),
    sa.Column("baseline", sa.Text),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("created_at", _TS, nullable=False, server_default=_NOW),
    sa.Column("finished_at", _TS),
    sa.Column("created_by", sa.Text),
    sa.Column("options", JSONB, nullable=False),
    sa.Column("summary", JSONB),
    sa.Column("case_count", sa.Integer, nullable=False),
    sa.CheckConstraint(
        "status IN ('running', 'completed', 'cancelled')", name="evaluations_status_valid"
    ),
)

evaluation_cases = sa.Table(
    "evaluation_cases",
    metadata,
    sa.Column(
        "evaluation_id",
        sa.Text,
        sa.ForeignKey("evaluations.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("claimed_by", sa.Text),
    sa.Column("claimed_until", _TS),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("result", sa.JSON),
    sa.Column("scores", JSONB),
    sa.Column("duration_ms", sa.Float),
    sa.Column("cost_usd", sa.Float),
    sa.Column("tokens", sa.BigInteger),
    sa.CheckConstraint(
        "status IN ('pending', 'running', 'done')", name="evaluation_cases_status_valid"
    ),
    # What a claim looks through: the cases not done, so that its cost
    # follows the open cases and not the evaluation's size.
    sa.Index(
        "evaluation_cases_open_idx",
        "evaluation_id",
        "position",
        postgresql_where=sa.text("status <> 'done'"),
    ),
)

# When tick() last finished: one row, written at the end of every tick
# (runner/core/engine/tick.py). Redis holds the same mark, which the workers' watchdog and
# `runwright doctor` read first; a Redis restart loses it, this one stays.
tick_mark = sa.Table(
    "tick_mark",
    metadata,
    sa.Column("id", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("finished_at", _TS, nullable=False),
    sa.CheckConstraint("id = 1", name="tick_mark_one_row"),
)

for _name, _create, _drop in TRIGGERS:
    sa.event.listen(metadata, "after_create", sa.DDL(_create.replace("%", "%%")))  # type: ignore[no-untyped-call]
