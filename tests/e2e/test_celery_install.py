"""Runwright on a project's own Celery app (``runner.celery.install``, issue 25),
with real ``celery worker`` and ``celery beat`` processes of that app: the
Celery tutorial's layout and Django's. And ``celery -A tasks`` in a folder
whose own ``tasks.py`` shadows Runwright's, which must refuse to start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from store.models import RunStatus
from store.postgres import PostgresStore
from tests.e2e.cluster import Proc, wait_until

AGENTS = """
from runner import Agent
from runner.testing import ScriptedModel, text

model = ScriptedModel("installed", [text("done in the project's worker")])
Agent(name="installed", model=model.model)
"""

# --------------------------------------------------- the tutorial's layout

TUTORIAL_TASKS = """
from pathlib import Path

from celery import Celery

from runner.celery import install

app = Celery("tasks")
app.config_from_object("celeryconfig")


@app.task
def note(path, text):
    Path(path).write_text(text)


install(app)
"""

TUTORIAL_CONFIG = """
import os

broker_url = os.environ["PROJECT_BROKER_URL"]
broker_connection_retry_on_startup = True
task_ignore_result = True
"""

# A process of the project that starts runs (its web app, say): it imports
# the app that installed Runwright, and the engine sends through it.
TUTORIAL_CLIENT = """
import tasks
"""

# ------------------------------------------------------- Django's layout

DJANGO_SETTINGS = """
import os
from pathlib import Path

