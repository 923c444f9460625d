"""OpenTelemetry traces of runs (extra ``runwright[otel]``, ``RUNWRIGHT_OTEL=1``).

One trace per run, whichever processes it crosses. ``Engine.start`` opens a
span in the caller (under the web request's span, if there is one) and stores
its W3C context with the run; every execution, in whatever worker and however
late (after an approval, after a crash), opens its span under that context.
Below it: a span per step, a model-call span and a tool span per call, named
and described in the OpenTelemetry GenAI conventions (``chat {model}``,
``execute_tool {tool}``, ``gen_ai.*`` attributes). Approvals, retries,
takeovers and lost leases are span events; a decision is also a short span of
its own (``runwright.approval {tool}``) saying what kind it was: an approval or
a question's answer, edited, for the rest of the run, or by a standing
approval. Exceptions and failed runs set the span's status to ERROR.

Nothing a run carries (its payload, the messages, tool arguments and results,
an approval's input, a person's edited arguments, reason or answer, the
output) goes into a span unless
``RUNWRIGHT_OTEL_CAPTURE_CONTENT`` is on: traces often go to a service with
wider access than the run store. What is captured, and every error text a
span carries, is redacted first with the redactor of the run's agent
(runner/core/redaction.py).

The spans go to the global tracer provider. A worker installs one if the
process has none (:func:`start_worker`): the SDK's, exporting over OTLP/HTTP
as the standard ``OTEL_*`` variables say. A web app can do the same with
:func:`configure`, or set up its own provider, which is then used as it is.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import context, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from runner.core.agent import registry
from runner.core.observe import ModelCall, Observer, ToolCall
from runner.core.redaction import Redactor
from runner.core.release import version
from runner.core.settings import Settings
from runner.observe.genai import provider_of, system_of
from store.models import Approval, Fence, NewApproval, RetryWait, Run, RunStatus

log = logging.getLogger(__name__)

# Captured content (opt-in) is cut to this many characters per attribute.
MAX_CONTENT_CHARS = 8192
MAX_ERROR_CHARS = 1024

# Only the W3C trace context is stored with a run, never baggage: the run
# table is no place for whatever the caller put in its baggage.
_PROPAGATOR = TraceContextTextMapPropagator()

# Attribute names: the GenAI conventions where they have one, runwright.* else.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"  # deprecated for gen_ai.provider.name; many backends still read it
REQUEST_MODEL = "gen_ai.request.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"

RUN_ID = "runwright.run_id"
AGENT = "runwright.agent"
EPOCH = "runwright.epoch"
WORKER = "runwright.worker"
STEP = "runwright.step"
MODEL = "runwright.model"
COST = "runwright.cost_usd"
EFFECT = "runwright.tool.effect"
MCP_SERVER = "runwright.mcp.server"
PAYLOAD = "runwright.payload"
OUTPUT = "runwright.output"
RUN_STATUS = "runwright.run.status"
RUN_STEPS = "runwright.run.steps"
RUN_INPUT_TOKENS = "runwright.run.input_tokens"
RUN_OUTPUT_TOKENS = "runwright.run.output_tokens"
RUN_COST = "runwright.run.cost_usd"
PREVIOUS_EPOCH = "runwright.previous_epoch"
CURRENT_EPOCH = "runwright.current_epoch"
TAKEOVERS = "runwright.takeovers"
APPROVAL_ID = "runwright.approval.id"
APPROVAL_DECISION = "runwright.approval.decision"
APPROVAL_EXPIRES = "runwright.approval.expires_at"
APPROVAL_WAITED = "runwright.approval.waited_seconds"
APPROVAL_REASON = "runwright.approval.reason"
APPROVAL_KIND = "runwright.approval.kind"  # approval, or input (a question)
APPROVAL_EDITED = "runwright.approval.edited"
APPROVAL_FOR_RUN = "runwright.approval.for_run"
# Decided by a standing approval (another decision's "for the rest of the run").
APPROVAL_STANDING = "runwright.approval.standing"
APPROVAL_STANDING_FROM = "runwright.approval.standing_from"
APPROVAL_ARGUMENTS = "runwright.approval.arguments"  # the person's, in place of the model's
APPROVAL_ANSWER = "runwright.approval.answer"
RETRY_ATTEMPTS = "runwright.retry.attempts"
RETRY_AT = "runwright.retry.at"
RETRY_ERROR = "runwright.retry.error"

# Event names.
TAKEN_OVER = "runwright.takeover"
LEASE_LOST = "runwright.lease_lost"
APPROVAL_REQUESTED = "runwright.approval.requested"
APPROVAL_DECIDED = "runwright.approval.decided"
RETRY_SCHEDULED = "runwright.retry.scheduled"


@dataclass
class _Spans:
    """The spans of the execution running in this context (an asyncio task
    and the tasks and tool threads it starts, which copy its context)."""

    execution: Span
    epoch: int
    step: Span | None = None


_current: contextvars.ContextVar[_Spans | None] = contextvars.ContextVar(
    "runwright_otel_spans", default=None
)


class OtelObserver(Observer):
    """Spans and span events for the engine's hooks (see the module docstring)."""

    def __init__(self, settings: Settings, tracer_provider: trace.TracerProvider | None = None):
        self.capture = settings.otel_capture_content
        self.tracer = trace.get_tracer("runwright", version(), tracer_provider=tracer_provider)

    # ----------------------------------------------------------- the caller

    @contextlib.contextmanager
    def starting(self, agent: str, carrier: dict[str, str]) -> Iterator[None]:
        span = self.tracer.start_span(
            f"runwright.start {agent}", kind=SpanKind.PRODUCER, attributes={AGENT: agent}
        )
        with _active(span):
            # The start span's context, or the caller's own if no SDK records
            # here: either way the executions join the caller's trace.
            _PROPAGATOR.inject(carrier)
            yield

    def started(self, run: Run) -> None:
        # The start span is current here (starting() made it so).
        trace.get_current_span().set_attribute(RUN_ID, run.id)

    def approval_decided(self, run: Run, approval: Approval) -> None:
        # A short span in the run's trace; the deciding request's own trace
        # (if any) is linked, so each can be found from the other.
        here = trace.get_current_span().get_span_context()
        parent = _parent(run)
        links = [Link(here)] if parent is not None and here.is_valid else None
        # What kind of decision it was is on the span as well as its event:
        # backends filter spans by their attributes far more readily.
        how: dict[str, Any] = {
            APPROVAL_KIND: approval.kind.value,
            APPROVAL_EDITED: approval.edited,
            APPROVAL_FOR_RUN: approval.for_run,
            APPROVAL_STANDING: approval.standing_from is not None,
        }
        if approval.decision is not None:
            how[APPROVAL_DECISION] = approval.decision.value
        span = self.tracer.start_span(
            f"runwright.approval {approval.tool_name}",
            context=parent,
            links=links,
            attributes={RUN_ID: run.id, AGENT: run.agent, **how},
        )
        event: dict[str, Any] = {
            APPROVAL_ID: approval.approval_id,
            TOOL_NAME: approval.tool_name,
            TOOL_CALL_ID: approval.tool_call_id,
            STEP: approval.step_index,
            **how,
        }
        if approval.standing_from is not None:
            event[APPROVAL_STANDING_FROM] = approval.standing_from
        if approval.decided_at is not None:
            event[APPROVAL_WAITED] = (approval.decided_at - approval.created_at).total_seconds()
        if self.capture:
            redactor = _redactor(run)
            event[TOOL_ARGUMENTS] = _content(approval.input, redactor)
            if approval.reason is not None:
                event[APPROVAL_REASON] = _content(approval.reason, redactor)
            if approval.arguments is not None:
                event[APPROVAL_ARGUMENTS] = _content(approval.arguments, redactor)
            if approval.answer is not None:
                event[APPROVAL_ANSWER] = _content(approval.answer, redactor)
        span.add_event(APPROVAL_DECIDED, event)
        span.end()

    # ----------------------------------------------------------- executions

    @contextlib.contextmanager
    def execution(self, run: Run, fence: Fence, worker: str) -> Iterator[None]:
        parent = _parent(run)
        here = trace.get_current_span().get_span_context()
        attributes: dict[str, Any] = {
            OPERATION: "invoke_agent",
            AGENT_NAME: run.agent,
            RUN_ID: run.id,
            AGENT: run.agent,
            EPOCH: fence.epoch,
            WORKER: worker,
        }
        if run.thread:
            attributes[CONVERSATION] = run.thread
        if self.capture:
            attributes[PAYLOAD] = _content(run.trigger.payload, _redactor(run))
        span = self.tracer.start_span(
            f"invoke_agent {run.agent}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=[Link(here)] if parent is not None and here.is_valid else None,
            attributes=attributes,
        )
        token = _current.set(_Spans(span, fence.epoch))
        try:
            with _active(span, redactor=_redactor(run)):
                yield
        finally:
            _current.reset(token)

    @contextlib.contextmanager
    def step(self, run: Run, index: int) -> Iterator[None]:
        spans = _current.get()
        attributes: dict[str, Any] = {RUN_ID: run.id, STEP: index}
        if spans is not None:
            # The epoch too: the step spans of an execution that was killed
            # are exported without their parent, which never ended.
            attributes[EPOCH] = spans.epoch
        span = self.tracer.start_span("runwright.step", attributes=attributes)
        outer = spans.step if spans is not None else None
        if spans is not None:
            spans.step = span
        try:
            with _active(span, redactor=_redactor(run)):
                yield
        finally:
            if spans is not None:
                spans.step = outer

    @contextlib.contextmanager
    def model_call(self, run: Run, call: ModelCall) -> Iterator[None]:
        provider, model = provider_of(call.model)
        # The step here too (and on tool spans): the spans of a killed
        # execution's last step are exported without the step's span.
        attributes: dict[str, Any] = {
            OPERATION: "chat",
            REQUEST_MODEL: model,
            MODEL: call.model,
            STEP: call.step,
        }
        if provider is not None:
            attributes[PROVIDER] = provider
            attributes[SYSTEM] = system_of(provider)
        span = self.tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)
        redactor = _redactor(run)
        with _active(span, lambda: self._answered(span, call, redactor), redactor):
            yield

    def _answered(self, span: Span, call: ModelCall, redactor: Redactor) -> None:
        if call.usage is not None:
            span.set_attribute(INPUT_TOKENS, call.usage.input_tokens)
            span.set_attribute(OUTPUT_TOKENS, call.usage.output_tokens)
        if call.finish_reason is not None:
            span.set_attribute(FINISH_REASONS, (call.finish_reason,))
        if call.cost_usd is not None:
            span.set_attribute(COST, call.cost_usd)
        if self.capture:
            _maybe(span, INPUT_MESSAGES, list(call.messages) or None, redactor)
            _maybe(span, OUTPUT_MESSAGES, call.output, redactor)

    @contextlib.contextmanager
    def tool_call(self, run: Run, call: ToolCall) -> Iterator[None]:
        span = self.tracer.start_span(
            f"execute_tool {call.name}",
            attributes={
                OPERATION: "execute_tool",
                TOOL_NAME: call.name,
                TOOL_CALL_ID: call.call_id,
                TOOL_TYPE: "function",
                EFFECT: call.effect,
                STEP: call.step,
                **({MCP_SERVER: call.mcp_server} if call.mcp_server else {}),
            },
        )
        redactor = _redactor(run)
        with _active(span, lambda: self._returned(span, call, redactor), redactor):
            yield

    def _returned(self, span: Span, call: ToolCall, redactor: Redactor) -> None:
        if call.error is not None:
            # What the model was told, which quotes the tool's exception but
            # never its arguments.
            span.set_status(Status(StatusCode.ERROR, _error(call.error, redactor)))
            span.set_attribute(ERROR_TYPE, "tool_error")
        if self.capture:
            _maybe(span, TOOL_ARGUMENTS, call.arguments, redactor)
            _maybe(span, TOOL_RESULT, call.result, redactor)

    # ---------------------------------------------------------------- events

    def approvals_requested(self, run: Run, approvals: Sequence[NewApproval]) -> None:
        spans = _current.get()
        if spans is None:
            return
        span = spans.step or spans.execution
        for approval in approvals:
            event: dict[str, Any] = {
                APPROVAL_ID: approval.approval_id,
                TOOL_NAME: approval.tool_name,
                TOOL_CALL_ID: approval.tool_call_id,
                APPROVAL_KIND: approval.kind.value,
                APPROVAL_EXPIRES: approval.expires_at.isoformat(),
            }
            if self.capture:
                event[TOOL_ARGUMENTS] = _content(approval.input, _redactor(run))
            span.add_event(APPROVAL_REQUESTED, event)

    def retry_scheduled(self, run: Run, wait: RetryWait) -> None:
        spans = _current.get()
        if spans is None:
            return
        event: dict[str, Any] = {
            RETRY_ATTEMPTS: wait.attempts,
            RETRY_ERROR: _error(wait.error, _redactor(run)),
        }
        if wait.at is not None:
            event[RETRY_AT] = wait.at.isoformat()
        spans.execution.add_event(RETRY_SCHEDULED, event)

    def taken_over(self, run: Run, previous_epoch: int) -> None:
        spans = _current.get()
        if spans is not None:
            spans.execution.add_event(
                TAKEN_OVER, {PREVIOUS_EPOCH: previous_epoch, TAKEOVERS: run.takeovers}
            )

    def lease_lost(self, run_id: str, epoch: int, current_epoch: int | None) -> None:
        spans = _current.get()
        if spans is None:
            return
        event: dict[str, Any] = {EPOCH: epoch}
        if current_epoch is not None:
            event[CURRENT_EPOCH] = current_epoch
        spans.execution.add_event(LEASE_LOST, event)
        spans.execution.set_status(Status(StatusCode.ERROR, "the lease was lost"))
        spans.execution.set_attribute(ERROR_TYPE, "lease_lost")

    def ended(self, run: Run, seconds: float) -> None:
        spans = _current.get()
        if spans is None:
            return
        span = spans.execution
        span.set_attributes(
            {
                RUN_STATUS: run.status.value,
                RUN_STEPS: run.steps_used,
                RUN_INPUT_TOKENS: run.usage.input_tokens,
                RUN_OUTPUT_TOKENS: run.usage.output_tokens,
                RUN_COST: run.cost_usd,
            }
        )
        if run.status is RunStatus.FAILED and run.error is not None:
            description = _error(f"{run.error.code}: {run.error.message}", _redactor(run))
            span.set_status(Status(StatusCode.ERROR, description))
            span.set_attribute(ERROR_TYPE, run.error.code)
        if self.capture and run.output is not None:
            span.set_attribute(OUTPUT, _content(run.output, _redactor(run)))


