"""runner/core/appdb.py on its own: it never imports Django or Flask, finds Django
once it is set up (never before), and what a call returns or raises is the
call's, whatever closing a connection does. (With a real Django project and
Flask app: tests/integration/ and tests/e2e/test_app_databases.py.)"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from runner.core import appdb

PROBE = """
import json, sys
from runner.core import appdb
import runner.core.steps.tools, runner.core.approvals.decisions, runner.core.engine.execution

def frameworks():
    names = ("django", "flask", "flask_sqlalchemy")
    return sorted(m for m in sys.modules if m.split(".")[0] in names)

said = {"value": appdb.call(lambda a, fn: a + fn, 1, fn=2), "before": frameworks()}
import django
from django.conf import settings
appdb.call(lambda: None)
said["found_unconfigured"] = appdb._django_connections is not None
settings.configure(DATABASES={}, INSTALLED_APPS=[])
appdb.call(lambda: None)
said["found_configured"] = appdb._django_connections is not None
appdb.call(django.setup)  # the call that sets Django up: found after it
said["found_set_up"] = appdb._django_connections is not None
print(json.dumps(said))
"""


class Connection:
    """What appdb asks of a Django connection."""

    def __init__(self, alias: str, *, atomic: bool = False, fails: bool = False) -> None:
        self.alias = alias
        self.in_atomic_block = atomic
        self.fails = fails
        self.checked = 0

    def close_if_unusable_or_obsolete(self) -> None:
        self.checked += 1
        if self.fails:
            raise RuntimeError("the socket is gone")


class Connections:
    def __init__(self, *connections: Connection) -> None:
        self.connections = connections

    def all(self, initialized_only: bool = False) -> list[Connection]:
        assert initialized_only  # never opens one to close it
        return list(self.connections)


def test_closing_never_changes_what_the_call_returns_or_raises(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken, in_transaction = Connection("default", fails=True), Connection("other", atomic=True)
    monkeypatch.setattr(appdb, "_django_connections", Connections(broken, in_transaction))
    monkeypatch.setattr(appdb, "_flask", None)
    with caplog.at_level(logging.WARNING, logger="runner.core.appdb"):
        assert appdb.call(lambda: "charged") == "charged"

        def refused() -> Any:
            raise ValueError("declined")

        with pytest.raises(ValueError, match="declined"):
            appdb.call(refused)
    assert broken.checked == 4  # before and after each call
    assert in_transaction.checked == 0  # a caller's transaction is left alone
    assert [r.getMessage() for r in caplog.records] == [
        "closing connection default failed: RuntimeError: the socket is gone"
    ] * 4
