"""Schedules: runs that start themselves at their times (docs/triggers.md).

- ``times.py``: when a schedule fires (cron through ``cronsim``, intervals,
  jitter, the catch-up window), computed without the store.
- ``book.py``: ``engine.schedules``, which makes and changes them, and what
  ``tick()`` does to fire them (the store's part: store/pg/schedules.py).
"""