def observer(settings: Settings) -> Observer:
    """The listener ``RUNWRIGHT_OTEL=1`` adds (``runner/core/observe/setup.py``)."""
    return OtelObserver(settings)


# -------------------------------------------------------------- span helpers


@contextlib.contextmanager
def _active(
    span: Span, finish: Callable[[], None] | None = None, redactor: Redactor | None = None
) -> Iterator[None]:
    """``span`` as the current span for the block, then ended. The context is
    attached and detached here, in the block's own task or thread, so the
    token is always reset in the context that made it. An exception is
    recorded redacted."""
    token = context.attach(trace.set_span_in_context(span))
    try:
        yield
    except Exception as exc:
        redactor = redactor or registry.redactor(None)
        if redactor:
            span.add_event(
                "exception",
                {
                    "exception.type": type(exc).__qualname__,
                    "exception.message": redactor.text(str(exc)),
                    "exception.stacktrace": redactor.text("".join(traceback.format_exception(exc))),
                },
            )
        else:
            span.record_exception(exc)
        description = _error(f"{type(exc).__name__}: {exc}", redactor)
        span.set_status(Status(StatusCode.ERROR, description))
        span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
        raise
    finally:
        context.detach(token)
        if finish is not None:
            try:
                finish()
            except Exception:
                log.exception("runwright: could not finish span %r", span)
        span.end()


