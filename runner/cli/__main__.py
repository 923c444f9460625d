"""``python -m runner.cli``: the ``runwright`` command."""

from __future__ import annotations

from runner.cli.commands import main

main()
