"""An OpenAI-compatible chat-completions server on loopback that answers at
once, in a process of its own, for the benchmarks that call a model over HTTP
(litellm's real provider path). A process of its own: its Python would
otherwise share the measured process's GIL.

    python -m bench.model_server [--steps N]   # prints its port, then serves

It answers a request with a tool call of ``fetch`` (``{"n": step}``) until
the request's history holds ``steps - 1`` assistant messages, then with
``done``; 10 tokens in and 5 out each time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from tests.provider import Provider, answer, tool_calls


def script(steps: int, tool: str) -> Any:
    def reply(step: int, body: dict[str, Any]) -> dict[str, Any]:
        if step < steps:
            return tool_calls((f"call_{step}", tool, {"n": step}))
        return answer("done")

    return reply


@contextlib.contextmanager
def serving(steps: int, tool: str = "fetch") -> Iterator[str]:
    """The server in a subprocess, for the ``with`` block: its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.model_server", "--steps", str(steps), "--tool", tool],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tool", default="fetch")
    args = parser.parse_args()
    provider = Provider(script(args.steps, args.tool)).start()
    provider.requests = _Forgetful()  # a benchmark's thousands of requests are not kept
    print(json.dumps(provider.port), flush=True)
    while True:
        time.sleep(3600)


class _Forgetful(list[Any]):
    def append(self, item: Any) -> None:
        return None


if __name__ == "__main__":
    main()
