"""Replay and evaluation from the journal (docs/replay-and-evals.md).

- :mod:`runner.evals.recording`: a run as the journal recorded it, and cases;
- :mod:`runner.evals.sandbox`: where replays execute, apart from real runs;
- :mod:`runner.evals.serving`: the tools of a replay, served from the recording;
- :mod:`runner.evals.replay`: one replay and its report.
"""
