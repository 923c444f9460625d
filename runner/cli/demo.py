"""``runwright demo``: the whole product in a minute, on the local stack.

1. A trigger ("App crashes on start") starts a run on a real Celery worker.
2. The agent calls tools, then asks to file a ticket: an effect that waits for
   approval. The notifier writes the token to an inbox file and logs the command
   without it.
3. The demo approves through that same command, as a person would; the run
   completes and the ticket is filed once.
4. A second, longer run starts; its worker is killed (SIGKILL) mid-run; a
   second worker resumes it after the lease lapses, repeating no step.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runner.cli.step_lines import step_line
from runner.cli.terminal import inert
from runner.core.errors import RunwrightError
from runner.core.settings import Settings
from store.status import RunStatus

LEASE_TTL = "3"


class DemoError(RunwrightError):
    """The demo did not go as it should."""


def say(message: str = "") -> None:
    # With RUNWRIGHT_MODEL set, a real model writes some of this text.
    print(inert(message), flush=True)


class Worker:
    def __init__(self, name: str, env: dict[str, str], home: Path) -> None:
        self.name = name
        self.log = home / f"demo-{name}.log"
        self._handle = open(self.log, "wb")  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", *self.args(name)],
            env=env,
            stdout=self._handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    @staticmethod
    def args(name: str) -> list[str]:
        if name == "beat":
            return [
                "beat",
                "-l",
                "INFO",
                "-s",
                str(Settings.from_env().home / "demo-beat"),
            ]
        return [
            "worker",
            "-l",
            "INFO",
            "-n",
            f"{name}@%h",
            "-c",
            "8",
            "--without-gossip",
            "--without-mingle",
        ]

    def wait_ready(self, text: str = " ready.", timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                raise DemoError(f"{self.name} exited; see {self.log}")
            time.sleep(0.2)
        raise DemoError(f"{self.name} did not start in {timeout:.0f} s; see {self.log}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._handle.close()


def _env(settings: Settings) -> dict[str, str]:
    agents = ",".join(dict.fromkeys(["runner.cli.demo_agent", *settings.agents]))
    assert settings.database_url and settings.redis_url and settings.secret_key
    # The demo's own pace, unless the environment already chose one.
    paced = {
        "RUNWRIGHT_LEASE_TTL_SECONDS": LEASE_TTL,
        "RUNWRIGHT_TICK_SECONDS": "1",
        "RUNWRIGHT_QUEUE": "runwright-demo",
    }
    return {
        **paced,
        **os.environ,
        "RUNWRIGHT_DATABASE_URL": settings.database_url,
        "RUNWRIGHT_REDIS_URL": settings.redis_url,
        "RUNWRIGHT_SECRET_KEY": settings.secret_key,
        "RUNWRIGHT_HOME": str(settings.home.resolve()),
        "RUNWRIGHT_AGENTS": agents,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONUNBUFFERED": "1",
    }


def _step_text(step: Any) -> str:
    return step_line(step)


class Follower:
    """Prints a run's new steps and status changes as they happen."""

    def __init__(self, engine: Any, run_id: str) -> None:
        self.engine = engine
        self.run_id = run_id
        self.seen: set[int] = set()
        self.status: Any = None

    def poll(self) -> Any:
        run = self.engine.get_run(self.run_id)
        for step in self.engine.steps(self.run_id):
            if step.id not in self.seen:
                self.seen.add(step.id)
                say("    " + _step_text(step))
        if run.status is not self.status:
            self.status = run.status
            say(f"  -> {run.status.value}")
        return run

    def until(self, predicate: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.poll()
            if predicate(run):
                return run
            time.sleep(0.2)
        raise DemoError(f"timed out waiting for {what}")


def _inbox_entry(path: Path, run_id: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            for line in path.read_text().splitlines():
                entry = json.loads(line)
                if entry["run_id"] == run_id:
                    return dict(entry)
        time.sleep(0.2)
    raise DemoError("the notifier never delivered the approval request")


def _stack_running(base: Settings) -> bool:
    from store.local import LocalStack

    status = LocalStack(base.home).status()
    return bool(status["postgres"] == status["redis"] == "running")


def _say_what_runs(base: Settings, stack_was_running: bool, kept: list[Worker]) -> None:
    """Name what the demo leaves running, and how to stop it."""
    running = [w for w in kept if w.proc.poll() is None]
    if running:
        pids = " ".join(str(w.proc.pid) for w in running)
        say(f"Left running: {', '.join(w.name for w in running)}; stop them with `kill {pids}`.")
    if base.uses_local_stack and _stack_running(base):
        since = "already running before the demo" if stack_was_running else "started by the demo"
        say(
            f"Left running: the local stack ({since}; Postgres and Redis, data in "
            f"{base.home}/); stop it with `runwright local down`."
        )


def run_demo(*, keep: bool = False) -> None:
    base = Settings.from_env()
    stack_was_running = base.uses_local_stack and _stack_running(base)
    if base.uses_local_stack:
        say(f"Starting the local stack (embedded Postgres and Redis) under {base.home}/ ...")
    from runner.core.settings import resolve

    settings = resolve(base)
    from store.migrate import upgrade

    assert settings.database_url
    upgrade(settings.database_url)
    env = _env(settings)
    os.environ.update(env)  # this process enqueues through the same broker and queue
    home = Path(env["RUNWRIGHT_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    for stale in ("demo-inbox.jsonl", "demo-tickets.jsonl", "demo-model-calls.jsonl"):
        (home / stale).unlink(missing_ok=True)

    from runner.cli import demo_agent
    from runner.core.engine.engine import Engine

    model = settings.model
    say(f"Model: {model or 'scripted (set RUNWRIGHT_MODEL and its API key for a real one)'}")
    say("Starting worker A and beat (celery -A tasks worker / beat) ...")
    workers = [Worker("worker-a", env, home), Worker("beat", env, home)]
    try:
        workers[0].wait_ready()
        workers[1].wait_ready("beat: Starting")
        engine = Engine.from_env()
        _first_run(engine, home, demo_agent)
        _second_run(engine, env, home, workers, model is None)
    finally:
        say()
        if keep:
            say(f"Leaving the workers running (logs in {home}/demo-*.log).")
        else:
            for worker in workers:
                worker.stop()
        _say_what_runs(base, stack_was_running, workers if keep else [])
    say()
    say("Demo complete.")


def _first_run(engine: Any, home: Path, demo_agent: Any) -> None:
    from runner.core.steps.history import render_trigger

    say()
    say("1. A trigger starts a run of the 'triage' agent")
    run = engine.start(
        "triage", {"title": "App crashes on start"}, source="demo", trigger="issue.opened"
    )
    say(f"  run {run.id}; its trigger message, the first the model reads:")
    for line in render_trigger(run.trigger).splitlines():
        say("    " + line)
    follow = Follower(engine, run.id)
    follow.until(lambda r: r.status is RunStatus.WAITING, 60, "the approval wait")
    entry = _inbox_entry(demo_agent.INBOX, run.id)
    say(f"  the notifier asked for approval of {entry['tool_name']}({json.dumps(entry['input'])})")

    say()
    say("2. A person approves with the token from the notification:")
    command = [
        "runwright",
        "approve",
        entry["approval_id"],
        "--token",
        entry["token"],
        "--reason",
        "Severity looks right",
    ]
    say("  $ " + " ".join(command[:3]) + " --token <token> --reason 'Severity looks right'")
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", *command[1:]],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=120,
    )
    if done.returncode != 0:
        raise DemoError(f"approve failed: {done.stderr.strip()}")
    say("  " + done.stdout.strip())
    finished = follow.until(lambda r: r.ended, 60, "the run to complete")
    if finished.status is not RunStatus.COMPLETED:
        raise DemoError(f"the run ended {finished.status.value}: {finished.error}")
    tickets = [
        json.loads(line) for line in demo_agent.TICKETS.read_text().splitlines() if run.id in line
    ]
    say(f"  completed: {json.dumps(finished.output)}")
    say(f"  tickets filed by this run: {len(tickets)} ({', '.join(t['ticket'] for t in tickets)})")


def _second_run(
    engine: Any, env: dict[str, str], home: Path, workers: list[Worker], scripted: bool
) -> None:
    say()
    say("3. A longer run; its worker is killed mid-run")
    run = engine.start(
        "triage",
        {"title": "Login page times out", "steps": 8},
        source="demo",
        trigger="issue.opened",
    )
    follow = Follower(engine, run.id)
    follow.until(
        lambda r: (cp := engine.checkpoint(r.id)) is not None and cp.step_index >= 3,
        60,
        "three saved steps",
    )
    saved = engine.checkpoint(run.id).step_index
    say(f"  killing worker A (SIGKILL) after {saved} saved steps ...")
    workers[0].kill()
    say(
        "  starting worker B; it resumes the run once A's lease lapses "
        f"(TTL {env['RUNWRIGHT_LEASE_TTL_SECONDS']} s) and beat's tick() re-enqueues it"
    )
    workers.append(Worker("worker-b", env, home))
    workers[-1].wait_ready()
    finished = follow.until(lambda r: r.ended, 120, "worker B to finish the run")
    if finished.status is not RunStatus.COMPLETED:
        raise DemoError(f"the run ended {finished.status.value}: {finished.error}")
    steps = engine.steps(run.id)
    llm = [s.index for s in steps if s.kind.value == "llm"]
    if llm != sorted(set(llm)):
        raise DemoError(f"a step was recorded twice: {llm}")
    say(f"  completed by worker B: {json.dumps(finished.output)}")
    say(f"  steps recorded: {len(llm)}, each once (1..{max(llm)})")
    if scripted:
        trigger = engine.checkpoint(run.id).messages[0]["content"]
        journal = home / "demo-model-calls.jsonl"
        calls = collections.Counter(
            entry["step"]
            for entry in map(json.loads, journal.read_text().splitlines())
            if entry["trigger"] == trigger
        )
        repeated = [s for s in range(1, saved + 1) if calls[s] != 1]
        if repeated:
            raise DemoError(f"steps {repeated} were sent to the model again")
        say(f"  model calls for the {saved} steps saved before the kill: one each; none repeated")
