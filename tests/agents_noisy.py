"""An agent module that prints as it is imported, as a careless one might: the
CLI's ``--json`` keeps stdout for its one document (tests/e2e/test_cli_json.py)."""

from __future__ import annotations

from runner import Agent
from runner.testing import ScriptedModel, text

print("agents_noisy: imported")

noisy_model = ScriptedModel("noisy", [text("quiet now")])
Agent(name="noisy", model=noisy_model.model)
