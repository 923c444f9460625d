"""Evaluations in this process (issue 55 item 3; docs/replay-and-evals.md):
a dataset of recorded runs replayed through two versions of an agent at an
OpenAI-compatible server on loopback, scored by the built-ins, a user's
scorer and a judge, summarized against the recorded runs and against each
other; hostile input refused before anything is written; an evaluation
whose runner died finished by another; a case that keeps killing its workers
finished as failed. The same on worker processes, with one killed:
tests/e2e/test_eval_workers.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest

from runner import Agent, Engine
from runner.evals.compare import compare
from runner.evals.evaluation import MAX_ATTEMPTS, evaluate, run_evaluation, work
from runner.evals.recording import Case
from runner.evals.scorers import Score, as_score, judge, load_scorers
from runner.testing import TestEngine
from store.errors import DatasetNotFound, InvalidInput
from store.models import RunStatus, utcnow
from tests.agents_evals import V1, V2, refunds_agent, script
from tests.helpers import unique
from tests.provider import Provider

pytestmark = pytest.mark.runwright_allow_model_requests

AMOUNTS = [20, 40, 150, 60, 300, 80, 90, 120]  # three over 100


@pytest.fixture
def provider() -> Iterator[Provider]:
    with Provider(script) as server:
        yield server


@pytest.fixture
def recorded(runwright_engine: TestEngine, provider: Provider) -> tuple[str, str, Agent, Agent]:
    """A dataset of runs of version 1: its name, the agents' name, both versions."""
    name = unique("refunds")
    v1 = refunds_agent(V1, api_base=provider.base_url, name=name, register=True)
    v2 = refunds_agent(V2, api_base=provider.base_url, name=name)
    cases = []
    for n, amount in enumerate(AMOUNTS):
        run = runwright_engine.run(name, {"order": f"A-{n}", "amount": amount})
        assert run.status is RunStatus.COMPLETED, run.error
        cases.append(Case.of_run(runwright_engine.engine, run.id).to_json())
    dataset = unique("ds")
    runwright_engine.engine.store.save_dataset(dataset, cases)
    return dataset, name, v1, v2


def test_two_versions_compared_on_recorded_runs(
    runwright_engine: TestEngine, recorded: tuple[str, str, Agent, Agent]
) -> None:
    dataset, _, v1, v2 = recorded
    engine = runwright_engine.engine
    scorers = [
        "output",
        "tool_calls",
        "no_would_have_run",
        "completed",
        "tests.agents_evals:polite",
        "tests.agents_evals:cheap",
    ]
    first = evaluate(
        engine, dataset, agent=v1, workers=0, against="runs", scorers=scorers, label="v1"
    )
    assert first.info.done == len(AMOUNTS) and first.info.status.value == "completed"
    by_name = {s["name"]: s for s in first.info.summary["scorers"]}
    for name in ("output", "tool_calls", "no_would_have_run", "completed", "polite", "within"):
        assert by_name[name]["passed"] == len(AMOUNTS), (name, by_name[name])
    assert by_name["output"]["difference"] == 0.0 and by_name["output"]["paired"] == len(AMOUNTS)
    # Every effect was served from the recording: none would have run.
    for case in first.cases:
        assert case.result["would_have_run"] == []
        assert [c["served"] for c in case.result["replay"]["steps"][1]["calls"]] == ["recorded"]

    second = evaluate(engine, dataset, agent=v2, workers=0, against=first.info.id, scorers=scorers)
    by_name = {s["name"]: s for s in second.info.summary["scorers"]}
    over = sum(1 for a in AMOUNTS if a > 100)
    assert by_name["output"]["passed"] == len(AMOUNTS) - over
    assert by_name["tool_calls"]["passed"] == len(AMOUNTS) - over
    assert by_name["polite"]["passed"] == len(AMOUNTS)  # the escalations thank too
    assert by_name["output"]["difference"] == pytest.approx(-over / len(AMOUNTS))
    assert by_name["output"]["low"] < by_name["output"]["difference"] < by_name["output"]["high"]
    comparison = compare(engine.store.evaluation(second.info.id), first)
    worse = [r.position for r in comparison.rows if r.worse]
    assert worse == [n for n, a in enumerate(AMOUNTS) if a > 100]
    assert all("output" in r.worse for r in comparison.rows if r.worse)


def test_a_judge_grades_at_the_loopback_server(
    runwright_engine: TestEngine, recorded: tuple[str, str, Agent, Agent], provider: Provider
) -> None:
    dataset, _, v1, _ = recorded
    grade = judge(
        "The answer thanks the customer.",
        model="openai/judge",
        api_base=provider.base_url,
        api_key="sk-loopback",
    )
    case = Case.from_json(runwright_engine.engine.store.dataset(dataset).cases[0])
    from runner.evals.replay import replay

    report = replay(case, agent=v1, mode="live", engine=runwright_engine.engine)
    assert grade(case, report) == Score(True, 0.9, "-")
    judged = [s for s in provider.answered() if "rubric" in json.dumps(s.body)]
    assert len(judged) == 1


