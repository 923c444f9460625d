"""Datasets and evaluations in the store (docs/replay-and-evals.md).

A dataset is a list of cases (each the JSON of a case,
runner/evals/recording.py), stored under a name and versioned by its
content: the version is a digest of the case list, so saving the same cases
again finds the version there and writes nothing, and changed cases are a
new version beside the old ones. A case holds the customer's data (a run's
trigger and recording): it is sealed like the runs' payloads
(store/sealing.py), bound to its dataset, version and position.

An evaluation replays a dataset version's cases, one ``evaluation_cases``
row per case. Workers take cases as runs are taken: a claim with a lease
(``claimed_by``, ``claimed_until``), ``FOR UPDATE SKIP LOCKED`` so that
claimers never wait on each other, and a claim that lapsed (its worker
died) is taken again, counting one more attempt. A case's result is written
only by the worker that holds its claim, and a case done stays done, so a
worker fenced out by a takeover cannot write over the result of the one
that took its case.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from store.db import dumps
from store.errors import DatasetNotFound, EvaluationNotFound, InvalidInput
from store.models import (
    Dataset,
    DatasetInfo,
    Evaluation,
    EvaluationCase,
    EvaluationCaseStatus,
    EvaluationInfo,
    EvaluationStatus,
)
from store.pg.base import PgBase
from store.statements import Statement
from store.validate import MAX_AGENT_CHARS, check_actor, check_json, check_text

# A dataset's name: what a command line and a file name can carry as it is.
DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
# A dataset's version: the first 16 hex digits of its digest.
DATASET_VERSION = re.compile(r"[0-9a-f]{16}")
# An evaluation's id, as its caller makes it (a uuid, a name with a time).
EVALUATION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
MAX_CASES = 10_000
# A case is a whole run's recording: far more than one trigger payload.
MAX_CASE_BYTES = 16 * 1024 * 1024
MAX_CLEAR_BYTES = 1024 * 1024  # a query, options or summary: names and numbers
MAX_LABEL_CHARS = 200
MAX_DESCRIPTION_CHARS = 2000
MAX_DETAIL_CHARS = 2000
MAX_LEASE_SECONDS = 86_400.0
SCORE_KEYS = frozenset({"passed", "score", "detail"})
ENDINGS = (EvaluationStatus.COMPLETED, EvaluationStatus.CANCELLED)

INSERT_DATASET = Statement(
    "insert_dataset",
    """
    INSERT INTO datasets (name, version, created_by, description, query, case_count)
    VALUES (CAST(:name AS text), CAST(:version AS text), CAST(:created_by AS text),
            CAST(:description AS text), CAST(:query AS jsonb), CAST(:case_count AS int))
    ON CONFLICT (name, version) DO NOTHING
    RETURNING *
    """,
)

INSERT_DATASET_CASES = Statement(
    "insert_dataset_cases",
    """
    INSERT INTO dataset_cases (name, version, position, data)
    SELECT CAST(:name AS text), CAST(:version AS text), c.position, c.data
      FROM json_to_recordset(CAST(:cases AS json)) AS c(position int, data json)
    """,
)

# A dataset's version, or its newest when :version is NULL.
DATASET_INFO = Statement(
    "dataset_info",
    """
    SELECT * FROM datasets
     WHERE name = CAST(:name AS text)
       AND (CAST(:version AS text) IS NULL OR version = CAST(:version AS text))
     ORDER BY created_at DESC, version DESC
     LIMIT 1
    """,
)

DATASET_CASES = Statement(
    "dataset_cases",
    """
    SELECT position, data FROM dataset_cases
     WHERE name = CAST(:name AS text) AND version = CAST(:version AS text)
     ORDER BY position
    """,
)

DATASETS = Statement(
    "datasets",
    "SELECT * FROM datasets ORDER BY created_at DESC, name, version",
)

# A dataset's version, or all its versions when :version is NULL (their
# cases go with them: the foreign key cascades).
DELETE_DATASET = Statement(
    "delete_dataset",
    """
    DELETE FROM datasets
     WHERE name = CAST(:name AS text)
       AND (CAST(:version AS text) IS NULL OR version = CAST(:version AS text))
    """,
)

INSERT_EVALUATION = Statement(
    "insert_evaluation",
    """
    INSERT INTO evaluations (id, dataset, dataset_version, agent, label, baseline, status,
                             created_by, options, case_count)
    VALUES (CAST(:id AS text), CAST(:dataset AS text), CAST(:dataset_version AS text),
            CAST(:agent AS text), CAST(:label AS text), CAST(:baseline AS text), 'running',
            CAST(:created_by AS text), CAST(:options AS jsonb), CAST(:case_count AS int))
    ON CONFLICT (id) DO NOTHING
    RETURNING id
    """,
)

INSERT_EVALUATION_CASES = Statement(
    "insert_evaluation_cases",
    """
    INSERT INTO evaluation_cases (evaluation_id, position, status)
    SELECT CAST(:id AS text), p, 'pending'
      FROM generate_series(0, CAST(:case_count AS int) - 1) AS p
    """,
)

# An evaluation with how many of its cases are done.
EVALUATION_INFO = Statement(
    "evaluation_info",
    """
    SELECT e.*, (SELECT count(*) FROM evaluation_cases AS d
                  WHERE d.evaluation_id = e.id AND d.status = 'done') AS done
      FROM evaluations AS e
     WHERE e.id = CAST(:id AS text)
    """,
)

EVALUATIONS = Statement(
    "evaluations",
    """
    SELECT e.*, (SELECT count(*) FROM evaluation_cases AS d
                  WHERE d.evaluation_id = e.id AND d.status = 'done') AS done
      FROM evaluations AS e
     WHERE CAST(:dataset AS text) IS NULL OR e.dataset = CAST(:dataset AS text)
     ORDER BY e.created_at DESC, e.id
     LIMIT CAST(:limit AS int)
    """,
)

EVALUATION_CASES = Statement(
    "evaluation_cases",
    """
    SELECT * FROM evaluation_cases
     WHERE evaluation_id = CAST(:id AS text)
     ORDER BY position
    """,
)

# The rule of a claim, written once: the first case of a running evaluation
# that is pending, or whose claim lapsed, locked without waiting on another
# claimer's lock; it is the worker's until the lease ends, one attempt more.
# (``status <> 'done'`` is implied; it says which index serves the search.)
CLAIM_EVAL_CASE = Statement(
    "claim_eval_case",
    """
    UPDATE evaluation_cases AS c
       SET status = 'running', claimed_by = CAST(:worker AS text),
           claimed_until = COALESCE(CAST(:now AS timestamptz), now())
                           + make_interval(secs => CAST(:lease AS double precision)),
           attempts = c.attempts + 1
      FROM (SELECT o.evaluation_id, o.position
              FROM evaluation_cases AS o
              JOIN evaluations AS e ON e.id = o.evaluation_id
             WHERE o.evaluation_id = CAST(:evaluation_id AS text) AND e.status = 'running'
               AND o.status <> 'done'
               AND (o.status = 'pending'
                    OR (o.status = 'running'
                        AND o.claimed_until < COALESCE(CAST(:now AS timestamptz), now())))
             ORDER BY o.position
             LIMIT 1
               FOR UPDATE OF o SKIP LOCKED) AS n
     WHERE c.evaluation_id = n.evaluation_id AND c.position = n.position
    RETURNING c.*
    """,
)

EXTEND_EVAL_CLAIM = Statement(
    "extend_eval_claim",
    """
    UPDATE evaluation_cases
       SET claimed_until = COALESCE(CAST(:now AS timestamptz), now())
                           + make_interval(secs => CAST(:lease AS double precision))
     WHERE evaluation_id = CAST(:evaluation_id AS text) AND position = CAST(:position AS int)
       AND status = 'running' AND claimed_by = CAST(:worker AS text)
    """,
)

# Only the holder of the claim writes the result, and only once: a done case
# matches no claim again.
FINISH_EVAL_CASE = Statement(
    "finish_eval_case",
    """
    UPDATE evaluation_cases
       SET status = 'done', claimed_until = NULL, result = CAST(:result AS json),
           scores = CAST(:scores AS jsonb), duration_ms = CAST(:duration_ms AS double precision),
           cost_usd = CAST(:cost_usd AS double precision), tokens = CAST(:tokens AS bigint)
     WHERE evaluation_id = CAST(:evaluation_id AS text) AND position = CAST(:position AS int)
       AND status = 'running' AND claimed_by = CAST(:worker AS text)
    """,
)

RELEASE_EVAL_CLAIMS = Statement(
    "release_eval_claims",
    """
    UPDATE evaluation_cases
       SET status = 'pending', claimed_by = NULL, claimed_until = NULL
     WHERE evaluation_id = CAST(:evaluation_id AS text) AND status = 'running'
       AND claimed_by = CAST(:worker AS text)
    """,
)

# An evaluation ends once: one that ended stays as it ended.
FINISH_EVALUATION = Statement(
    "finish_evaluation",
    """
    UPDATE evaluations
       SET status = CAST(:status AS text), summary = CAST(:summary AS jsonb), finished_at = now()
     WHERE id = CAST(:id AS text) AND status = 'running'
    """,
)


def content_version(cases: Sequence[Any]) -> str:
    """The version of a dataset of ``cases``: the first 16 hex digits of
    the SHA-256 of their canonical JSON (keys sorted, no spaces), so that
    equal case lists share it whatever their keys' order."""
    text = json.dumps(cases, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_dataset_name(name: object) -> str:
    if not isinstance(name, str) or not DATASET_NAME.fullmatch(name):
        raise InvalidInput(
            f"a dataset's name is 1 to 100 letters, digits, '_', '.' or '-', starting with a "
            f"letter or digit, not {_shown(name)}"
        )
    return name


def _named(name: object, version: object) -> tuple[str, str | None]:
    """A dataset's name and version as a read takes them: one that cannot
    name a dataset names none."""
    if not isinstance(name, str) or not DATASET_NAME.fullmatch(name):
        raise DatasetNotFound(f"no dataset named {_shown(name)}")
    if version is not None and not (
        isinstance(version, str) and DATASET_VERSION.fullmatch(version)
    ):
        raise DatasetNotFound(f"dataset {name!r} has no version {_shown(version)}")
    return name, version


def _evaluation_id(evaluation_id: object) -> str:
    if not isinstance(evaluation_id, str) or not EVALUATION_ID.fullmatch(evaluation_id):
        raise EvaluationNotFound(f"no evaluation with id {_shown(evaluation_id)}")
    return evaluation_id


def _shown(value: object) -> str:
    return repr(value[:100]) if isinstance(value, str) else type(value).__name__


def _name_text(value: object, what: str, max_chars: int) -> str:
    text = check_text(value, what, max_chars=max_chars)
    if not text.strip():
        raise InvalidInput(f"{what} must not be empty")
    return text


def _object(value: object, what: str, limit: int) -> dict[str, Any]:
    """A JSON object as the store writes and reads it back."""
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{what} must be a JSON object, not {type(value).__name__}")
    check_json(value, what, limit)
    plain = json.loads(dumps(value))
    assert isinstance(plain, dict)
    return plain


def _lease(seconds: object) -> float:
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or not 0 < seconds <= MAX_LEASE_SECONDS
    ):
        raise InvalidInput(
            f"a claim's lease is a number of seconds above 0 and at most {MAX_LEASE_SECONDS:g}"
        )
    return float(seconds)


