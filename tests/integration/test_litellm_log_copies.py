"""litellm copies no message list for its log unless the host asks, checked in
a fresh interpreter (the rest of litellm's set-up:
tests/unit/test_litellm_setup.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from runner.core import model

_PROBE = (
    "from runner.core import model\n"
    "model._load()\n"
    "from litellm.litellm_core_utils import logging_utils\n"
    "print(logging_utils.MAX_BASE64_LENGTH_FOR_LOGGING)\n"
)


def _base64_limit(**env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if k != model.BASE64_LOGGING_VARIABLE}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(json.loads(done.stdout.strip().splitlines()[-1]))


def test_litellm_copies_no_message_list_for_its_log_unless_the_host_asks() -> None:
    assert _base64_limit() == 0
    assert _base64_limit(**{model.BASE64_LOGGING_VARIABLE: "64"}) == 64
