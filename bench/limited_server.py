"""An OpenAI-compatible chat-completions server on loopback that enforces
requests and tokens per minute as a provider does (``tests.provider``'s
:class:`~tests.provider.ProviderLimits`: a 429 with ``retry-after`` past
them), in a process of its own, for ``bench.flow``. A process of its own: its
Python would otherwise share the measuring process's GIL.

    python -m bench.limited_server --rpm N --tpm N [--completion-tokens N]

It prints its port, then serves, and reads commands on its standard input:
``limit RPM TPM`` puts fresh, full buckets in force (``limit 0 0``: none);
``record`` prints, as one JSON line, every request since the last ``record``
(``[seconds since the epoch, status, tokens used]``, tokens 0 for a 429).
A run of the agent ``bench.agents`` names ``flow`` is two steps: a tool call
of ``note``, then an answer; each answer reports ``--completion-tokens``
completion tokens and its prompt's tokens as litellm counts them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from tests.provider import Provider, ProviderLimits, Served, answer, count_prompt, tool_calls

# A request as recorded: (seconds since the epoch, status, tokens used).
Record = tuple[float, int, int]


def _script(step: int, body: dict[str, Any]) -> dict[str, Any]:
    if step < 2:
        return tool_calls((f"call_{step}", "note", {"n": step}))
    return answer("noted")


class _Recorded(ProviderLimits):
    """The provider's limits, noting the tokens each admitted request used."""

    def __init__(self, rpm: int | None, tpm: int | None, log: list[Record]) -> None:
        super().__init__(rpm, tpm)
        self.log = log

    def settle(self, taken: int, used: int) -> None:
        super().settle(taken, used)
        self.log.append((time.time(), 200, used))


class LimitedServer(Provider):
    """The loopback provider with its requests kept as :data:`Record`\\ s only
    (not their bodies): answered ones when their tokens are counted, refused
    ones when they are refused."""

    def __init__(self, completion_tokens: int) -> None:
        super().__init__(_script)
        self.usage = {"prompt_tokens": 0, "completion_tokens": completion_tokens}
        self.log: list[Record] = []

    def set_limits(self, rpm: int, tpm: int) -> None:
        with self._lock:
            self.limits = _Recorded(rpm or None, tpm or None, self.log) if rpm or tpm else None

    def take(self) -> list[Record]:
        with self._lock:
            taken, self.log[:] = list(self.log), []
        return taken

    def _record(self, step: int, status: int, body: dict[str, Any]) -> Served:
        served = Served(time.time(), step, status, {})
        if status != 200 or self.limits is None:
            # Answered ones under limits are noted with their tokens (_Recorded).
            with self._lock:
                self.log.append((served.at, status, 0))
        return served


class Client:
    """The server in a subprocess: :attr:`base_url`, :meth:`limit`, :meth:`records`."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._lock = threading.Lock()

    def _ask(self, line: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        with self._lock:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
            return self.process.stdout.readline()

    def limit(self, rpm: int, tpm: int) -> None:
        """Fresh, full buckets of ``rpm`` and ``tpm`` (0 and 0: no limits)."""
        assert self._ask(f"limit {rpm} {tpm}").strip() == "ok"

    def records(self) -> list[Record]:
        """Every request since the last call."""
        return [tuple(r) for r in json.loads(self._ask("record"))]  # type: ignore[misc]


@contextlib.contextmanager
def serving(completion_tokens: int) -> Iterator[Client]:
    """The server in a subprocess, for the ``with`` block, with no limits yet."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.limited_server",
            "--completion-tokens",
            str(completion_tokens),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield Client(process, int(process.stdout.readline()))
    finally:
        process.terminate()
        process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpm", type=int, default=0)
    parser.add_argument("--tpm", type=int, default=0)
    parser.add_argument("--completion-tokens", type=int, default=20)
    args = parser.parse_args()
    # Import litellm and load its token counter now: done at the first request
    # under limits, it held that burst for seconds, and its requests were
    # counted (and recorded) later than they were sent.
    count_prompt({"model": "flow-bench", "messages": [{"role": "user", "content": "warm"}]})
    server = LimitedServer(args.completion_tokens)
    server.set_limits(args.rpm, args.tpm)
    server.start()
    print(json.dumps(server.port), flush=True)
    for line in sys.stdin:
        command, *numbers = line.split()
        if command == "limit":
            server.set_limits(*(int(n) for n in numbers))
            print("ok", flush=True)
        elif command == "record":
            print(json.dumps(server.take()), flush=True)
    server.stop()


if __name__ == "__main__":
    main()
