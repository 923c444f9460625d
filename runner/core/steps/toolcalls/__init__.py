"""One step's tool calls, a module per concern, so that a change to one
touches one file:

- ``calls.py``: :class:`CallRunner`, the step's calls sorted to their concern,
  then the calls that may run invoked side by side;
- ``gate.py``: approvals (asked, standing), refusals, edited arguments, and the
  model's questions to people;
- ``effects.py``: the journal of effects (begin, finish, unknown, reconcile);
- ``invocation.py``: one call's run: the race with the run's abort (timeout,
  cancel, drain), retries, the tool pool's thread or the MCP session;
- ``delegation.py``: child tools' calls and the child runs they start;
- ``results.py``: each call's result, made fit to store.

Model output is untrusted: an unknown tool, arguments that are not JSON or do
not fit the schema, and a tool that raises all become tool error results the
model sees. Tool output is untrusted too: it is made storable (see
``store.jsonsafe``) or, if it cannot be, becomes a tool error. None of them
crashes the run.
"""

from runner.core.steps.toolcalls.calls import CallRunner
from runner.core.steps.toolcalls.effects import OUTCOME_UNKNOWN, RECONCILED_NOT_DONE, RESOLVED
from runner.core.steps.toolcalls.invocation import ABORT_GRACE_SECONDS
from runner.core.steps.toolcalls.results import (
    MAX_RESULT_CHARS,
    CallResult,
    StepCalls,
    Stored,
    storable,
)

__all__ = [
    "ABORT_GRACE_SECONDS",
    "MAX_RESULT_CHARS",
    "OUTCOME_UNKNOWN",
    "RECONCILED_NOT_DONE",
    "RESOLVED",
    "CallResult",
    "CallRunner",
    "StepCalls",
    "Stored",
    "storable",
]
