"""Prometheus metrics of a worker (extra ``runwright[metrics]``).

``RUNWRIGHT_METRICS_PORT`` turns them on: every engine built from the
environment gets :func:`observer`, and a worker serves ``/metrics`` on that port
of ``RUNWRIGHT_METRICS_HOST`` (default ``127.0.0.1``; :func:`start_worker`,
from Celery's ``worker_init``). The counters and
histograms count what this process saw; the backlog gauges (pending approvals,
the last tick's age) are read from Postgres and Redis at scrape time, so every
worker reports the same values for them.

The metrics live on :data:`REGISTRY`, this module's own registry, not
prometheus_client's global one: an application that imports the engine keeps
its global registry to itself (no name can clash, and nothing of ours appears
in its own ``/metrics``), and tests can read ours alone. The endpoint adds the
usual process, platform and GC collectors to it.

Label values are agent, model and tool names, agent versions (12 hex
digits), limit keys and a few fixed words, never a run id, call id or error
text. Names come from code and
configuration, but a model can be chosen per run (a fork) and a stored run
names its agent, so each of those labels keeps at most :data:`MAX_AGENTS`,
:data:`MAX_MODELS`, :data:`MAX_KEYS`, :data:`MAX_TOOLS` and :data:`MAX_VERSIONS` distinct values per
process, each clipped to :data:`MAX_LABEL_CHARS`; values first seen beyond the
cap are counted under ``other``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from runner.core.agent import limit_label
from runner.core.approvals.expiry import expired
from runner.core.errors import ConfigurationError
from runner.core.observe import ModelCall, Observer, TickReport, ToolCall, ToolStatus
from store.models import Approval, Fence, ParkedKey, RetryWait, Run, utcnow

if TYPE_CHECKING:
    from runner.core.settings import Settings
    from store.workers import WorkerInfo

log = logging.getLogger(__name__)
T = TypeVar("T")

REGISTRY = CollectorRegistry(auto_describe=True)

OTHER = "other"
MAX_AGENTS = 100
MAX_MODELS = 50
MAX_TOOLS = 200
# A worker runs one version of each agent; a process sees more only across
# deploys, as runs of older versions end on it.
MAX_VERSIONS = 100
# Limit keys are model names today (runner/core/limits/admission.py): as many.
MAX_KEYS = MAX_MODELS
MAX_LABEL_CHARS = 100
# Scrapes come every few seconds from each Prometheus; the backlog query is
# asked at most this often per worker.
BACKLOG_CACHE_SECONDS = 5.0

MODEL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
TOOL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A call waits in place at most RUNWRIGHT_LIMIT_WAIT_SECONDS (2 s by default);
# most wait not at all, which the first bucket tells apart.
LIMIT_WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class Bounded:
    """The values of one label: the first ``limit`` distinct ones pass (clipped),
    later ones read :data:`OTHER`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        value = str(value)[:MAX_LABEL_CHARS]
        if value in self._seen:
            return value
        with self._lock:
            if value in self._seen:
                return value
            if len(self._seen) >= self.limit:
                return OTHER
            self._seen.add(value)
            return value


