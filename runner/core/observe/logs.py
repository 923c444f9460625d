"""Logs that name the run: a context every record picks up, JSON lines on
request, and one line per outcome.

While an execution runs, a context variable holds its ``run_id``, ``agent``,
``epoch``, the worker, and the current ``step``. :class:`RunContextFilter`
copies them onto every log record, whichever logger wrote it (a tool, litellm,
the model adapter's retries): it sits on the handlers, so records of every
logger pass it. Tool threads and the I/O pool run in a copy of the context, and
so do approval notifiers, on the first send and on tick()'s re-sends
(``deliver`` in runner/core/approvals/decisions.py).
``RUNWRIGHT_LOG_FORMAT=json`` makes every line one JSON object; a line that
carries facts of its own (a decision: its kind, whether it was edited) has
them as fields of that object (:data:`LINE_FIELDS`).

Both formats redact each line as they write it (runner/core/redaction.py):
the message, the exception and the line's own fields, with the redactor of
the agent the record names (``RUNWRIGHT_REDACT`` where it names none, or one
this process does not know). Whatever logger wrote it, a tool's, litellm's
or Runwright's, no matched value reaches a handler Runwright formats.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from runner.core.agent import registry
from runner.core.approvals.expiry import expired
from runner.core.observe import Observer
from runner.core.redaction import Redactor
from store.models import Approval, Fence, RequestKind, Run, RunStatus

log = logging.getLogger(__name__)

FIELDS = ("run_id", "agent", "step", "epoch", "worker")
# The record attribute (``extra={LINE_FIELDS: {...}}``) holding a line's own
# fields, which the JSON format writes beside the run context.
LINE_FIELDS = "runwright_fields"

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "runwright_log_context", default=None
)


def current() -> dict[str, Any]:
    """The run context of this task or thread (empty outside an execution)."""
    return dict(_context.get() or {})


@contextlib.contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to the log context for the block."""
    token = _context.set({**(_context.get() or {}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


_RUN_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
EXECUTE_TASK = "runwright.execute"


class RunContextFilter(logging.Filter):
    """Puts the run context on every record (``None`` outside an execution).
    Celery's own lines about a ``runwright.execute`` task (received,
    succeeded, failed) are written outside the execution: they get the run id
    from the task's argument."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _context.get() or {}
        if not context:
            context = _from_celery(record)
        for name in FIELDS:
            if not hasattr(record, name) or getattr(record, name) is None:
                setattr(record, name, context.get(name))
        return True


def _from_celery(record: logging.LogRecord) -> dict[str, Any]:
    data = getattr(record, "data", None)
    if not isinstance(data, dict) or data.get("name") != EXECUTE_TASK:
        return {}
    found = _RUN_ID.search(str(data.get("args", "")))
    return {"run_id": found.group(0)} if found else {}


def redactor_of(record: logging.LogRecord) -> Redactor:
    """The redactor of the agent ``record`` names (the project's if none)."""
    agent = getattr(record, "agent", None)
    return registry.redactor(agent if isinstance(agent, str) else None)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the run
    context, and the exception's traceback as a string field; redacted."""

    def format(self, record: logging.LogRecord) -> str:
        redactor = redactor_of(record)
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redactor.text(record.getMessage()),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        own = getattr(record, LINE_FIELDS, None)
        if isinstance(own, dict):
            for name, value in redactor.redact(own).items():
                entry.setdefault(name, value)  # never over the standard fields
        if record.exc_info:
            entry["exception"] = "".join(traceback.format_exception(*record.exc_info))
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if "exception" in entry:
            entry["exception"] = redactor.text(entry["exception"])
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The usual text line, with ``[run=… step=…]`` when a run is in context;
    redacted."""

    def format(self, record: logging.LogRecord) -> str:
        line = redactor_of(record).text(super().format(record))
        run_id = getattr(record, "run_id", None)
        if run_id is None:
            return line
        step = getattr(record, "step", None)
        tag = f"run={run_id}" if step is None else f"run={run_id} step={step}"
        return f"{line} [{tag}]"


def install(handlers: list[logging.Handler], log_format: str) -> None:
    """Give ``handlers`` the run context and, for ``json``, the JSON format
    (a worker calls this once Celery has set up its logging)."""
    for handler in handlers:
        if not any(isinstance(f, RunContextFilter) for f in handler.filters):
            handler.addFilter(RunContextFilter())
        if log_format == "json":
            handler.setFormatter(JsonFormatter())
        elif not isinstance(handler.formatter, TextFormatter):
            fmt = handler.formatter._fmt if handler.formatter is not None else None
            handler.setFormatter(TextFormatter(fmt))


class LogObserver(Observer):
    """Binds the log context and writes the outcome lines."""

    def execution(
        self, run: Run, fence: Fence, worker: str
    ) -> contextlib.AbstractContextManager[None]:
        return bound(run_id=run.id, agent=run.agent, epoch=fence.epoch, worker=worker, step=None)

    def step(self, run: Run, index: int) -> contextlib.AbstractContextManager[None]:
        return bound(step=index)

    def ended(self, run: Run, seconds: float) -> None:
        cost = f", ${run.cost_usd:.4f}" if getattr(run, "cost_usd", None) else ""
        summary = (
            f"run {run.id} ({run.agent}) {run.status.value}: {run.steps_used} step(s), "
            f"{run.usage.total} tokens{cost}, {seconds:.2f} s"
        )
        if run.status is RunStatus.FAILED and run.error is not None:
            log.error("%s: %s: %s", summary, run.error.code, run.error.message)
        elif run.status is RunStatus.QUEUED and run.retry_at is not None and run.retry:
            log.info("%s; retrying at %s: %s", summary, f"{run.retry_at:%H:%M:%S}", run.retry.error)
        else:
            log.info("%s", summary)

    def approval_decided(self, run: Run, approval: Approval) -> None:
        """One INFO line per decision, in the deciding process (a web request,
        the CLI, tick's expiry), which runs outside any execution: the run is
        named on the record itself. Who decided and how; never what the model
        asked, the person's arguments, reason or answer (run content)."""
        if approval.decision is None:
            return
        question = approval.kind is RequestKind.INPUT
        noun = (
            f"question {approval.approval_id}"
            if question
            else (f"approval {approval.approval_id} of {approval.tool_name}")
        )
        by_expiry = expired(approval)
        if by_expiry:
            words = "not answered: it expired" if question else "not approved: it expired"
        else:
            words = f"{approval.decision.value} by {approval.decided_by or 'someone unnamed'}"
            if approval.standing_from is not None:
                words += f" (standing approval from {approval.standing_from})"
            if approval.edited:
                words += ", with edited arguments"
            if approval.for_run:
                words += ", for the rest of the run"
        log.info(
            "run %s (%s): %s %s",
            run.id,
            run.agent,
            noun,
            words,
            extra={
                "run_id": run.id,
                "agent": run.agent,
                "step": approval.step_index,  # the step that asked
                LINE_FIELDS: {
                    "event": "approval_decided",
                    "approval_id": approval.approval_id,
                    "kind": approval.kind.value,
                    "tool": approval.tool_name,
                    "decision": approval.decision.value,
                    "expired": by_expiry,
                    "decided_by": approval.decided_by,
                    "edited": approval.edited,
                    "for_run": approval.for_run,
                    "standing": approval.standing_from is not None,
                    "standing_from": approval.standing_from,
                },
            },
        )

    def taken_over(self, run: Run, previous_epoch: int) -> None:
        epoch = run.claim.epoch if run.claim else None
        log.warning(
            "run %s taken over: epoch %s replaces epoch %s, whose execution stopped",
            run.id,
            epoch,
            previous_epoch,
        )

    def lease_lost(self, run_id: str, epoch: int, current_epoch: int | None) -> None:
        now = "another execution" if current_epoch is None else f"epoch {current_epoch}"
        log.warning("run %s: lease lost at epoch %s to %s; stopping", run_id, epoch, now)
