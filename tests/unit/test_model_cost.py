"""The cost of a model call: litellm's own figure when it has one, else asked."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from runner.core.model import _cost


class Litellm:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked = 0

    def completion_cost(self, completion_response: Any) -> Any:
        self.asked += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_litellms_own_figure_is_used_without_asking_again() -> None:
    litellm = Litellm(0.5)
    response = SimpleNamespace(_hidden_params={"response_cost": 0.02})
    assert _cost(litellm, response) == 0.02 and litellm.asked == 0
    unpriced = SimpleNamespace(_hidden_params={"response_cost": None})
    assert _cost(litellm, unpriced) is None and litellm.asked == 0


def test_without_it_litellm_is_asked_and_nonsense_is_no_cost() -> None:
    bare = SimpleNamespace()
    assert _cost(Litellm(0.25), bare) == 0.25
    assert _cost(Litellm(ValueError("no price")), bare) is None
    for nonsense in (math.nan, -1.0, "free", math.inf):
        assert _cost(Litellm(nonsense), bare) is None
