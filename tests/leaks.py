"""A test session leaves no process running behind it.

``Watch`` notes every process on the machine when a session starts. When it
ends, a process that is new and was started by the session is a leftover:

* a descendant of the pytest process;
* a process whose environment carries the session's tag (``TAG``), which every
  child inherits, daemons included (redis-server and postgres leave the
  process tree, so being a descendant is not enough);
* a process whose working directory or command line lies in the session's
  temporary folder (for children started with an environment of their own).

Processes of other sessions on the same machine match none of these.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

TAG = "RW_TEST_SESSION"

# Folders whose processes a session left running on purpose, for sessions that
# still use them (a shared local stack); see runner/testing/databases.py StackUse.
_handed_over: list[Path] = []


def hand_over(folder: Path) -> None:
    _handed_over.append(folder.resolve())


def _identity(proc: psutil.Process) -> tuple[int, float]:
    return proc.pid, proc.create_time()


def snapshot() -> set[tuple[int, float]]:
    """Every process on the machine, as (pid, start time): pids are reused."""
    found = set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            found.add(_identity(proc))
    return found


def _within(path: str, roots: Iterable[Path]) -> bool:
    return any(path == str(root) or path.startswith(f"{root}{os.sep}") for root in roots)


def _mentions(arg: str, roots: Iterable[Path]) -> bool:
    return any(f"{root}{os.sep}" in arg or arg.endswith(str(root)) for root in roots)


@dataclass
class Watch:
    """The processes before a session; set ``roots`` once the temporary folder is known."""

    token: str = field(default_factory=lambda: secrets.token_hex(6))
    roots: list[Path] = field(default_factory=list)
    before: set[tuple[int, float]] = field(default_factory=set)
    descendants: bool = True  # count this process's descendants as the session's

    def start(self) -> None:
        """Tag this process's environment (children inherit it) and note every process."""
        # Appended, so that a session started by a test keeps its parent's tag too.
        tags = [t for t in os.environ.get(TAG, "").split(",") if t]
        os.environ[TAG] = ",".join([*tags, self.token])
        self.before = snapshot()

    def _ours(self, proc: psutil.Process, descendants: set[int]) -> bool:
        if proc.pid in descendants:
            return True
        with contextlib.suppress(psutil.Error):
            if self.token in proc.environ().get(TAG, "").split(","):
                return True
        with contextlib.suppress(psutil.Error):
            if _within(proc.cwd(), self.roots):
                return True
        with contextlib.suppress(psutil.Error):
            return any(_mentions(arg, self.roots) for arg in proc.cmdline())
        return False

    def _handed_over(self, proc: psutil.Process) -> bool:
        with contextlib.suppress(psutil.Error):
            return _within(proc.cwd(), _handed_over)
        return False

    def leftovers(self) -> list[psutil.Process]:
        me = psutil.Process()
        descendants = set()
        with contextlib.suppress(psutil.Error):
            if self.descendants:
                descendants = {p.pid for p in me.children(recursive=True)}
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.pid == me.pid or _identity(proc) in self.before:
                    continue
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue  # it has exited; only its exit status is left
            except psutil.Error:
                continue
            if self._ours(proc, descendants) and not self._handed_over(proc):
                found.append(proc)
        return found

    def wait_for_leftovers(self, grace: float = 15) -> list[psutil.Process]:
        """The leftovers once stopping servers had ``grace`` seconds to finish exiting."""
        deadline = time.monotonic() + grace
        while True:
            found = self.leftovers()
            if not found or time.monotonic() >= deadline:
                return found
            time.sleep(0.2)


def describe(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid}: {' '.join(proc.cmdline()) or proc.name()}"
    except psutil.Error:
        return f"pid {proc.pid} (gone)"


def stop(procs: list[psutil.Process]) -> None:
    """End processes the session started and forgot, so that they do not pile up."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=10)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=10)
