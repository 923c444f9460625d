"""Every error Runwright raises derives from ``RunwrightError`` (issue 11).

Two checks: a scan of every ``raise`` in ``runner/`` and ``tasks/`` (each named
exception class must be a ``RunwrightError``, or be on the short list below,
each with its reason), and the errors a user of the public and testing API
meets, raised through that API.
"""

from __future__ import annotations

import ast
import builtins
import importlib

import pytest

from runner.core.errors import ConfigurationError, InvalidInput, RunwrightError
from tests.services import ROOT

# (module, exception class) raised on purpose outside RunwrightError, and why.
NOT_RUNWRIGHT = {
    # Process exits with one line, not errors: a shadowed module, a worker
    # that cannot start (Celery lets only SystemExit through its signals).
    ("runner.core.layout", "SystemExit"): "exit",
    ("runner.celery", "SystemExit"): "exit",
    # Stands for the process dying at a fault point: a BaseException on purpose.
    ("runner.core.faults", "FaultInjected"): "simulated crash",
    # The dataclass's protocol for a field without a default that a descriptor
    # holds (Agent's overridable fields, asked for their default on the class).
    ("runner.core.agent", "AttributeError"): "dataclass contract",
    # litellm's contract for a custom provider without a sync path.
    ("runner.testing.scripted", "NotImplementedError"): "litellm contract",
    # The testing kit fails a test's expectation as pytest expects: an AssertionError.
    ("runner.testing.kit", "AssertionError"): "a failed expectation",
    ("runner.testing.cases", "CaseFailed"): "a failed expectation (an AssertionError)",
    ("runner.testing.databases", "ValueError"): "a test dropping what it did not make",
    # A live channel's message that is not Runwright's: its one caller
    # (runner/core/events/feed.py) catches it and drops the message.
    ("runner.core.coordination.live", "ValueError"): "a stranger's message, dropped",
    # kombu and Celery treat only the driver's connection error as a lost broker.
    ("tasks.broker", "RedisConnectionError"): "kombu contract",
    # Celery's signal to hand a message back to the broker (an outage of the store).
    ("runner.celery", "Reject"): "Celery contract",
    # Celery's signal to ack a message that changed nothing (a duplicate delivery).
    ("runner.celery", "Ignore"): "Celery contract",
}


def _raises() -> list[tuple[str, str, int]]:
    found = []
    for package in ("runner", "tasks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            module = ".".join(parts)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.Raise) or node.exc is None:
                    continue  # a bare re-raise
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                # Names only: `raise exc` re-raises a caught one, and `raise
                # cls(...)` in the scripted provider raises litellm's own.
                if isinstance(exc, ast.Name) and exc.id[0].isupper():
                    found.append((module, exc.id, node.lineno))
    return found


def _resolve(module: str, name: str) -> type[BaseException]:
    namespace = vars(importlib.import_module(module))
    cls = namespace.get(name, getattr(builtins, name, None))
    assert isinstance(cls, type) and issubclass(cls, BaseException), (module, name)
    return cls


def test_every_raise_in_runner_and_tasks_is_a_runwright_error(django_db: None) -> None:
    """(Django set up: the console's Django views import its models.)"""
    found = _raises()
    assert len(found) > 30  # the scan sees the code, the CLI package too
    assert ("runner.cli.demo", "DemoError") in {(module, name) for module, name, _ in found}
    stray = [
        f"{module}:{line} raises {name}"
        for module, name, line in found
        if (module, name) not in NOT_RUNWRIGHT
        and not issubclass(_resolve(module, name), RunwrightError)
    ]
    assert stray == []
    # The list holds only what is still raised.
    assert set(NOT_RUNWRIGHT) <= {(module, name) for module, name, _ in found}


def test_fault_injected_is_on_purpose_not_an_exception() -> None:
    from runner.core.faults import FaultInjected

    assert not issubclass(FaultInjected, Exception)


def test_tool_input_errors_are_invalid_input() -> None:
    from runner.core.steps.tools import ToolInputError, tool

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    with pytest.raises(ToolInputError) as caught:
        add.parse("{not json")
    assert isinstance(caught.value, InvalidInput)


def test_testing_api_errors_are_runwright_errors() -> None:
    from runner import testing
    from runner.core import faults

    with pytest.raises(RunwrightError, match="no scripted model named 'nobody'"):
        testing.scripted.lookup("nobody")
    with pytest.raises(InvalidInput, match="unknown scripted error"):
        testing.Reply(error="meltdown")
    with pytest.raises(InvalidInput, match="unknown fault point"):
        faults.arm("before_breakfast", "kill")
    with pytest.raises(InvalidInput, match="unknown fault action"):
        faults.arm(faults.AFTER_JOURNAL, "explode")
    short = testing.ScriptedModel("one-reply", [testing.text("only")])
    request = testing.Request([{"role": "assistant", "content": "x"}], [])
    with pytest.raises(RunwrightError, match="has 1 replies"):
        short.choose(request)


def test_notifier_configuration_errors_are_configuration_errors() -> None:
    from runner.notifiers import WebhookNotifier

    with pytest.raises(ConfigurationError, match="must be http"):
        WebhookNotifier("ftp://example.com/hook", "secret")


def test_blocking_on_the_runtime_from_its_own_loop_is_a_runwright_error() -> None:
    from runner.core.runtime import runtime

    async def nested() -> None:
        async def nothing() -> None:
            return None

        coro = nothing()
        try:
            runtime().run(coro)
        finally:
            coro.close()

    with pytest.raises(RunwrightError, match="own loop"):
        runtime().run(nested())
