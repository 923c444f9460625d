"""What a run cost, as far as it is known, for the console and the CLI
(docs/operations.md, "Cost").

A model step's cost is None when litellm has no price for the model
(runner/core/model.py ``_cost``), and a real 0.0 when the model is free. The run's
total (``Run.cost_usd``) adds the priced steps only, so 0.0 there may mean free
or unpriced: whether a run's cost is complete is read from its steps, or, in a
list, from the run's mark that one had no price (``Run.cost_unpriced``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from store.models import Step, StepKind
from store.rules import unpriced_call

UNKNOWN = "—"


def money(usd: float | None) -> str:
    """A cost in USD as a person reads it, in the one format of the console
    and the CLI: ``$0.0123``; ``$1,234.56`` from $100 on; ``<$0.0001`` for
    more than nothing but less than a hundredth of a cent; ``$0.0000`` for a
    free model; ``—`` when it is unknown (an unpriced model)."""
    if usd is None or not math.isfinite(usd) or usd < 0:
        return UNKNOWN
    if 0 < usd < 0.0001:
        return "<$0.0001"
    return f"${usd:.4f}" if usd < 100 else f"${usd:,.2f}"


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
    """A model step that used tokens and has no price (store/rules.py)."""
    return step.kind is StepKind.LLM and unpriced_call(step.usage, step.cost_usd)


def run_cost(total_usd: float, steps: Iterable[Step]) -> Cost:
    """A run's cost from its total and its steps."""
    return Cost(total_usd, not any(unpriced(step) for step in steps))


def listed_cost(total_usd: float, cost_unpriced: bool) -> Cost:
    """A run's cost in a list, which reads no steps: ``cost_unpriced`` is the
    run's mark that one of its model steps had no price (``Run.cost_unpriced``)."""
    return Cost(total_usd, not cost_unpriced)
