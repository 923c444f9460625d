"""The engine: agents, tools, the tool loop, executions, approvals, tick, cancel, drain."""