class Metrics:
    """The instruments the hooks update, on one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, doc: str, labels: Iterable[str]) -> Counter:
            return Counter(name, doc, list(labels), registry=registry)

        self.runs_settled = counter(
            "runwright_runs_settled_total",
            "Runs ended by an execution, by their final status: completed, failed, cancelled.",
            ("agent", "status"),
        )
        self.runs_paused = counter(
            "runwright_runs_paused_total",
            "Executions that ended with their run at no final status, by the status they left it "
            "in: waiting (an approval), queued (a retry), interrupted (a shutdown).",
            ("agent", "status"),
        )
        self.executions = counter(
            "runwright_executions_total",
            "Executions ended, by the agent version they ran on (none: ended before their "
            "first step recorded one) and the status they left their run in.",
            ("agent", "version", "status"),
        )
        self.steps = counter(
            "runwright_steps_total",
            "Steps run: kind=llm, a model call answered; kind=tool, a tool call run.",
            ("agent", "kind"),
        )
        self.tokens = counter(
            "runwright_tokens_total",
            "Tokens of the model calls answered, by direction (input, output).",
            ("agent", "model", "direction"),
        )
        self.cost = counter(
            "runwright_cost_usd_total",
            "What the model calls cost in USD, from litellm's cost map (priced models only).",
            ("agent", "model"),
        )
        self.takeovers = counter(
            "runwright_takeovers_total",
            "Executions that took a run over from one that stopped holding its lease.",
            ("agent",),
        )
        self.lease_losses = counter(
            "runwright_lease_losses_total",
            "Executions that lost their run's lease to another and stopped.",
            ("agent",),
        )
        self.retries = counter(
            "runwright_retries_scheduled_total",
            "Failed model steps sent back to the queue for a durable retry.",
            ("agent",),
        )
        self.effects_unknown = counter(
            "runwright_effects_unknown_total",
            "Effects found of unknown outcome: started by an execution that died before "
            "recording their result; each needs a person (or its reconcile) to resolve it.",
            ("agent", "tool"),
        )
        self.decisions = counter(
            "runwright_approval_decisions_total",
            "Approvals and questions decided in this process, by decision: approved, "
            "denied, answered, or expired (nobody decided in time); edited: a person "
            "changed the call's arguments before approving it.",
            ("agent", "tool", "decision", "edited"),
        )
        self.notification_failures = counter(
            "runwright_notification_failures_total",
            "Approval notifications the agent's notifier failed to deliver.",
            ("agent",),
        )
        self.in_flight = Gauge(
            "runwright_executions_in_flight",
            "Executions running in this process now.",
            ["agent"],
            registry=registry,
        )
        self.model_seconds = Histogram(
            "runwright_model_call_duration_seconds",
            "Duration of model calls (retries within the call included), answered or not.",
            ["agent", "model"],
            buckets=MODEL_BUCKETS,
            registry=registry,
        )
        self.tool_calls = counter(
            "runwright_tool_calls_total",
            "Tool calls, by what became of them: ok, error (the tool raised), denied (a "
            "person refused it), timeout or cancelled (abandoned), unknown (an effect of "
            "unknown outcome).",
            ("agent", "tool", "status"),
        )
        self.tool_seconds = Histogram(
            "runwright_tool_call_duration_seconds",
            "Duration of tool calls, from the call to its recorded result.",
            ["agent", "tool", "status"],
            buckets=TOOL_BUCKETS,
            registry=registry,
        )
        self.limit_wait = Histogram(
            "runwright_limit_wait_seconds",
            "How long a model call under its model's limit waited in place before it went "
            "(a run parked meanwhile is not counted here: runwright_runs_parked_total).",
            ["model"],
            buckets=LIMIT_WAIT_BUCKETS,
            registry=registry,
        )
        self.tokens_reserved = counter(
            "runwright_limit_tokens_reserved_total",
            "Tokens model calls reserved under their model's limit before they went "
            "(the prompt's and the output cap).",
            ("model",),
        )
        self.tokens_used = counter(
            "runwright_limit_tokens_used_total",
            "Tokens those calls used, as the provider reported them (a failed call uses none).",
            ("model",),
        )
        self.rate_limited = counter(
            "runwright_provider_rate_limited_total",
            "Model calls a provider answered with a 429, whether a limit is declared or not.",
            ("model",),
        )
        self.runs_parked = counter(
            "runwright_runs_parked_total",
            "Runs parked on a limit: back to the queue, holding no worker, until they may go; "
            "by the limit's key and the part of it that was full (requests, tokens, "
            "concurrency, blocked, turn).",
            ("key", "reason"),
        )
        self.tick_seconds = Histogram(
            "runwright_tick_duration_seconds",
            "Duration of the tick() rounds this process ran (not those skipped for "
            "another one in progress).",
            buckets=TICK_BUCKETS,
            registry=registry,
        )


class MetricsObserver(Observer):
    """Counts what the engine reports into :class:`Metrics`."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        max_agents: int = MAX_AGENTS,
        max_models: int = MAX_MODELS,
        max_tools: int = MAX_TOOLS,
        max_keys: int = MAX_KEYS,
        max_versions: int = MAX_VERSIONS,
    ) -> None:
        self.metrics = metrics
        self.agent = Bounded(max_agents)
        self.model = Bounded(max_models)
        self.tool = Bounded(max_tools)
        self.key = Bounded(max_keys)
        self.version = Bounded(max_versions)
        # (run id, epoch) -> agent label of the executions in flight, so that a
        # lease loss, reported by run id, is counted under its agent.
        self._running: dict[tuple[str, int], str] = {}

    @contextlib.contextmanager
    def execution(self, run: Run, fence: Fence, worker: str) -> Iterator[None]:
        agent = self.agent(run.agent)
        gauge = self.metrics.in_flight.labels(agent)
        key = (run.id, fence.epoch)
        self._running[key] = agent
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()
            self._running.pop(key, None)

    @contextlib.contextmanager
    def model_call(self, run: Run, call: ModelCall) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            agent, model = self.agent(run.agent), self.model(call.model)
            m = self.metrics
            m.model_seconds.labels(agent, model).observe(time.perf_counter() - began)
            if call.usage is not None:  # answered (not failed, not cut short by an abort)
                m.steps.labels(agent, "llm").inc()
                m.tokens.labels(agent, model, "input").inc(call.usage.input_tokens)
                m.tokens.labels(agent, model, "output").inc(call.usage.output_tokens)
                if call.cost_usd is not None:
                    m.cost.labels(agent, model).inc(call.cost_usd)

    @contextlib.contextmanager
    def tool_call(self, run: Run, call: ToolCall) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            agent, tool, status = self.agent(run.agent), self.tool(call.name), call.status.value
            m = self.metrics
            m.tool_calls.labels(agent, tool, status).inc()
            if call.status is not ToolStatus.DENIED:  # a refused call never ran
                m.tool_seconds.labels(agent, tool, status).observe(time.perf_counter() - began)
                m.steps.labels(agent, "tool").inc()

    def ended(self, run: Run, seconds: float) -> None:
        counter = self.metrics.runs_settled if run.status.ended else self.metrics.runs_paused
        agent = self.agent(run.agent)
        counter.labels(agent, run.status.value).inc()
        version = self.version(run.version) if run.version else "none"
        self.metrics.executions.labels(agent, version, run.status.value).inc()

    def taken_over(self, run: Run, previous_epoch: int) -> None:
        self.metrics.takeovers.labels(self.agent(run.agent)).inc()

    def lease_lost(self, run_id: str, epoch: int, current_epoch: int | None) -> None:
        agent = self._running.get((run_id, epoch), OTHER)
        self.metrics.lease_losses.labels(agent).inc()

    def retry_scheduled(self, run: Run, wait: RetryWait) -> None:
        self.metrics.retries.labels(self.agent(run.agent)).inc()

    def approval_decided(self, run: Run, approval: Approval) -> None:
        if approval.decision is None:
            return
        # An expiry is the engine's denial: counted apart from a person's.
        decision = "expired" if expired(approval) else approval.decision.value
        edited = "true" if approval.edited else "false"
        agent, tool = self.agent(run.agent), self.tool(approval.tool_name)
        self.metrics.decisions.labels(agent, tool, decision, edited).inc()

    def tick(self, report: TickReport, seconds: float) -> None:
        if not report.skipped:
            self.metrics.tick_seconds.observe(seconds)

    def notification_failed(self, agent: str) -> None:
        self.metrics.notification_failures.labels(self.agent(agent)).inc()

    def effect_unknown(self, run: Run, tool: str) -> None:
        self.metrics.effects_unknown.labels(self.agent(run.agent), self.tool(tool)).inc()

    def limit_admitted(self, model: str, tokens: int, waited: float) -> None:
        label = self.model(model)
        self.metrics.limit_wait.labels(label).observe(max(0.0, waited))
        self.metrics.tokens_reserved.labels(label).inc(max(0, tokens))

    def limit_used(self, model: str, tokens: int) -> None:
        self.metrics.tokens_used.labels(self.model(model)).inc(max(0, tokens))

    def throttled(self, model: str) -> None:
        self.metrics.rate_limited.labels(self.model(model)).inc()

    def parked(self, run: Run, key: str, reason: str) -> None:
        # reason is one of the limiter's few words (runner/core/limits/limiter.py's Reason).
        self.metrics.runs_parked.labels(self.key(limit_label(key)), reason).inc()


