"""Model limits without a service: declarations, patterns, which one governs
a model, and RUNWRIGHT_MODEL_LIMITS."""

from __future__ import annotations

from typing import Any

import pytest

from runner.core.errors import ConfigurationError
from runner.core.limits import LimitError, ModelLimit, ModelLimits, configured, limits, register
from runner.core.limits.limiter import Waiter
from runner.core.settings import Settings


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"rpm": 0}, "rpm must be a positive whole number, not 0"),
        ({"tpm": -5}, "tpm must be a positive whole number, not -5"),
        ({"max_concurrent": True}, "max_concurrent must be a positive whole number, not True"),
        ({"rpm": 1.5}, "rpm must be a positive whole number, not 1.5"),
        ({"rpm": "500"}, "rpm must be a positive whole number, not '500'"),
        ({}, "needs at least one of rpm, tpm and max_concurrent"),
    ],
)
def test_a_bad_limit_is_one_clear_error(values: dict[str, Any], message: str) -> None:
    with pytest.raises(LimitError, match=message) as raised:
        ModelLimit(**values)
    assert isinstance(raised.value, ConfigurationError)
    assert isinstance(raised.value, ValueError)


def test_a_limit_is_frozen() -> None:
    limit = ModelLimit(rpm=500, tpm=200_000)
    with pytest.raises(AttributeError):
        limit.rpm = 1  # type: ignore[misc]
    assert limit.max_concurrent is None


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("", "non-empty string"),
        ("openai/ gpt", "holds a space"),
        ("*/gpt-4o", "has a \\* before its end"),
        ("openai/*-mini", "has a \\* before its end"),
        ("**", "has a \\* before its end"),
        (None, "non-empty string"),
    ],
)
def test_a_bad_pattern_is_one_clear_error(pattern: Any, message: str) -> None:
    with pytest.raises(LimitError, match=message):
        ModelLimits({pattern: ModelLimit(rpm=1)})


def test_the_most_specific_pattern_wins() -> None:
    exact, provider, family, anything = (ModelLimit(rpm=n) for n in (1, 2, 3, 4))
    table = ModelLimits(
        {
            "openai/gpt-4o-mini": exact,
            "openai/*": provider,
            "openai/gpt-4o*": family,
            "*": anything,
        }
    )
    assert table.for_model("openai/gpt-4o-mini") == ("openai/gpt-4o-mini", exact)
    assert table.for_model("openai/gpt-4o") == ("openai/gpt-4o*", family)
    assert table.for_model("openai/o3") == ("openai/*", provider)
    assert table.for_model("anthropic/claude") == ("*", anything)
    assert ModelLimits({"openai/*": provider}).for_model("anthropic/claude") is None


def test_declaring_a_pattern_again_differently_needs_replace() -> None:
    table = ModelLimits({"openai/*": ModelLimit(rpm=1)})
    table.register("openai/*", ModelLimit(rpm=1))  # the same again: fine
    with pytest.raises(LimitError, match="declared already"):
        table.register("openai/*", ModelLimit(rpm=2))
    table.register("openai/*", ModelLimit(rpm=2), replace=True)
    assert table.for_model("openai/x") == ("openai/*", ModelLimit(rpm=2))


def test_the_variable_parses_into_limits() -> None:
    text = (
        '{"openai/gpt-4o-mini": {"rpm": 500, "tpm": 200000, "max_concurrent": 20},'
        ' "anthropic/*": {"tpm": 80000}}'
    )
    assert ModelLimits.from_json(text) == ModelLimits(
        {
            "openai/gpt-4o-mini": ModelLimit(rpm=500, tpm=200_000, max_concurrent=20),
            "anthropic/*": ModelLimit(tpm=80_000),
        }
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "RUNWRIGHT_MODEL_LIMITS is not valid JSON"),
        ("[]", "must be a JSON object of patterns to limits"),
        ('{"a/*": 5}', "RUNWRIGHT_MODEL_LIMITS\\['a/\\*'\\]: must be an object"),
        ('{"a/*": {"rpn": 5}}', "\\['a/\\*'\\]: unknown field 'rpn' \\(known: rpm, tpm"),
        ('{"a/*": {"rpm": "5"}}', "\\['a/\\*'\\]: rpm must be a positive whole number, not '5'"),
        ('{"a/*": {"tpm": 1.0}}', "\\['a/\\*'\\]: tpm must be a positive whole number, not 1.0"),
        ('{"a/*": {"tpm": null}}', "\\['a/\\*'\\]: a model limit needs at least one"),
        ('{"a*b": {"rpm": 1}}', "RUNWRIGHT_MODEL_LIMITS: model limit pattern 'a\\*b' has a"),
    ],
)
def test_a_bad_variable_is_one_clear_error_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(LimitError, match=message):
        ModelLimits.from_json(text)