def _amount(value: object, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise InvalidInput(f"{what} must be a finite number of 0 or more")
    return float(value)


def _scores(scores: object) -> dict[str, Any]:
    """A case's scores as ``evaluation_cases.scores`` holds them, in clear:
    by scorer name, whether it passed, a number, and a short detail."""
    if not isinstance(scores, Mapping):
        raise InvalidInput(f"scores must be a JSON object, not {type(scores).__name__}")
    for name, score in scores.items():
        what = f"the score of {_shown(name)}"
        _name_text(name, "a scorer's name", MAX_LABEL_CHARS)
        if not isinstance(score, Mapping) or not set(score) <= SCORE_KEYS:
            raise InvalidInput(f"{what} is an object of {', '.join(sorted(SCORE_KEYS))}")
        if score.get("passed") not in (None, True, False):
            raise InvalidInput(f"{what}: passed is true, false or null")
        number = score.get("score")
        if number is not None and (
            isinstance(number, bool)
            or not isinstance(number, int | float)
            or not math.isfinite(number)
        ):
            raise InvalidInput(f"{what}: score is a finite number or null")
        detail = score.get("detail")
        if detail is not None:
            check_text(detail, f"{what}: detail", max_chars=MAX_DETAIL_CHARS)
    return _object(scores, "scores", MAX_CLEAR_BYTES)


def _dataset_info(row: Mapping[str, Any]) -> DatasetInfo:
    return DatasetInfo(
        name=row["name"],
        version=row["version"],
        created_at=row["created_at"],
        case_count=int(row["case_count"]),
        created_by=row["created_by"],
        description=row["description"],
        query=row["query"],
    )


def _evaluation_info(row: Mapping[str, Any]) -> EvaluationInfo:
    return EvaluationInfo(
        id=row["id"],
        dataset=row["dataset"],
        dataset_version=row["dataset_version"],
        agent=row["agent"],
        label=row["label"],
        status=EvaluationStatus(row["status"]),
        created_at=row["created_at"],
        case_count=int(row["case_count"]),
        done=int(row["done"]),
        baseline=row["baseline"],
        finished_at=row["finished_at"],
        created_by=row["created_by"],
        options=row["options"],
        summary=row["summary"],
    )


class PgEvals(PgBase):
    # -------------------------------------------------------------- datasets

    def save_dataset(
        self,
        name: str,
        cases: Sequence[Mapping[str, Any]],
        *,
        created_by: str | None = None,
        query: Mapping[str, Any] | None = None,
        description: str | None = None,
    ) -> DatasetInfo:
        """Save ``cases`` (JSON objects, in order) as a version of dataset
        ``name``: the version their content makes. Cases saved before under
        this name find their version as it was (nothing is written). Bad
        input is one :class:`InvalidInput`, and nothing is written."""
        check_dataset_name(name)
        if isinstance(cases, str | bytes | Mapping) or not isinstance(cases, Sequence):
            raise InvalidInput("a dataset's cases are a list of JSON objects")
        if not 1 <= len(cases) <= MAX_CASES:
            raise InvalidInput(f"a dataset holds 1 to {MAX_CASES} cases, not {len(cases)}")
        plain = [_object(case, f"case {n}", MAX_CASE_BYTES) for n, case in enumerate(cases)]
        by = check_actor(created_by)
        if description is not None:
            check_text(description, "the description", max_chars=MAX_DESCRIPTION_CHARS)
        built_by = None if query is None else _object(query, "the query", MAX_CLEAR_BYTES)
        version = content_version(plain)
        sealed = [
            {
                "position": n,
                "data": self.sealing.seal(case, "dataset_cases", "data", name, version, n),
            }
            for n, case in enumerate(plain)
        ]
        with self.db.tx() as tx:
            row = tx.first(
                INSERT_DATASET,
                {
                    "name": name,
                    "version": version,
                    "created_by": by,
                    "description": description,
                    "query": None if built_by is None else dumps(built_by),
                    "case_count": len(plain),
                },
            )
            if row is None:  # these cases are a version already
                row = tx.first(DATASET_INFO, {"name": name, "version": version})
                assert row is not None
                return _dataset_info(row)
            tx.execute(
                INSERT_DATASET_CASES, {"name": name, "version": version, "cases": dumps(sealed)}
            )
        return _dataset_info(row)

    def dataset(self, name: str, version: str | None = None) -> Dataset:
        """Dataset ``name`` at ``version`` (None: its newest) with its cases;
        :class:`DatasetNotFound` if there is none."""
        name, version = _named(name, version)
        with self.db.tx() as tx:
            row = tx.first(DATASET_INFO, {"name": name, "version": version})
            if row is None:
                which = "" if version is None else f" with version {version}"
                raise DatasetNotFound(f"no dataset named {name!r}{which}")
            info = _dataset_info(row)
            rows = tx.rows(DATASET_CASES, {"name": name, "version": info.version})
        cases = [
            self.sealing.open(r["data"], "dataset_cases", "data", name, info.version, r["position"])
            for r in rows
        ]
        return Dataset(info=info, cases=cases)

    def datasets(self) -> list[DatasetInfo]:
        """Every version of every dataset, newest first."""
        return [_dataset_info(row) for row in self.db.rows(DATASETS, {})]

    def delete_dataset(self, name: str, version: str | None = None) -> int:
        """Delete dataset ``name`` at ``version`` (None: all its versions)
        with its cases; how many versions went (0: there was none). The
        evaluations that ran it stay."""
        name, version = _named(name, version)
        return self.db.execute(DELETE_DATASET, {"name": name, "version": version})

    # ----------------------------------------------------------- evaluations

    def create_evaluation(
        self,
        id: str,
        *,
        dataset: str,
        version: str,
        agent: str,
        label: str,
        case_count: int,
        baseline: str | None = None,
        created_by: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> EvaluationInfo:
        """A running evaluation ``id`` of dataset ``dataset`` at ``version``
        (its first ``case_count`` cases, each pending), against ``agent`` and
        ``label`` (the version under test), compared with the evaluation
        ``baseline``; all in one transaction. ``options`` (how it replays:
        mode, tools, the scorers' names) are kept in clear."""
        if not isinstance(id, str) or not EVALUATION_ID.fullmatch(id):
            raise InvalidInput(
                "an evaluation's id is 1 to 128 letters, digits, '_', '.', ':' or '-', "
                f"starting with a letter or digit, not {_shown(id)}"
            )
        dataset, named_version = _named(dataset, version)
        if named_version is None:
            raise DatasetNotFound(f"dataset {dataset!r} has no version None")
        _name_text(agent, "the agent", MAX_AGENT_CHARS)
        _name_text(label, "the label", MAX_LABEL_CHARS)
        if baseline is not None:
            _evaluation_id(baseline)
        by = check_actor(created_by)
        how = _object(options or {}, "the options", MAX_CLEAR_BYTES)
        if isinstance(case_count, bool) or not isinstance(case_count, int):
            raise InvalidInput("case_count is a whole number")
        with self.db.tx() as tx:
            row = tx.first(DATASET_INFO, {"name": dataset, "version": named_version})
            if row is None:
                raise DatasetNotFound(f"no dataset named {dataset!r} with version {named_version}")
            if not 1 <= case_count <= row["case_count"]:
                raise InvalidInput(
                    f"case_count must be from 1 to {row['case_count']} (the dataset's cases), "
                    f"not {case_count}"
                )
            if baseline is not None and tx.first(EVALUATION_INFO, {"id": baseline}) is None:
                raise EvaluationNotFound(f"no evaluation with id {baseline!r} (the baseline)")
            made = tx.first(
                INSERT_EVALUATION,
                {
                    "id": id,
                    "dataset": dataset,
                    "dataset_version": named_version,
                    "agent": agent,
                    "label": label,
                    "baseline": baseline,
                    "created_by": by,
                    "options": dumps(how),
                    "case_count": case_count,
                },
            )
            if made is None:
                raise InvalidInput(f"an evaluation with id {id!r} exists already")
            tx.execute(INSERT_EVALUATION_CASES, {"id": id, "case_count": case_count})
            info = tx.first(EVALUATION_INFO, {"id": id})
        assert info is not None
        return _evaluation_info(info)

    def claim_eval_case(
        self, evaluation_id: str, worker: str, lease_seconds: float, now: datetime | None = None
    ) -> EvaluationCase | None:
        """The next case of the running evaluation ``evaluation_id`` that is
        pending or whose claim lapsed (by ``now``, else the database's
        clock), claimed by ``worker`` for ``lease_seconds``; None when no
        case is left to claim (all done or held, the evaluation ended, or
        there is no such evaluation)."""
        evaluation_id = _evaluation_id(evaluation_id)
        _name_text(worker, "the worker", MAX_LABEL_CHARS)
        row = self.db.first(
            CLAIM_EVAL_CASE,
            {
                "evaluation_id": evaluation_id,
                "worker": worker,
                "lease": _lease(lease_seconds),
                "now": now,
            },
        )
        return None if row is None else self._evaluation_case(row)

    def extend_eval_claim(
        self,
        evaluation_id: str,
        position: int,
        worker: str,
        lease_seconds: float,
        now: datetime | None = None,
    ) -> bool:
        """Extend ``worker``'s claim on a case to ``lease_seconds`` from now;
        False if it holds the claim no more (another worker took the case,
        or it is done)."""
        evaluation_id = _evaluation_id(evaluation_id)
        params = {
            "evaluation_id": evaluation_id,
            "position": self._position(position),
            "worker": _name_text(worker, "the worker", MAX_LABEL_CHARS),
            "lease": _lease(lease_seconds),
            "now": now,
        }
        return self.db.execute(EXTEND_EVAL_CLAIM, params) == 1

    def finish_eval_case(
        self,
        evaluation_id: str,
        position: int,
        worker: str,
        *,
        result: Mapping[str, Any],
        scores: Mapping[str, Any],
        duration_ms: float | None = None,
        cost_usd: float | None = None,
        tokens: int | None = None,
    ) -> bool:
        """Record a case done with its replay report (``result``, sealed)
        and its scores (in clear: ``{scorer: {"passed", "score",
        "detail"}}``), if ``worker`` still holds its claim; False (nothing
        written) if it does not: another worker took the case over, or it
        is done already."""
        evaluation_id = _evaluation_id(evaluation_id)
        position = self._position(position)
        _name_text(worker, "the worker", MAX_LABEL_CHARS)
        report = _object(result, "the result", MAX_CASE_BYTES)
        scored = _scores(scores)
        if tokens is not None and (
            isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens < 2**63
        ):
            raise InvalidInput("tokens is a whole number of 0 or more")
        sealed = self.sealing.seal(report, "evaluation_cases", "result", evaluation_id, position)
        params = {
            "evaluation_id": evaluation_id,
            "position": position,
            "worker": worker,
            "result": dumps(sealed),
            "scores": dumps(scored),
            "duration_ms": _amount(duration_ms, "duration_ms"),
            "cost_usd": _amount(cost_usd, "cost_usd"),
            "tokens": tokens,
        }
        return self.db.execute(FINISH_EVAL_CASE, params) == 1

    def release_eval_claims(self, evaluation_id: str, worker: str) -> int:
        """Give the cases ``worker`` holds back (pending: the next claim
        takes them, its process died or stopped); how many."""
        evaluation_id = _evaluation_id(evaluation_id)
        _name_text(worker, "the worker", MAX_LABEL_CHARS)
        return self.db.execute(
            RELEASE_EVAL_CLAIMS, {"evaluation_id": evaluation_id, "worker": worker}
        )

    def evaluation(self, id: str, *, cases: bool = True) -> Evaluation:
        """Evaluation ``id`` with its cases, by position (done ones with
        their results); :class:`EvaluationNotFound` if there is none.
        ``cases=False``: without them (its progress is ``info.done``), a
        read that stays small while a runner polls it."""
        id = _evaluation_id(id)
        with self.db.tx() as tx:
            row = tx.first(EVALUATION_INFO, {"id": id})
            if row is None:
                raise EvaluationNotFound(f"no evaluation with id {id!r}")
            rows = tx.rows(EVALUATION_CASES, {"id": id}) if cases else []
        return Evaluation(_evaluation_info(row), [self._evaluation_case(r) for r in rows])

    def evaluations(self, dataset: str | None = None, limit: int = 50) -> list[EvaluationInfo]:
        """The latest evaluations, of ``dataset`` if given, newest first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise InvalidInput("limit is a whole number from 1 to 10000")
        if dataset is not None and not DATASET_NAME.fullmatch(str(dataset)):
            return []
        rows = self.db.rows(EVALUATIONS, {"dataset": dataset, "limit": limit})
        return [_evaluation_info(row) for row in rows]

    def finish_evaluation(
        self,
        id: str,
        summary: Mapping[str, Any],
        status: EvaluationStatus | str = EvaluationStatus.COMPLETED,
    ) -> EvaluationInfo:
        """End the running evaluation ``id`` (``completed`` or
        ``cancelled``) with its ``summary`` (per scorer: numbers, in clear).
        An evaluation ends once: one that ended already is returned as it
        ended, and its summary is not written over."""
        id = _evaluation_id(id)
        if status not in ENDINGS:
            raise InvalidInput(
                f"an evaluation ends {' or '.join(ENDINGS)}, not {_shown(str(status))}"
            )
        ending = EvaluationStatus(status)
        plain = _object(summary, "the summary", MAX_CLEAR_BYTES)
        with self.db.tx() as tx:
            tx.execute(
                FINISH_EVALUATION, {"id": id, "status": ending.value, "summary": dumps(plain)}
            )
            row = tx.first(EVALUATION_INFO, {"id": id})
        if row is None:
            raise EvaluationNotFound(f"no evaluation with id {id!r}")
        return _evaluation_info(row)

    # ---------------------------------------------------------------- rows

    @staticmethod
    def _position(position: object) -> int:
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < 2**31:
            raise InvalidInput("a case's position is a whole number of 0 or more")
        return position

    def _evaluation_case(self, row: Mapping[str, Any]) -> EvaluationCase:
        evaluation_id, position = row["evaluation_id"], row["position"]
        return EvaluationCase(
            evaluation_id=evaluation_id,
            position=position,
            status=EvaluationCaseStatus(row["status"]),
            attempts=int(row["attempts"]),
            claimed_by=row["claimed_by"],
            claimed_until=row["claimed_until"],
            result=self.sealing.open(
                row["result"], "evaluation_cases", "result", evaluation_id, position
            ),
            scores=row["scores"],
            duration_ms=row["duration_ms"],
            cost_usd=row["cost_usd"],
            tokens=None if row["tokens"] is None else int(row["tokens"]),
        )
