"""Models litellm has no price for, as tests stage them. Scripted models are
always in litellm's cost map (free unless given a price), so for the models
named here the adapter's cost reading (runner/core/model.py ``_cost``, whose
mapping of litellm's answers tests/unit/test_model_cost.py covers) answers
None, as it does for a model litellm cannot price."""

from __future__ import annotations

from typing import Any

import pytest


def leave_unpriced(monkeypatch: pytest.MonkeyPatch, names: set[str]) -> set[str]:
    """Leave the scripted models named in ``names`` unpriced while the test
    runs; a script may add its own name midway, to leave its calls from then
    on unpriced."""
    from runner.core import model

    priced = model._cost

    def cost(litellm: Any, response: Any) -> float | None:
        called = str(getattr(response, "model", ""))
        if any(called.endswith(name) for name in names):
            return None
        return priced(litellm, response)

    monkeypatch.setattr(model, "_cost", cost)
    return names
