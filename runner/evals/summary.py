"""An evaluation's summary: per scorer, how many cases passed and the mean
score, and against a baseline evaluation of the same dataset version, the
difference in pass rate with its 95% confidence interval.

The two evaluations ran the same cases, so the difference is paired: for
each case both scored, ``d = passed here - passed in the baseline`` (1, 0 or
-1); the interval is the mean of ``d`` plus or minus 1.96 standard errors
(a normal approximation, fair from about 30 cases; with fewer it is wide,
as it should be, and with one case there is none).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

Z95 = 1.959964


@dataclass(frozen=True)
class ScorerSummary:
    name: str
    scored: int  # the cases it applied to
    passed: int
    mean: float | None  # of the scores it gave
    baseline_pass_rate: float | None = None
    difference: float | None = None  # pass rate here minus the baseline's, on the paired cases
    low: float | None = None  # the difference's 95% interval
    high: float | None = None
    paired: int = 0  # the cases both evaluations scored

    @property
    def pass_rate(self) -> float | None:
        return None if self.scored == 0 else self.passed / self.scored

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "pass_rate": self.pass_rate}


Scores = Mapping[str, Mapping[str, Any]]  # scorer -> {"passed", "score", "detail"}


def summarize(
    cases: Sequence[Scores | None], baseline: Sequence[Scores | None] | None = None
) -> list[ScorerSummary]:
    """The summary of each scorer over ``cases`` (a case's scores by scorer,
    None for a case not scored), against ``baseline`` (the same cases, in the
    same order) if given."""
    names: list[str] = []
    for scores in cases:
        for name in scores or {}:
            if name not in names:
                names.append(name)
    summaries = []
    for name in names:
        verdicts = [_passed(s, name) for s in cases]
        values = [
            float(v)
            for s in cases
            if s is not None and name in s and isinstance(v := s[name].get("score"), int | float)
        ]
        scored = [v for v in verdicts if v is not None]
        summary = ScorerSummary(
            name=name,
            scored=len(scored),
            passed=sum(1 for v in scored if v),
            mean=statistics.fmean(values) if values else None,
        )
        if baseline is not None:
            summary = _against(summary, verdicts, [_passed(s, name) for s in baseline])
        summaries.append(summary)
    return summaries


def _passed(scores: Scores | None, name: str) -> bool | None:
    if scores is None or name not in scores:
        return None
    found = scores[name].get("passed")
    return None if found is None else bool(found)


def _against(
    summary: ScorerSummary, here: list[bool | None], there: list[bool | None]
) -> ScorerSummary:
    scored_there = [v for v in there if v is not None]
    rate = None if not scored_there else sum(scored_there) / len(scored_there)
    pairs = [(a, b) for a, b in zip(here, there, strict=False) if a is not None and b is not None]
    if not pairs:
        return ScorerSummary(**{**asdict(summary), "baseline_pass_rate": rate})
    d = [int(a) - int(b) for a, b in pairs]
    mean = statistics.fmean(d)
    low = high = None
    if len(d) > 1:
        half = Z95 * statistics.stdev(d) / math.sqrt(len(d))
        low, high = mean - half, mean + half
    return ScorerSummary(
        **{
            **asdict(summary),
            "baseline_pass_rate": rate,
            "difference": mean,
            "low": low,
            "high": high,
            "paired": len(d),
        }
    )


def render(summaries: Sequence[ScorerSummary]) -> str:
    """The summary as a table of text."""
    lines = [
        f"{'scorer':<20}{'pass rate':>12}{'mean':>8}{'baseline':>10}{'difference (95% CI)':>30}"
    ]
    for s in summaries:
        rate = "-" if s.pass_rate is None else f"{s.passed}/{s.scored} {s.pass_rate:.0%}"
        mean = "-" if s.mean is None else f"{s.mean:.2f}"
        base = "-" if s.baseline_pass_rate is None else f"{s.baseline_pass_rate:.0%}"
        if s.difference is None:
            diff = "-"
        elif s.low is None or s.high is None:
            diff = f"{s.difference:+.1%}"
        else:
            diff = f"{s.difference:+.1%} [{s.low:+.1%}, {s.high:+.1%}]"
        lines.append(f"{s.name:<20}{rate:>12}{mean:>8}{base:>10}{diff:>30}")
    return "\n".join(lines)
