"""Replay and evaluation from the journal (docs/replay-and-evals.md).

- :mod:`runner.evals.recording`: a run as the journal recorded it, and cases;
- :mod:`runner.evals.sandbox`: where replays execute, apart from real runs;
- :mod:`runner.evals.serving`: the tools of a replay, served from the recording;
- :mod:`runner.evals.replay`: one replay and its report;
- :mod:`runner.evals.scorers`: what an evaluation asks of each case;
- :mod:`runner.evals.summary` and :mod:`runner.evals.compare`: per scorer,
  and case by case against another evaluation;
- :mod:`runner.evals.evaluation` and :mod:`runner.evals.worker`: the runner
  and its worker processes, which claim cases one at a time.

An integration, like the command line and the console: it drives an engine,
and the core never imports it. It loads the testing kit's scripted model
only for a replay from a recording.
"""