SECRET_KEY = "test-only"
INSTALLED_APPS = ["notes"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(Path(__file__).resolve().parent.parent / "db.sqlite3"),
    }
}
USE_TZ = True
CELERY_BROKER_URL = os.environ["PROJECT_BROKER_URL"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
"""

DJANGO_CELERY = """
import os

from celery import Celery

from runner.celery import enqueue, install  # noqa: F401  (RUNWRIGHT_ENQUEUE=proj.celery:enqueue)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
install(app)
"""

DJANGO_INIT = """
from .celery import app as celery_app

__all__ = ("celery_app",)
"""

DJANGO_NOTES_TASKS = """
from pathlib import Path

from celery import shared_task


@shared_task
def note(path, text):
    Path(path).write_text(text)
"""

DJANGO_CLIENT = """
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
django.setup()
from notes import tasks
"""

# Then, in either project: one run started and enqueued through the project's
# app, one created and never sent (only a tick can hand it to a worker), and
# one of the project's own tasks.
CLIENT_RUNS = """
import json, sys
from runner import Engine

sent = Engine.from_env().start("installed", {"n": 1})
unsent = Engine.from_env(enqueue=None).start("installed", {"n": 2})
tasks.note.delay(sys.argv[1], "the project's own task ran")
print(json.dumps({"sent": sent.id, "unsent": unsent.id}))
"""


@dataclass(frozen=True)
class Project:
    root: Path
    app: str  # what `celery -A` names
    enqueue: str  # RUNWRIGHT_ENQUEUE for its processes
    client: str
    # RUNWRIGHT_ENQUEUE names the app's module, so the `runwright` CLI
    # imports the app (and Runwright with it) to start runs.
    cli_starts_runs: bool = False


def _tutorial(root: Path) -> Project:
    (root / "tasks.py").write_text(TUTORIAL_TASKS)
    (root / "celeryconfig.py").write_text(TUTORIAL_CONFIG)
    (root / "agents.py").write_text(AGENTS)
    return Project(root, "tasks", "runner.celery:enqueue", TUTORIAL_CLIENT)


def _django(root: Path) -> Project:
    (root / "proj").mkdir()
    (root / "proj" / "__init__.py").write_text(DJANGO_INIT)
    (root / "proj" / "settings.py").write_text(DJANGO_SETTINGS)
    (root / "proj" / "celery.py").write_text(DJANGO_CELERY)
    (root / "notes").mkdir()
    (root / "notes" / "__init__.py").write_text("")
    (root / "notes" / "tasks.py").write_text(DJANGO_NOTES_TASKS)
    (root / "agents.py").write_text(AGENTS)
    return Project(root, "proj", "proj.celery:enqueue", DJANGO_CLIENT, cli_starts_runs=True)


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for proc in reversed(started):
        proc.stop()


_NOT_THE_PROJECTS = ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "EXAMPLE_DJANGO_DB")


def _project_env(proc_env: dict[str, str], redis_url: str, project: Project) -> dict[str, str]:
    # The project's own processes: Runwright as installed, the project's
    # folder first on the import path (as `python -m celery` puts it), and no
    # Django settings but the project's own (the suite's Django tests set
    # DJANGO_SETTINGS_MODULE in this process, which Celery's Django fixup reads).
    env = {k: v for k, v in proc_env.items() if k not in _NOT_THE_PROJECTS}
    return {
        **env,
        "PROJECT_BROKER_URL": redis_url,
        "RUNWRIGHT_AGENTS": "agents",
        "RUNWRIGHT_ENQUEUE": project.enqueue,
        "RUNWRIGHT_TICK_SECONDS": "0.5",
        "RUNWRIGHT_REENQUEUE_SECONDS": "1",
        "RUNWRIGHT_HOME": str(project.root / ".runwright"),
        "PYTHONUNBUFFERED": "1",
    }


def _celery(project: Project, *args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", project.app, *args, "-l", "INFO"]


@pytest.mark.parametrize("layout", [_tutorial, _django], ids=["tutorial", "django"])
def test_a_project_app_that_installs_runwright_runs_its_runs_tasks_and_ticks(
    layout: Callable[[Path], Project],
    tmp_path: Path,
    proc_env: dict[str, str],
    database_url: str,
    redis_url: str,
    procs: list[Proc],
) -> None:
    root = tmp_path / "project"
    root.mkdir()
    project = layout(root)
    env = _project_env(proc_env, redis_url, project)

    def start(name: str, *args: str, ready: str) -> Proc:
        proc = Proc(name, _celery(project, *args), env, tmp_path, cwd=root)
        procs.append(proc)
        proc.wait_for(ready, timeout=90)
        return proc

    gossip = ("--without-gossip", "--without-mingle")
    # The project's own fleet, on Celery's default pool and queue: it takes
    # none of Runwright's tasks, so it is not refused for its prefork pool.
    start(
        "own-worker", "worker", "-n", "own@%h", "-P", "prefork", "-c", "1", *gossip, ready=" ready."
    )
    runwright_worker = start(
        "runwright-worker",
        "worker",
        "-n",
        "runwright@%h",
        "-Q",
        "runwright",
        "-P",
        "threads",
        "-c",
        "4",
        "--prefetch-multiplier",
        "1",
        *gossip,
        ready=" ready.",
    )
    beat = start("beat", "beat", "-s", str(tmp_path / "beat-schedule"), ready="beat: Starting")

    done_path = tmp_path / "note.txt"
    client = subprocess.run(
        [sys.executable, "-c", project.client + CLIENT_RUNS, str(done_path)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert client.returncode == 0, client.stderr[-3000:]
    ids = json.loads(client.stdout.strip().splitlines()[-1])
    if project.cli_starts_runs:
        cli = subprocess.run(
            [str(Path(sys.executable).parent / "runwright"), "start", "installed"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert cli.returncode == 0, cli.stderr[-3000:]
        ids["cli"] = cli.stdout.split()[1]  # "run <id> (installed) is queued"

    store = PostgresStore.from_url(database_url)
    try:

        def completed(run_id: str) -> bool:
            return store.get_run(run_id).status is RunStatus.COMPLETED

        enqueued = [run_id for name, run_id in ids.items() if name != "unsent"]
        wait_until(lambda: all(map(completed, enqueued)), 60, "the enqueued runs to complete")
        # Only a tick re-enqueues the unsent run: beat sent runwright.tick,
        # and the project's Runwright worker executed it.
        wait_until(lambda: completed(ids["unsent"]), 60, "a tick to hand on the unsent run")
        for run_id in ids.values():
            assert store.get_run(run_id).output == "done in the project's worker"
    finally:
        store.close()
    wait_until(done_path.exists, 30, "the project's own task to run")
    assert done_path.read_text() == "the project's own task ran"
    assert "Sending due task runwright-tick (runwright.tick)" in beat.log()
    wait_until(lambda: "tick: reenqueued 1" in runwright_worker.log(), 10, "the tick's log line")
    own = procs[0].log()
    assert "Task runwright.execute[" not in own and "Task runwright.tick[" not in own, own[-3000:]


UNRELATED_TASKS = """
import os

from celery import Celery

app = Celery("tasks", broker=os.environ["PROJECT_BROKER_URL"])


@app.task
def add(x, y):
    return x + y
"""


@pytest.mark.parametrize("command", ["worker", "beat"])
def test_celery_a_tasks_in_a_folder_with_an_unrelated_tasks_py_exits_in_one_line(
    command: str, tmp_path: Path, proc_env: dict[str, str], redis_url: str
) -> None:
    (tmp_path / "tasks.py").write_text(UNRELATED_TASKS)
    env = {k: v for k, v in proc_env.items() if k not in _NOT_THE_PROJECTS[1:]}
    env.update(PROJECT_BROKER_URL=redis_url, PYTHONUNBUFFERED="1")
    args = [sys.executable, "-m", "celery", "-A", "tasks", command, "-l", "INFO"]
    stderr = tmp_path / "stderr.log"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=err, start_new_session=True
        )
        try:
            code = proc.wait(60)  # the old code started the app, and ran on
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(10)
            assert proc.stdout is not None
            stdout = proc.stdout.read().decode()
            proc.stdout.close()
    line = stderr.read_text()
    assert code != 0
    assert line.strip().count("\n") == 0, line
    assert f"`celery -A tasks` started {tmp_path / 'tasks.py'}" in line
    assert "shadows Runwright's module 'tasks'" in line
    assert "runner.celery.install(app)" in line
    assert " ready." not in stdout and "Starting" not in stdout, stdout