Backlog = tuple[int, datetime | None]


@dataclass(frozen=True)
class StoreFigures:
    """What one read of the store gives the scrape-time gauges."""

    backlog: Backlog
    unresolved: int | None = None
    # Runs parked now, by limit key (None: not read).
    parked: dict[str, int] | None = None


class ScrapeTimeCollector:
    """The gauges read when Prometheus scrapes: the approval backlog, the
    effects of unknown outcome nobody resolved and the runs parked on each
    limit (from the store, at most once every ``cache_seconds``) and the age
    of the last ``tick()`` (from Redis, every scrape). A source that fails
    leaves its gauges out of that scrape and reads 0 in
    ``runwright_metrics_source_up``; the rest of the scrape goes on."""

    def __init__(
        self,
        backlog: Callable[[], Backlog],
        last_tick: Callable[[], float | None],
        *,
        unresolved: Callable[[], int] | None = None,
        parked: Callable[[], Sequence[ParkedKey]] | None = None,
        cache_seconds: float = BACKLOG_CACHE_SECONDS,
        max_keys: int = MAX_KEYS,
        max_versions: int = MAX_VERSIONS,
    ) -> None:
        self._backlog = backlog
        self._unresolved = unresolved
        self._parked = parked
        self._last_tick = last_tick
        self.cache_seconds = cache_seconds
        self.key = Bounded(max_keys)
        self.version = Bounded(max_versions)
        self._cached: tuple[float, StoreFigures | None] | None = None
        self._lock = threading.Lock()
        self._failing: set[str] = set()

    def describe(self) -> list[Metric]:
        # Names only: registering must not query anything.
        return [
            GaugeMetricFamily("runwright_approvals_pending", ""),
            GaugeMetricFamily("runwright_approval_oldest_pending_age_seconds", ""),
            GaugeMetricFamily("runwright_effects_unknown_unresolved", ""),
            GaugeMetricFamily("runwright_parked_runs", "", labels=["key"]),
            GaugeMetricFamily("runwright_last_tick_age_seconds", ""),
            GaugeMetricFamily("runwright_metrics_source_up", "", labels=["source"]),
        ]

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "runwright_metrics_source_up",
            "1 if the last read of the source behind the scrape-time gauges "
            "(store: the approval backlog; leases: the last tick, from Redis or, "
            "when Redis has no mark, from the store) succeeded.",
            labels=["source"],
        )
        figures = self._cached_figures()
        up.add_metric(["store"], 0 if figures is None else 1)
        if figures is not None:
            pending, oldest = figures.backlog
            if figures.unresolved is not None:
                yield GaugeMetricFamily(
                    "runwright_effects_unknown_unresolved",
                    "Effects of unknown outcome that nobody has resolved yet, over all runs "
                    "(runwright runs --needs-attention lists their runs).",
                    value=figures.unresolved,
                )
            if figures.parked is not None:
                gauge = GaugeMetricFamily(
                    "runwright_parked_runs",
                    "Runs parked on each limit now: queued until they may go, holding no "
                    "worker (runwright limits says when the first may go).",
                    labels=["key"],
                )
                for key, runs in sorted(figures.parked.items()):
                    gauge.add_metric([key], runs)
                yield gauge
            yield GaugeMetricFamily(
                "runwright_approvals_pending",
                "Approvals waiting for a decision, over all runs.",
                value=pending,
            )
            age = 0.0 if oldest is None else max(0.0, (utcnow() - oldest).total_seconds())
            yield GaugeMetricFamily(
                "runwright_approval_oldest_pending_age_seconds",
                "Age of the oldest approval waiting for a decision (0 when none is).",
                value=age,
            )
        read, last = self._read("leases", self._last_tick)
        up.add_metric(["leases"], 1 if read else 0)
        if read:
            yield GaugeMetricFamily(
                "runwright_last_tick_age_seconds",
                "Seconds since tick() last finished anywhere (+Inf if it never has): "
                "beat is down when this exceeds a few tick intervals.",
                value=float("inf") if last is None else max(0.0, time.time() - last),
            )
        yield up

    def _cached_figures(self) -> StoreFigures | None:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= self.cache_seconds:
                read, value = self._read("store", self._store_figures)
                self._cached = (now, value if read else None)
            return self._cached[1]

    def _store_figures(self) -> StoreFigures:
        unresolved = None if self._unresolved is None else self._unresolved()
        parked: dict[str, int] | None = None
        if self._parked is not None:
            parked = {}
            for found in self._parked():
                # Several past the cap, or of one agent's Concurrency, add up.
                label = self.key(limit_label(found.key))
                parked[label] = parked.get(label, 0) + found.runs
        return StoreFigures(self._backlog(), unresolved, parked)

    def _read(self, source: str, read: Callable[[], T]) -> tuple[bool, T | None]:
        try:
            value = read()
        except Exception as exc:
            # Once per outage, not once per scrape.
            if source not in self._failing:
                self._failing.add(source)
                log.warning("metrics: cannot read the %s for the scrape: %s", source, exc)
            return False, None
        self._failing.discard(source)
        return True, value


