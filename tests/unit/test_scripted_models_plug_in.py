"""The model adapter serves ``scripted/`` models through what the testing kit
plugs into it (``runner.core.model.serve_scripted_models``): the adapter imports
nothing of the kit (tests/unit/test_engine_structure.py), so a process that
never imported the kit is told so, and one that did finds its models."""

from __future__ import annotations

from typing import Any

import pytest

import runner.testing
from runner.core import model
from runner.core.errors import ModelError


def test_importing_the_kit_plugs_its_scripted_models_in() -> None:
    assert model._scripted_server is runner.testing._serve_scripted


def test_a_scripted_model_without_the_kit_is_a_model_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(model, "_scripted_server", None)
    with pytest.raises(ModelError, match=r"scripted/nobody.*runner\.testing") as raised:
        model._serve_scripted(object(), "scripted/nobody")
    assert not raised.value.transient


def test_the_server_plugged_in_is_handed_litellm_and_the_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served: list[tuple[Any, str]] = []
    monkeypatch.setattr(model, "_scripted_server", None)
    model.serve_scripted_models(lambda litellm, name: served.append((litellm, name)))
    litellm = object()
    model._serve_scripted(litellm, "scripted/echo")
    assert served == [(litellm, "scripted/echo")]