def _parent(run: Run) -> context.Context | None:
    """The context stored with the run, or None (the current one) without it."""
    stored = run.trace_context
    if not stored or not isinstance(stored, Mapping):
        return None
    # Read from the database: only strings reach the parser.
    carrier = {k: v for k, v in stored.items() if isinstance(k, str) and isinstance(v, str)}
    extracted = _PROPAGATOR.extract(carrier)
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return extracted


def _redactor(run: Run) -> Redactor:
    return registry.redactor(run.agent)


def _content(value: Any, redactor: Redactor) -> str:
    """Captured content as an attribute: redacted, as JSON text, clipped."""
    if isinstance(value, str):
        return _clip(redactor.text(value), MAX_CONTENT_CHARS)
    try:
        text = json.dumps(redactor.redact(value), default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        text = redactor.text(repr(value))
    return _clip(redactor.text(text), MAX_CONTENT_CHARS)


def _error(text: str, redactor: Redactor) -> str:
    """An error's text as a span's status or attribute: redacted, clipped."""
    return _clip(redactor.text(text), MAX_ERROR_CHARS)


def _maybe(span: Span, name: str, value: Any, redactor: Redactor) -> None:
    if value is not None:
        span.set_attribute(name, _content(value, redactor))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------- the tracer provider
# The SDK's, exporting over OTLP/HTTP as the standard ``OTEL_*`` variables say,
# installed only if the process has none.

# Without OTEL_BSP_SCHEDULE_DELAY, a worker exports its ended spans every
# second rather than the SDK's five: a worker killed mid-run has sent what it
# had finished by then, at the cost of at most one small request a second.
WORKER_SCHEDULE_DELAY_MS = 1000
FLUSH_TIMEOUT_MS = 5000

_installed: Any = None  # the SDK TracerProvider configure() installed, if any
_install_lock = threading.Lock()


def configure(service_name: str = "runwright") -> bool:
    """Install the SDK's tracer provider, exporting over OTLP/HTTP, unless
    this process has a tracer provider already (then it is used as it is).

    The exporter reads the standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``OTEL_EXPORTER_OTLP_HEADERS``, ...); ``OTEL_SERVICE_NAME`` (or
    ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``) overrides
    ``service_name``; ``OTEL_SDK_DISABLED=true`` turns it off. Spans are
    exported every second unless ``OTEL_BSP_SCHEDULE_DELAY`` says otherwise.
    Returns whether it installed one.

    A web app that starts runs calls this once at start-up (or configures
    OpenTelemetry its own way) so that its ``start()`` spans are exported.
    """
    global _installed
    with _install_lock:
        if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            return False
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return False
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = os.environ.get(name, "").strip()
            if protocol and protocol != "http/protobuf":
                log.warning(
                    "runwright exports traces over OTLP/HTTP (http/protobuf) only; %s=%s ignored",
                    name,
                    protocol,
                )
                break
        resource = Resource.create()
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: service_name}))
        delay = None if os.environ.get("OTEL_BSP_SCHEDULE_DELAY") else WORKER_SCHEDULE_DELAY_MS
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=delay)
        )
        trace.set_tracer_provider(provider)
        _installed = provider
        log.info(
            "OpenTelemetry: exporting traces over OTLP/HTTP as service %r",
            resource.attributes.get(SERVICE_NAME),
        )
        return True


def start_worker(settings: Settings) -> None:
    """In a worker, before it takes tasks: a tracer provider unless it has one."""
    configure("runwright-worker")


def stop_worker() -> None:
    """On shutdown: export what is still buffered, and stop the exporter that
    :func:`configure` started (a provider the app installed is only flushed)."""
    global _installed
    provider = _installed if _installed is not None else trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    if flush is not None:
        try:
            flush(FLUSH_TIMEOUT_MS)
        except Exception:
            log.exception("OpenTelemetry: flushing spans at shutdown failed")
    if _installed is not None:
        try:
            _installed.shutdown()
        finally:
            _installed = None
