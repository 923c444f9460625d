"""Model limits declared in code, as an agent module declares them, for
``runwright limits`` and ``runwright doctor`` (tests/e2e/test_cli_limits.py)."""

from __future__ import annotations

from runner.core.limits import ModelLimit, register

# Replaced by RUNWRIGHT_MODEL_LIMITS where a test sets the same pattern.
register("openai/gpt-a", ModelLimit(rpm=1))
register("mistral/*", ModelLimit(tpm=50_000))
