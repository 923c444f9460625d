"""The observability integrations: OpenTelemetry traces (``otel.py``, extra
``runwright[otel]``), Prometheus metrics (``metrics.py``, extra
``runwright[metrics]``) and the GenAI names they share (``genai.py``). What
the engine hands its listeners, the :class:`Observer` protocol and the log
listener are the core's (``runner/core/observe/``); they are re-exported here,
their public path."""

from runner.core.observe import *  # noqa: F403