class UnservedSchedulesCollector:
    """``runwright_schedules_unserved``, read when Prometheus scrapes: the
    schedules (not paused) of each agent that no live worker loads, from the
    store and the workers' records in Redis (store/workers.py), at most once
    every ``cache_seconds``. Nothing fires them: a tick() runs on a worker,
    which fires the schedules of its own agents only, and past the catch-up
    window their firings are missed. An agent every live worker serves is
    left out; a scrape whose reads fail leaves the gauge out (logged once
    per outage)."""

    def __init__(
        self,
        schedules: Callable[[], Mapping[str, int]],
        workers: Callable[[], Mapping[str, WorkerInfo]],
        *,
        cache_seconds: float = BACKLOG_CACHE_SECONDS,
        max_agents: int = MAX_AGENTS,
    ) -> None:
        self._schedules = schedules
        self._workers = workers
        self.cache_seconds = cache_seconds
        self.agent = Bounded(max_agents)
        self._cached: tuple[float, dict[str, int] | None] | None = None
        self._lock = threading.Lock()
        self._failing = False

    def describe(self) -> list[Metric]:
        return [GaugeMetricFamily("runwright_schedules_unserved", "", labels=["agent"])]

    def collect(self) -> Iterator[Metric]:
        counts = self._read()
        if counts is None:
            return
        gauge = GaugeMetricFamily(
            "runwright_schedules_unserved",
            "Schedules (not paused) whose agent no live worker loads: nothing fires them, "
            "and past their catch-up window their firings are missed "
            "(runwright schedule list names them).",
            labels=["agent"],
        )
        for agent, count in sorted(counts.items()):
            gauge.add_metric([agent], count)
        yield gauge

    def _read(self) -> dict[str, int] | None:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= self.cache_seconds:
                self._cached = (now, self._unserved())
            return self._cached[1]

    def _unserved(self) -> dict[str, int] | None:
        from store.workers import unserved

        try:
            schedules = self._schedules()
            missing = unserved(self._workers(), schedules)
        except Exception as exc:
            if not self._failing:
                self._failing = True
                log.warning("metrics: cannot read the schedules' workers for the scrape: %s", exc)
            return None
        self._failing = False
        counts: dict[str, int] = {}
        for agent in missing:
            label = self.agent(agent)  # several past the cap add up under "other"
            counts[label] = counts.get(label, 0) + schedules[agent]
        return counts


