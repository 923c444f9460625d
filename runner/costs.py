"""What a run cost, as far as it is known, for the console and the CLI
(docs/operations.md, "Cost").

A model step's cost is None when litellm has no price for the model
(runner/model.py ``_cost``), and a real 0.0 when the model is free. The run's
total (``Run.cost_usd``) adds the priced steps only, so 0.0 there may mean free
or unpriced: whether a run's cost is complete is read from its steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from store.models import Step, StepKind

UNKNOWN = "—"


@dataclass(frozen=True)
class Cost:
    usd: float  # what the priced model steps cost
    complete: bool  # every model step that used tokens had a price

    def words(self, money: Callable[[float], str]) -> str:
        """``$0.0238``; ``≥ $0.0200 (some steps unpriced)``; ``—`` when no step had a price."""
        if self.complete:
            return money(self.usd)
        if self.usd > 0:
            return f"≥ {money(self.usd)} (some steps unpriced)"
        return UNKNOWN


def unpriced(step: Step) -> bool:
    """A model step that used tokens and has no price (a failed call used none)."""
    return step.kind is StepKind.LLM and step.usage is not None and step.cost_usd is None


def run_cost(total_usd: float, steps: Iterable[Step]) -> Cost:
    """A run's cost from its total and its steps."""
    return Cost(total_usd, not any(unpriced(step) for step in steps))


def listed_cost(total_usd: float, tokens: int) -> Cost:
    """A run's cost in a list, which reads no steps: a run whose model calls
    used tokens and cost nothing is taken as unpriced, since a free model and an
    unpriced one add the same 0 to the total."""
    return Cost(total_usd, not (total_usd == 0 and tokens > 0))