def test_hostile_input_writes_nothing(
    runwright_engine: TestEngine, recorded: tuple[str, str, Agent, Agent]
) -> None:
    dataset, name, v1, _ = recorded
    engine = runwright_engine.engine
    with pytest.raises(DatasetNotFound):
        evaluate(engine, "no-such-dataset", agent=v1, workers=0)
    with pytest.raises(InvalidInput, match="no scorer 'nonsense'"):
        evaluate(engine, dataset, agent=v1, workers=0, scorers=["nonsense"])
    with pytest.raises(InvalidInput, match="cannot load the scorer"):
        evaluate(engine, dataset, agent=v1, workers=0, scorers=["tests.nowhere:nothing"])
    with pytest.raises(InvalidInput, match="nobody is there to ask"):
        evaluate(engine, dataset, agent=v1, workers=0, approvals="ask")
    with pytest.raises(InvalidInput, match="workers=0"):
        evaluate(engine, dataset, agent=v1, workers=2)
    with pytest.raises(InvalidInput, match="workers is a count"):
        evaluate(engine, dataset, agent=v1, workers=-1)
    with pytest.raises(InvalidInput, match="not an Agent"):
        evaluate(engine, dataset, agent="tests.agents_evals:script", workers=0)
    other = unique("ds")
    engine.store.save_dataset(other, engine.store.dataset(dataset).cases[:2])
    baseline = evaluate(engine, other, agent=v1, workers=0, scorers=["completed"])
    with pytest.raises(InvalidInput, match="compare evaluations of one version"):
        evaluate(engine, dataset, agent=v1, workers=0, against=baseline.info.id)
    assert [e.id for e in engine.store.evaluations()] == [baseline.info.id]
    with pytest.raises(InvalidInput, match="a scorer returns"):
        as_score("yes")
    with pytest.raises(InvalidInput, match="two scorers are named"):
        load_scorers(["output", "output"])
    assert name  # the dataset's runs are the agent's


def test_an_evaluation_whose_runner_died_is_finished_by_another(
    runwright_engine: TestEngine, recorded: tuple[str, str, Agent, Agent]
) -> None:
    dataset, _, v1, _ = recorded
    engine = runwright_engine.engine
    store = engine.store
    version = store.dataset(dataset).info.version
    evaluation_id = "0190c0de-0000-7000-8000-00000000e7a1"
    store.create_evaluation(
        evaluation_id,
        dataset=dataset,
        version=version,
        agent=v1.name,
        label="v1",
        case_count=len(AMOUNTS),
        options={"agent": v1.name, "mode": "live", "scorers": ["completed"]},
    )
    # A runner scored two cases and died holding a third (its claim lapses).
    work_two = store.claim_eval_case(evaluation_id, "dead:1", 30)
    assert work_two is not None
    lapsed = store.claim_eval_case(evaluation_id, "dead:1", 0.01, now=utcnow() - timedelta(1))
    assert lapsed is not None
    store.release_eval_claims(evaluation_id, "dead:1")
    # Another case, whose every claim killed its worker: finished as failed.
    for _ in range(MAX_ATTEMPTS):
        stuck = store.claim_eval_case(evaluation_id, "doomed:2", 30)
        assert stuck is not None
        store.release_eval_claims(evaluation_id, "doomed:2")
    assert stuck.position == work_two.position  # released cases come first again
    finished = run_evaluation(engine, evaluation_id, workers=0, agent=v1)
    assert finished.info.done == len(AMOUNTS)
    by_position = {c.position: c for c in finished.cases}
    failed = by_position[stuck.position]
    assert failed.scores["completed"]["passed"] is False
    assert "died before they finished it" in failed.result["error"]
    assert all(
        c.scores["completed"]["passed"] for p, c in by_position.items() if p != stuck.position
    )
    assert work(engine, evaluation_id, "late:3", v1) == 0  # nothing left, nothing redone


def test_a_sealed_dataset_is_evaluated_on_a_worker_process(
    runwright_database_url: str, provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker process opens the sealed cases and seals its results under
    the engine's keys, which it is handed; nothing of a case is in clear."""
    import sqlalchemy as sa

    from runner.core.keyring import KeyRing, new_key
    from runner.core.settings import Settings
    from runner.evals.evaluation import evaluate as run_eval
    from runner.testing.kit import TEST_SECRET_KEY
    from store.db import make_engine
    from store.postgres import PostgresStore

    keys = f"k1:{new_key()}"
    store = PostgresStore(
        make_engine(runwright_database_url, pool_size=3), cipher=KeyRing.parse(keys)
    )
    engine = Engine(store, settings=Settings(secret_key=TEST_SECRET_KEY, encryption_keys=keys))
    name = unique("refunds")
    refunds_agent(V1, api_base=provider.base_url, name=name, register=True)
    marker = unique("customer-marker")
    try:
        cases = []
        for n in range(3):
            run = engine.start(name, {"order": f"{marker}-{n}", "amount": 10})
            assert engine.execute(run.id).status is RunStatus.COMPLETED
            cases.append(Case.of_run(engine, run.id).to_json())
        dataset = unique("sealed")
        store.save_dataset(dataset, cases)
        monkeypatch.setenv("RUNWRIGHT_TEST_EVAL_API_BASE", provider.base_url)
        done = run_eval(
            engine, dataset, agent="tests.agents_evals:refunds_v1", workers=1, scorers=["completed"]
        )
        assert done.info.done == 3
        assert all(c.scores["completed"]["passed"] for c in done.cases), done.cases
        # Opened with the keys: the order ids are in the calls the replays made.
        assert all(marker in json.dumps(c.result) for c in done.cases)
        with sa.create_engine(
            runwright_database_url.replace("postgresql://", "postgresql+psycopg2://")
        ).connect() as conn:
            for table, column in (("dataset_cases", "data"), ("evaluation_cases", "result")):
                values = conn.execute(
                    sa.text(f"SELECT CAST({column} AS text) FROM {table}")
                ).scalars()
                for value in values:
                    assert marker not in value and value.startswith('"rw1:k1:'), (table, value[:80])
    finally:
        engine.close()
        store.close()
