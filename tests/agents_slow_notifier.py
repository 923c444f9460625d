"""An agent whose notifier is slow, as a webhook may be, for the workers
of the resume test (tests/e2e/test_slow_notifier.py).

The notifier sleeps ``RUNWRIGHT_TEST_NOTIFIER_SECONDS`` (default 1) and appends
a line to ``RUNWRIGHT_TEST_EFFECT_LOG`` when it starts and when it returns, so
the test can tell which decisions arrived while the execution that asked was
still calling it.
"""

from __future__ import annotations

import os
import time

from runner import Agent, ApprovalPolicy, ApprovalRequest
from runner.testing import ScriptedModel, call, text, tools
from tests.agents import JOURNAL, log_effect, refund


def slow_notifier(request: ApprovalRequest) -> None:
    log_effect("notifier", run_id=request.run_id, at=time.time(), phase="start")
    time.sleep(float(os.environ.get("RUNWRIGHT_TEST_NOTIFIER_SECONDS", "1")))
    log_effect("notifier", run_id=request.run_id, at=time.time(), phase="end")


slow_notifier_model = ScriptedModel(
    "slow_notifier",
    [tools(call("refund", {"amount": 3})), text("refund handled")],
    journal=JOURNAL,
)
Agent(
    name="slow_notifier",
    model=slow_notifier_model.model,
    tools=[refund],
    approvals={"refund": ApprovalPolicy(expires_in=3600)},
    notifier=slow_notifier,
)
