"""The MCP test server (tests/mcp_servers.py) on streamable HTTP, in a process
of the test's own that the test stops, starts, and makes refuse every request
401 (a credential that expired under an open session); and the calls the
server logged."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from store.local import free_port
from tests.services import ROOT


class HttpServer:
    def __init__(self, folder: Path) -> None:
        self.log = folder / "http-calls.jsonl"
        self._flag = folder / "http-refuse"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp_servers", "http", str(self.port)],
            cwd=ROOT,
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT),
                 "RUNWRIGHT_TEST_MCP_LOG": str(self.log),
                 "RUNWRIGHT_TEST_MCP_REFUSE": str(self._flag)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "the MCP test server never listened"
                assert self.proc.poll() is None, "the MCP test server exited"
                time.sleep(0.1)

    def refuse(self, refusing: bool = True) -> None:
        """From now on (or no longer), every request is answered 401."""
        if refusing:
            self._flag.touch()
        else:
            self._flag.unlink(missing_ok=True)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


def serving(folder: Path) -> Iterator[HttpServer]:
    """A fixture's body: the server, started, and stopped at the end."""
    server = HttpServer(folder)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def calls(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line]
