"""``runner.model``, a public path of the core's ``runner/core/model.py``: the model adapter
(``warm_up``, ``serve_scripted_models``)."""

from runner.core.model import *  # noqa: F403
