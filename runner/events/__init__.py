"""A run's events and their live delivery (docs/events.md).

- ``feed.py``: :class:`Feed`, one per engine: publishes the wake-ups and token
  deltas, and follows them for this process's readers.
- ``eventstream.py``: :class:`EventStream`, one reader's replay from the
  store, then the events as they are committed.
- ``live_store.py``: :class:`LiveStore`, the engine's store, waking a run's
  readers after each write that committed events of it.
"""
