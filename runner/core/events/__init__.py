"""A run's events and their live delivery (docs/events.md).

- ``feed.py``: :class:`Feed`, one per engine: publishes the wake-ups and token
  deltas, and follows them for this process's readers.
- ``eventstream.py``: :class:`EventStream`, one reader's replay from the
  store, then the events as they are committed.

The engine registers :meth:`Feed.wake` with its store (``PostgresStore.on_commit``),
so every write that commits events of a run wakes the run's readers.
"""