def test_the_settings_check_the_variable_once_at_start() -> None:
    settings = Settings.from_env({"RUNWRIGHT_MODEL_LIMITS": '{"openai/*": {"rpm": 60}}'})
    assert settings.model_limits == '{"openai/*": {"rpm": 60}}'
    with pytest.raises(ConfigurationError, match="unknown field 'rpn'"):
        Settings.from_env({"RUNWRIGHT_MODEL_LIMITS": '{"openai/*": {"rpn": 60}}'})


def test_the_environment_replaces_what_code_declares_for_a_pattern() -> None:
    register("test-provider/*", ModelLimit(rpm=10, tpm=1000))
    register("test-provider/exact", ModelLimit(rpm=5))
    try:
        table = configured('{"test-provider/*": {"tpm": 50}}')
        assert table.for_model("test-provider/other") == ("test-provider/*", ModelLimit(tpm=50))
        assert table.for_model("test-provider/exact") == ("test-provider/exact", ModelLimit(rpm=5))
        assert configured(None).for_model("test-provider/x") == (
            "test-provider/*",
            ModelLimit(rpm=10, tpm=1000),
        )
    finally:
        limits._limits.pop("test-provider/*")
        limits._limits.pop("test-provider/exact")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"id": "", "tenant": "t"}, "a waiter's id must be a non-empty string"),
        ({"id": "w", "tenant": "a\nb"}, "a tenant must hold printable characters only"),
        ({"id": "w", "tenant": 5}, "a tenant must be a non-empty string"),
        (
            {"id": "w", "tenant": "t", "priority": 10},
            "a priority must be a whole number from 0 to 9",
        ),
        ({"id": "w", "tenant": "t", "weight": 0}, "a tenant's weight must be a whole number"),
    ],
)
def test_a_bad_waiter_is_one_clear_error(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Waiter(**values)


def test_tenant_weights_are_turns_a_round_and_bad_ones_are_one_clear_error() -> None:
    from datetime import UTC, datetime

    from runner.core.limits.admission import NO_TENANT, waiter_of
    from runner.core.limits.model_limits import tenant_weights
    from store.models import Run, RunStatus, TriggerEnvelope, Usage

    assert tenant_weights(None) == {} and tenant_weights('{"acme": 3}') == {"acme": 3}
    for text, said in [
        ("[1]", "JSON object"),
        ("{", "not JSON"),
        ('{"acme": 0}', "1 to 1000"),
        ('{"acme": true}', "whole number"),
        ('{"acme": "2"}', "whole number"),
        ('{"": 2}', "whole number"),
    ]:
        with pytest.raises(LimitError, match=said):
            tenant_weights(text)
    with pytest.raises(ConfigurationError, match="RUNWRIGHT_TENANT_WEIGHTS"):
        Settings.from_env({"RUNWRIGHT_TENANT_WEIGHTS": '{"acme": -1}'})
    now = datetime.now(UTC)
    trigger = TriggerEnvelope.model_construct()
    run = Run("r1", "a", RunStatus.QUEUED, trigger, Usage(), now, now, tenant="acme", priority=4)
    assert waiter_of(run, {"acme": 3}).weight == 3 and waiter_of(run).weight == 1
    assert waiter_of(run).priority == 4
    other = Run("r2", "a", RunStatus.QUEUED, trigger, Usage(), now, now)
    assert waiter_of(other, {"acme": 3}).tenant == NO_TENANT and waiter_of(other).weight == 1


def test_a_limit_key_s_metric_label_carries_no_value_of_a_trigger() -> None:
    from runner.core.agent import limit_label, slot_key

    assert limit_label("openai/gpt-4o-mini") == "openai/gpt-4o-mini"
    assert limit_label(slot_key("agent", "billing")) == "agent:billing"
    assert limit_label(slot_key("concurrency", "billing", "cust-4711")) == "concurrency:billing"
    long = slot_key("concurrency", "billing", "x" * 500)  # hashed past its length
    assert "x" not in long and limit_label(long) == "concurrency"
