"""Coordination through Redis: who executes a run (leases, and a claim that
puts a lease in front of the Postgres fencing epoch), the cancel channel, the
workers' beacons, and the live wake-ups of the run-event feed.

Postgres (``store/``) is the authority; Redis only lets a process find out
early, or be woken. ``store/`` imports no Redis.
"""
