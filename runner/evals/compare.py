"""Two evaluations of one dataset version, case by case: what the console's
comparison page and ``runwright evals compare`` show.

Each row is a case: its scores in both, and which scorers it passed in one
and failed in the other (``better``, ``worse``). The summary is the first's
against the second as baseline (runner/evals/summary.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.core.errors import InvalidInput
from runner.evals.summary import ScorerSummary, summarize
from store.models import Evaluation


@dataclass(frozen=True)
class Row:
    position: int
    first: dict[str, Any]  # scores by scorer
    second: dict[str, Any]
    better: tuple[str, ...]  # scorers passed in the first, failed in the second
    worse: tuple[str, ...]  # failed in the first, passed in the second

    @property
    def changed(self) -> bool:
        return bool(self.better or self.worse)


@dataclass(frozen=True)
class Comparison:
    first: Evaluation
    second: Evaluation
    scorers: tuple[str, ...]
    rows: tuple[Row, ...]
    summary: tuple[ScorerSummary, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "first": self.first.info.id,
            "second": self.second.info.id,
            "scorers": list(self.scorers),
            "summary": [s.to_json() for s in self.summary],
            "rows": [
                {
                    "position": r.position,
                    "first": r.first,
                    "second": r.second,
                    "better": list(r.better),
                    "worse": list(r.worse),
                }
                for r in self.rows
            ],
        }


def compare(first: Evaluation, second: Evaluation) -> Comparison:
    """``first`` beside ``second`` (its baseline), case by case."""
    if first.info.dataset_version != second.info.dataset_version:
        raise InvalidInput(
            f"evaluation {first.info.id} ran version {first.info.dataset_version} of its "
            f"dataset and {second.info.id} ran {second.info.dataset_version}: compare "
            "evaluations of one version"
        )
    a = {c.position: c.scores or {} for c in first.cases}
    b = {c.position: c.scores or {} for c in second.cases}
    names: list[str] = []
    for scores in [*a.values(), *b.values()]:
        names += [n for n in scores if n not in names]
    rows = []
    for position in sorted(set(a) | set(b)):
        here, there = a.get(position, {}), b.get(position, {})
        better = tuple(n for n in names if _passed(here, n) is True and _passed(there, n) is False)
        worse = tuple(n for n in names if _passed(here, n) is False and _passed(there, n) is True)
        rows.append(Row(position, here, there, better, worse))
    positions = sorted(set(a) | set(b))
    summary = summarize([a.get(p) for p in positions], [b.get(p) for p in positions])
    return Comparison(first, second, tuple(names), tuple(rows), tuple(summary))


def _passed(scores: dict[str, Any], name: str) -> bool | None:
    found = (scores.get(name) or {}).get("passed")
    return None if found is None else bool(found)