_lock = threading.Lock()
_observer: MetricsObserver | None = None
_served: int | None = None


def observer(settings: Settings) -> MetricsObserver:
    """This process's listener, on :data:`REGISTRY` (one per process: engines
    built here share it)."""
    global _observer
    with _lock:
        if _observer is None:
            _observer = MetricsObserver(Metrics(REGISTRY))
        return _observer


def start_worker(settings: Settings) -> None:
    """Serve ``/metrics`` on ``RUNWRIGHT_METRICS_HOST``:``RUNWRIGHT_METRICS_PORT``
    (once per process), with the scrape-time gauges read from the settings'
    database and Redis. The host is loopback unless set: the endpoint has no
    authentication, so listening beyond this machine is the operator's choice."""
    global _served
    port, host = settings.metrics_port, settings.metrics_host
    if port is None:
        return
    with _lock:
        if _served is not None:
            return
        from prometheus_client import (
            GC_COLLECTOR,
            PLATFORM_COLLECTOR,
            PROCESS_COLLECTOR,
            start_http_server,
        )

        try:
            start_http_server(port, addr=host, registry=REGISTRY)
        except OSError as exc:  # the port is taken, or the host is no address of ours
            raise ConfigurationError(
                f"cannot serve metrics on RUNWRIGHT_METRICS_HOST={host!r}, "
                f"RUNWRIGHT_METRICS_PORT={port}: {exc.strerror or exc}"
            ) from exc
        # The usual process, platform and GC collectors, as on the global registry.
        for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            REGISTRY.register(standard)
        if settings.database_url and settings.redis_url:
            REGISTRY.register(_scrape_time_collector(settings))
            REGISTRY.register(_unserved_schedules_collector(settings))
        _served = port
        log.info("metrics: serving /metrics on %s:%d", host, port)


def _scrape_time_collector(settings: Settings) -> ScrapeTimeCollector:
    # The engine's own pool (shared_engine is per URL and process) and a small
    # Redis client of our own; neither connects before the first scrape.
    from runner.core.coordination.leases import Leases, last_tick
    from runner.core.settings import open_store

    assert settings.redis_url is not None
    store = open_store(settings)
    leases = Leases.from_url(settings.redis_url)
    # Redis's mark of the last tick, else (after a Redis restart) the store's.
    last = functools.partial(last_tick, leases, store)
    return ScrapeTimeCollector(
        store.approval_backlog, last, unresolved=store.unresolved_effects, parked=store.parked
    )


def _unserved_schedules_collector(settings: Settings) -> UnservedSchedulesCollector:
    # As _scrape_time_collector: the engine's own pool, a small Redis client.
    from runner.core.coordination.leases import Leases
    from runner.core.settings import open_store

    assert settings.redis_url is not None
    store = open_store(settings)
    leases = Leases.from_url(settings.redis_url)
    return UnservedSchedulesCollector(store.schedules_by_agent, leases.workers)
