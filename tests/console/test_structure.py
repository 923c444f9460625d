"""The console's place in the layering: a client of the public
engine API, never of the store; Flask only where it is mounted."""

from __future__ import annotations

import subprocess
import sys

from tests.services import ROOT
from tests.unit.test_engine_structure import PACKAGES, import_graph

# Records and event shapes the engine's API returns; none of them reads or writes.
DATA_MODULES = {"store.models", "store.events", "store.rules"}


def test_the_console_imports_no_store_module_but_its_records() -> None:
    graph = import_graph(PACKAGES)
    console = {m: edges for m, edges in graph.items() if m.startswith("runner.console")}
    assert "runner.console.views" in console and "runner.console.flask" in console
    into_store = {
        (m, e.target)
        for m, edges in console.items()
        for e in edges
        if e.target.startswith("store") and e.target not in DATA_MODULES
    }
    assert into_store == set()


def test_importing_the_console_loads_neither_flask_nor_litellm() -> None:
    code = (
        "import sys, runner.console, runner.console.flask\n"
        "print(sorted(m for m in ('flask', 'litellm', 'django') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
