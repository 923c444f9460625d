"""What a worker loads (issue 11): importing ``tasks`` and warming a worker up
load the engine only, never the test helpers, the demo or the CLI; the scripted
provider is registered on the first call of a ``scripted/`` model, not before.
Each check runs in a fresh interpreter, whose ``sys.modules`` is the evidence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from runner.core import faults
from tests.services import ROOT

SECRET = "test:test-secret-for-runwright-tests-only"

# Printed by each probe: the runner modules it holds and litellm's providers.
REPORT = """
import gc, json, sys
def report(label):
    litellm = sys.modules.get("litellm")
    providers = [p["provider"] for p in litellm.custom_provider_map] if litellm else None
    mods = sorted(m for m in sys.modules if m.startswith(("runner", "tasks")))
    frozen = gc.get_freeze_count()
    print(json.dumps({"label": label, "modules": mods, "providers": providers, "frozen": frozen}))
"""

TEST_ONLY = ("runner.testing", "runner.cli", "runner.demo", "runner.demo_agent")


def _probe(code: str, env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-c", REPORT + code],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RUNWRIGHT_")}
    return {
        **base,
        "PYTHONPATH": str(ROOT),
        "RUNWRIGHT_HOME": str(tmp_path),
        "RUNWRIGHT_SECRET_KEY": SECRET,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        **extra,
    }


def _test_only(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(TEST_ONLY)]


def test_importing_tasks_and_warming_up_loads_no_test_or_cli_module(tmp_path: Path) -> None:
    # celeryconfig refuses a partial configuration; these URLs are only parsed.
    # Fault points are armed only by a call in a test: no variable arms one
    # (a kill here would end the probe).
    kill_all = ",".join(f"{point}=kill" for point in faults.POINTS)
    env = _env(
        tmp_path,
        RUNWRIGHT_DATABASE_URL="postgresql://postgres@127.0.0.1:1/nowhere",
        RUNWRIGHT_REDIS_URL="redis://127.0.0.1:1/0",
        RUNWRIGHT_FAULTS=kill_all,
        RUNWRIGHT_TEST_FAULTS=kill_all,
    )
    imported, warm = _probe(
        "import tasks\nreport('import')\n"
        "from runner.core.model import warm_up\nwarm_up()\nreport('warm')\n"
        "from runner.core import faults\n"
        "for point in faults.POINTS:\n    faults.hit(point)\n",
        env,
        tmp_path,
    )
    assert {"tasks.app", "runner.core.engine.engine"} <= set(imported["modules"])
    assert _test_only(imported["modules"]) == []
    assert "runner.core.model" in warm["modules"]
    assert _test_only(warm["modules"]) == []
    assert warm["providers"] == []  # litellm is loaded, with no scripted provider
    # Only a worker takes its heap out of the collector's reach, not a web
    # process that imports tasks to start runs.
    assert imported["frozen"] == warm["frozen"] == 0


def test_a_worker_warm_up_loads_no_test_or_cli_module(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    """The worker's own warm-up (Celery's worker_init signal): litellm, the
    engine on a real database and Redis, the agents; still no test module.
    Then it freezes what it loaded (issue 16)."""
    env = _env(tmp_path, RUNWRIGHT_DATABASE_URL=database_url, RUNWRIGHT_REDIS_URL=redis_url)
    (warm,) = _probe(
        "import tasks\nfrom celery import signals\n"
        "signals.worker_init.send(sender=None)\n"
        "assert tasks.engine().deps.registry is not None\n"
        "tasks.engine().close()\n"
        "report('worker')\n",
        env,
        tmp_path,
    )
    assert "runner.core.engine.engine" in warm["modules"]
    assert _test_only(warm["modules"]) == []
    assert warm["providers"] == []
    # The heap it loaded (litellm above all) is out of the collector's full
    # passes: far more objects than the few thousand of the interpreter alone.
    assert warm["frozen"] > 100_000, warm["frozen"]


def test_the_scripted_provider_is_registered_on_first_use(tmp_path: Path) -> None:
    before, after = _probe(
        "import asyncio\n"
        "from runner.core import model\n"
        "model.warm_up()\n"
        "report('before')\n"
        "from runner.testing import ScriptedModel, text\n"
        "ScriptedModel('first-use', [text('hello')])\n"
        "reply = asyncio.run(model.complete('scripted/first-use', "
        "[{'role': 'user', 'content': 'hi'}], [], {}))\n"
        "assert reply.message['content'] == 'hello', reply\n"
        "report('after')\n",
        _env(tmp_path),
        tmp_path,
    )
    assert before["providers"] == []
    assert "runner.testing" not in before["modules"]
    assert after["providers"] == ["scripted"]


def test_the_console_and_the_evaluations_load_no_test_module(tmp_path: Path) -> None:
    """The console's Evaluations pages import the evaluations' modules; a
    replay loads the kit's scripted model only when it replays from a
    recording, so a console process never plugs it in."""
    (loaded,) = _probe(
        "import runner.console.views, runner.evals.evaluation, runner.evals.replay\n"
        "report('console')\n",
        _env(tmp_path),
        tmp_path,
    )
    assert "runner.evals.evaluation" in loaded["modules"]
    assert _test_only(loaded["modules"]) == []
    assert not loaded["providers"]  # litellm not even loaded, or without the scripted provider
