"""The ``runwright`` command line and the demo, apart from the engine core.

The engine (``runner``) never imports this package; it imports the engine. A
worker imports it only if ``RUNWRIGHT_AGENTS`` names the demo's agents
(``runner.cli.demo_agent``).
"""

from __future__ import annotations

from runner.cli.commands import main

__all__ = ["main"]
