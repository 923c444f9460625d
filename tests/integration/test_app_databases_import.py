"""Runwright never imports Django and finds it once set up, in a fresh
interpreter (the rest of the application's connections:
tests/unit/test_app_databases.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.services import ROOT

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


def test_django_is_never_imported_and_found_once_set_up() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.splitlines()[-1])
    assert said == {
        "value": 3,  # a keyword named fn is the function's own
        "before": [],
        "found_unconfigured": False,
        "found_configured": False,
        "found_set_up": True,
    }
