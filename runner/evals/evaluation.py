"""Evaluations: every case of a dataset replayed through an agent definition
(runner/evals/replay.py: live by default, effects served or held), scored
(runner/evals/scorers.py), and saved in Postgres case by case.

The cases are replayed by worker processes, each claiming one case at a time
from the ``evaluation_cases`` table (``FOR UPDATE SKIP LOCKED``) under a
claim it renews while it works. A case's result is written only by the
worker that holds its claim, and a done case is never reopened: so a worker
killed mid-case loses nothing but that case's unfinished replay, which the
runner hands to another worker (its claim released at once when the runner
sees the process die, or lapsing if the runner died too); and no case is
scored twice. An evaluation whose runner died is finished by
:func:`run_evaluation` (``runwright evals resume``).

What a worker needs is in the evaluation's row (its ``options``): the agent
as ``module:name`` or a registered agent's name, the scorers by name, the
replay's mode; so a worker process loads them itself.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.core.agent import Agent
from runner.core.errors import InvalidInput
from runner.evals.recording import Case
from runner.evals.replay import POLICIES, ReplayReport, Side, load_agent, replay
from runner.evals.scorers import DEFAULT_SCORERS, Score, Scorer, load_scorers
from runner.evals.summary import ScorerSummary, summarize

if TYPE_CHECKING:
    from runner.core.engine.engine import Engine
    from store.models import Evaluation, EvaluationInfo
    from store.postgres import PostgresStore

# How long a worker's claim on a case holds without renewal; renewed every third of it.
CLAIM_SECONDS = 60.0
# How often the runner looks at its workers and the progress.
POLL_SECONDS = 0.2
# Claims of one case before it is finished as failed (its replay kills workers).
MAX_ATTEMPTS = 3
# Workers the runner starts again after deaths before it gives up.
MAX_RESTARTS = 20
# ``--against runs``: the baseline is the recorded runs themselves.
AGAINST_RUNS = "runs"

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Options:
    """How an evaluation replays and scores (its row's ``options``)."""

    agent: str
    mode: str = "live"
    tools: str | None = None
    model: str | None = None
    approvals: str = "approve"
    scorers: tuple[str, ...] = DEFAULT_SCORERS
    against: str | None = None  # an evaluation's id, or "runs"

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "mode": self.mode,
            "tools": self.tools,
            "model": self.model,
            "approvals": self.approvals,
            "scorers": list(self.scorers),
            "against": self.against,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Options:
        return cls(
            agent=data["agent"],
            mode=data.get("mode", "live"),
            tools=data.get("tools"),
            model=data.get("model"),
            approvals=data.get("approvals", "approve"),
            scorers=tuple(data.get("scorers") or DEFAULT_SCORERS),
            against=data.get("against"),
        )


def worker_name(pid: int) -> str:
    """How a worker process signs its claims: host and pid."""
    return f"{socket.gethostname()}:{pid}"


# ------------------------------------------------------------ the runner


def evaluate(
    engine: Engine,
    dataset: str,
    *,
    agent: str | Agent,
    version: str | None = None,
    label: str | None = None,
    against: str | None = None,
    mode: str = "live",
    tools: str | None = None,
    model: str | None = None,
    approvals: str = "approve",
    scorers: Sequence[str] = DEFAULT_SCORERS,
    workers: int = 2,
    created_by: str | None = None,
    progress: Progress | None = None,
) -> Evaluation:
    """Evaluate ``agent`` on ``dataset`` (its ``version``, else its newest)
    with ``workers`` processes (0: in this process), against the evaluation
    ``against`` (or "runs", the recorded runs); the evaluation when done.

    ``agent``: ``module:name`` or a registered agent's name, which worker
    processes load; an :class:`Agent` itself only with ``workers=0``."""
    store = engine.deps.store
    found = store.dataset(dataset, version)
    given = agent if isinstance(agent, Agent) else None
    _check_workers(workers)
    if given is not None and workers != 0:
        raise InvalidInput(
            "worker processes load the agent by its MODULE:NAME or registered name; "
            "an Agent object evaluates with workers=0"
        )
    options = Options(
        agent=given.name if given is not None else str(agent),
        mode=mode,
        tools=tools,
        model=model,
        approvals=approvals,
        scorers=tuple(scorers),
        against=against,
    )
    _check(engine, options, found.info.version, given)
    definition = given or load_agent(options.agent, options.agent, engine.deps.registry)
    evaluation_id = str(uuid.uuid4())
    store.create_evaluation(
        evaluation_id,
        dataset=found.info.name,
        version=found.info.version,
        agent=definition.name,
        label=label or definition.current_version().title,
        case_count=len(found.cases),
        baseline=None if against == AGAINST_RUNS else against,
        created_by=created_by,
        options=options.to_json(),
    )
    return run_evaluation(engine, evaluation_id, workers=workers, progress=progress, agent=given)


def _check_workers(workers: int) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise InvalidInput(f"workers is a count of processes, 0 or more, not {workers!r}")


def _check(engine: Engine, options: Options, version: str, given: Agent | None) -> None:
    """Refuse, before anything is written, what every case would fail on."""
    if options.mode not in ("live", "recorded"):
        raise InvalidInput(f"an evaluation's mode is live or recorded, not {options.mode!r}")
    if options.approvals not in POLICIES or options.approvals == "ask":
        raise InvalidInput("an evaluation's approvals are approve or deny (nobody is there to ask)")
    if given is None:
        load_agent(options.agent, options.agent, engine.deps.registry)
    if not options.scorers:
        raise InvalidInput("an evaluation needs at least one scorer")
    load_scorers(options.scorers)
    if options.against not in (None, AGAINST_RUNS):
        baseline = engine.deps.store.evaluation(options.against)
        if baseline.info.dataset_version != version:
            ran = baseline.info.dataset_version
            raise InvalidInput(
                f"the baseline {options.against} ran version {ran} of the dataset; this "
                f"one is {version}: compare evaluations of one version"
            )


def run_evaluation(
    engine: Engine,
    evaluation_id: str,
    *,
    workers: int = 2,
    progress: Progress | None = None,
    agent: Agent | None = None,
) -> Evaluation:
    """Replay and score the evaluation's cases not done yet, with
    ``workers`` processes (0: here, with ``agent`` if given in place of the
    one its options name), then save its summary."""
    store = engine.deps.store
    store.evaluation(evaluation_id, cases=False)  # it exists
    _check_workers(workers)
    if workers == 0:
        work(engine, evaluation_id, worker_name(os.getpid()), agent)
    else:
        _supervise(engine, evaluation_id, workers, progress)
    evaluation = store.evaluation(evaluation_id)
    if progress is not None:
        progress(evaluation.info.done, evaluation.info.case_count)
    summary = summary_of(engine, evaluation)
    store.finish_evaluation(evaluation_id, summary)
    return store.evaluation(evaluation_id)


def _supervise(engine: Engine, evaluation_id: str, workers: int, progress: Progress | None) -> None:
    """Run ``workers`` processes until every case is done; a process that
    dies has its claims released and is replaced."""
    store = engine.deps.store
    running = [_start(engine, evaluation_id) for _ in range(workers)]
    restarts = 0
    try:
        while True:
            evaluation = store.evaluation(evaluation_id, cases=False)
            done = evaluation.info.done
            if progress is not None:
                progress(done, evaluation.info.case_count)
            if done >= evaluation.info.case_count:
                return
            for process in list(running):
                code = process.poll()
                if code is None:
                    continue
                running.remove(process)
                if code != 0:
                    store.release_eval_claims(evaluation_id, worker_name(process.pid))
                    restarts += 1
                    if restarts > MAX_RESTARTS:
                        raise InvalidInput(
                            f"the evaluation's workers died {restarts} times; the last exit "
                            f"code was {code}: see their output"
                        )
                    running.append(_start(engine, evaluation_id))
            if not running:  # the others ended, and cases are left (released ones)
                running.append(_start(engine, evaluation_id))
            time.sleep(POLL_SECONDS)
    finally:
        for process in running:
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            store.release_eval_claims(evaluation_id, worker_name(process.pid))


def _start(engine: Engine, evaluation_id: str) -> subprocess.Popen[bytes]:
    """A worker process (``python -m runner.evals.worker``): this process's
    database, keys and agent modules in its environment, its import path,
    its output on this one's standard error."""
    settings = engine.settings
    env = {
        **os.environ,
        "RUNWRIGHT_DATABASE_URL": _url(engine),
        "RUNWRIGHT_AGENTS": ",".join(settings.agents),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    if settings.encryption_keys:
        env["RUNWRIGHT_ENCRYPTION_KEYS"] = settings.encryption_keys
    return subprocess.Popen(
        [sys.executable, "-m", "runner.evals.worker", evaluation_id],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=sys.stderr.fileno() if _has_fileno(sys.stderr) else subprocess.DEVNULL,
    )


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


def _url(engine: Engine) -> str:
    from runner.evals.sandbox import store_url

    return store_url(engine.deps.store)


# ------------------------------------------------------------ the worker


def work(engine: Engine, evaluation_id: str, worker: str, agent: Agent | None = None) -> int:
    """Claim, replay, score and save cases until none is left; how many."""
    store = engine.deps.store
    evaluation = store.evaluation(evaluation_id)
    options = Options.from_json(evaluation.info.options or {})
    scorers = load_scorers(options.scorers)
    cases = store.dataset(evaluation.info.dataset, evaluation.info.dataset_version).cases
    done = 0
    while True:
        claimed = store.claim_eval_case(evaluation_id, worker, CLAIM_SECONDS)
        if claimed is None:
            return done
        case = Case.from_json(cases[claimed.position])
        if claimed.attempts > MAX_ATTEMPTS:
            said = (
                f"the case was claimed {claimed.attempts} times: the workers that took it "
                "died before they finished it"
            )
            result: dict[str, Any] = {"error": said}
            scores = {s.name: Score(False, 0.0, said) for s in scorers}
        else:
            with _renewing(store, evaluation_id, claimed.position, worker):
                result, scores = score_case(engine, case, options, scorers, agent)
        replay_side = result.get("replay") or {}
        store.finish_eval_case(
            evaluation_id,
            claimed.position,
            worker,
            result=result,
            scores={name: s.to_json() for name, s in scores.items()},
            duration_ms=result.get("wall_ms"),
            cost_usd=replay_side.get("cost_usd"),
            tokens=(replay_side.get("input_tokens") or 0) + (replay_side.get("output_tokens") or 0),
        )
        done += 1


def score_case(
    engine: Engine,
    case: Case,
    options: Options,
    scorers: Sequence[Scorer],
    agent: Agent | None = None,
) -> tuple[dict[str, Any], dict[str, Score]]:
    """One case replayed and scored: the report's JSON (or the error that
    stopped the replay) and each scorer's :class:`Score`."""
    try:
        report = replay(
            case,
            agent=agent or options.agent,
            mode=options.mode,  # type: ignore[arg-type]
            tools=options.tools,  # type: ignore[arg-type]
            model=options.model,
            approvals=options.approvals,  # type: ignore[arg-type]
            engine=engine,
        )
    except Exception as exc:  # the case fails; the evaluation goes on
        said = f"the replay raised {type(exc).__name__}: {exc}"
        return {"error": said}, {s.name: Score(False, 0.0, said) for s in scorers}
    return report.to_json(), {s.name: s(case, report) for s in scorers}


class _renewing:
    """Renews a worker's claim on a case while it replays it."""

    def __init__(
        self, store: PostgresStore, evaluation_id: str, position: int, worker: str
    ) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._renew,
            args=(store, evaluation_id, position, worker),
            name="runwright-eval-claim",
            daemon=True,
        )

    def _renew(self, store: PostgresStore, evaluation_id: str, position: int, worker: str) -> None:
        while not self._stop.wait(CLAIM_SECONDS / 3):
            if not store.extend_eval_claim(evaluation_id, position, worker, CLAIM_SECONDS):
                return

    def __enter__(self) -> None:
        self._thread.start()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ------------------------------------------------------------ the summary


def summary_of(engine: Engine, evaluation: Evaluation) -> dict[str, Any]:
    """The evaluation's summary (runner/evals/summary.py), against its baseline."""
    store = engine.deps.store
    ordered = sorted(evaluation.cases, key=lambda c: c.position)
    here = [c.scores for c in ordered]
    against = evaluation.info.baseline or Options.from_json(evaluation.info.options or {}).against
    baseline = None
    if against == AGAINST_RUNS:
        baseline = recorded_scores(engine, evaluation)
    elif against:
        other = sorted(store.evaluation(against).cases, key=lambda c: c.position)
        baseline = [c.scores for c in other]
    summaries = summarize(here, baseline)
    return {
        "cases": len(ordered),
        "errors": sum(1 for c in ordered if isinstance(c.result, dict) and "error" in c.result),
        "cost_usd": sum(c.cost_usd or 0.0 for c in ordered),
        "tokens": sum(c.tokens or 0 for c in ordered),
        "against": against,
        "scorers": [s.to_json() for s in summaries],
    }


def recorded_scores(engine: Engine, evaluation: Evaluation) -> list[dict[str, Any] | None]:
    """Each case's recorded run scored as if it were the replay: the baseline
    of ``--against runs``."""
    options = Options.from_json(evaluation.info.options or {})
    scorers = load_scorers(options.scorers)
    cases = engine.deps.store.dataset(
        evaluation.info.dataset, evaluation.info.dataset_version
    ).cases
    found: list[dict[str, Any] | None] = []
    for data in cases:
        case = Case.from_json(data)
        if case.recording is None:
            found.append(None)
            continue
        side = Side.of(case.recording)
        report = ReplayReport(
            agent=case.agent,
            mode="recorded",
            tools="recorded",
            run_id=case.recording.run_id,
            version=case.recording.version or "",
            original=side,
            replay=side,
            divergence=None,
            would_have_run=(),
            ran=(),
            decisions=(),
            stopped=None,
            sandbox_run="",
            wall_ms=0.0,
        )
        found.append({s.name: s(case, report).to_json() for s in scorers})
    return found


def info_json(info: EvaluationInfo) -> dict[str, Any]:
    """An evaluation without its cases, as JSON (the command line's and the
    console's API): names, counts, options and summary, no customer data."""
    return {
        "id": info.id,
        "dataset": info.dataset,
        "dataset_version": info.dataset_version,
        "agent": info.agent,
        "label": info.label,
        "status": info.status.value,
        "baseline": info.baseline,
        "case_count": info.case_count,
        "done": info.done,
        "created_at": info.created_at.isoformat(),
        "finished_at": None if info.finished_at is None else info.finished_at.isoformat(),
        "created_by": info.created_by,
        "options": info.options,
        "summary": info.summary,
    }


def summaries(evaluation: Evaluation) -> list[ScorerSummary]:
    """The saved summary of an evaluation, as :class:`ScorerSummary` rows."""
    saved = (evaluation.info.summary or {}).get("scorers") or []
    return [ScorerSummary(**{k: v for k, v in s.items() if k != "pass_rate"}) for s in saved]
