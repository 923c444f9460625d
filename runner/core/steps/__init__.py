"""The step loop and its tool calls.

- ``step_loop.py``: :class:`StepLoop`, the steps of one execution: the model
  call and its journal write, the tool calls, the step's commit.
- ``toolcalls/``: one step's tool calls, a module per concern: the gate (approvals),
  the journal of effects, the invocation (the race with the run's abort).
- ``tools.py``: what a tool is (``@tool``, ``@effect``, :class:`Tool`).
- ``builtin_tools.py``: the tools the engine adds (state, final result).
- ``history.py``: the run's message history, from the trigger on, and what of
  it the model is sent.
- ``run_context.py``: what a tool sees of its run (:class:`RunContext`), and
  the run's abort signal.
"""
