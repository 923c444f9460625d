"""Agent versions in the store (runner/core/versions.py, docs/deploying.md):
the versions seen, the version each run is on, and a run's move to another.

``runs.version`` is the version of the run's latest execution (NULL until its
first); ``runs.started_version`` the version it started on. A move from one
version to another writes ``runs.version_change`` (what changed, and who
moved it) in the same statement, and a trigger derives the run's ``version``
event from it (store/events.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from store.db import dumps
from store.events import EventType, RunEvent
from store.models import Fence, Run
from store.pg.execution import PgExecution, lost_lease
from store.rows import event_from_row, run_from_row
from store.rules import WAITING_PREFIX
from store.statements import Statement
from store.validate import check_run_id

# The fenced run's version, as its execution found it: its first (the
# version it started on, too), or a move to a new one with what changed.
RECORD_VERSION = Statement(
    "record_version",
    """
    UPDATE runs SET version = CAST(:version AS text),
                    started_version = COALESCE(started_version, CAST(:version AS text)),
                    version_change = CASE WHEN version IS NULL THEN version_change
                                          ELSE CAST(:change AS jsonb) END,
                    updated_at = now()
     WHERE id = CAST(:run_id AS uuid) AND claim_owner = CAST(:owner AS text)
       AND claim_epoch = CAST(:epoch AS int) AND status = 'running'
    RETURNING id
    """,
)

# A version as a worker or an execution loaded it: first seen once, last seen
# at every load.
NOTE_VERSION = Statement(
    "note_version",
    """
    INSERT INTO agent_versions (agent, version, label, policy, definition)
    VALUES (CAST(:agent AS text), CAST(:version AS text), CAST(:label AS text),
            CAST(:policy AS text), CAST(:definition AS jsonb))
    ON CONFLICT (agent, version) DO UPDATE
       SET last_seen = now(), policy = EXCLUDED.policy, label = EXCLUDED.label
    """,
)

AGENT_VERSION = Statement(
    "agent_version",
    """
    SELECT * FROM agent_versions
     WHERE agent = CAST(:agent AS text) AND version = CAST(:version AS text)
    """,
)

AGENT_VERSIONS = Statement(
    "agent_versions",
    """
    SELECT * FROM agent_versions
     WHERE CAST(:agent AS text) IS NULL OR agent = CAST(:agent AS text)
     ORDER BY agent, last_seen DESC, version
    """,
)

# The runs not ended, by agent, version and what they are doing
# (runs_live_version_idx). ``parked``: queued, parked on a limit or waiting for
# a worker of its version.
VERSION_COUNTS = Statement(
    "version_counts",
    """
    SELECT agent, version,
           count(*) FILTER (WHERE status = 'running') AS n_running,
           count(*) FILTER (WHERE status IN ('queued', 'interrupted')
                            AND parked_key IS NULL) AS n_queued,
           count(*) FILTER (WHERE status = 'queued' AND parked_key IS NOT NULL) AS n_parked,
           count(*) FILTER (WHERE status = 'waiting') AS n_waiting
      FROM runs
     WHERE status IN ('queued', 'running', 'waiting', 'interrupted')
       AND (CAST(:agent AS text) IS NULL OR agent = CAST(:agent AS text))
     GROUP BY agent, version
     ORDER BY agent, version NULLS FIRST
    """,
)

# The runs of one version an operator may move: not running (an execution
# holds a running one), not ended.
MOVABLE = Statement(
    "movable_runs",
    """
    SELECT * FROM runs
     WHERE agent = CAST(:agent AS text) AND version = CAST(:version AS text)
       AND status IN ('queued', 'waiting', 'interrupted')
     ORDER BY created_at, id
    """,
)

# One run moved to another version by a person, if it is still where it was
# read: a run parked for a worker of its old version is claimable at once.
MOVE_RUN = Statement(
    "move_run",
    """
    UPDATE runs SET version = CAST(:to AS text), version_change = CAST(:change AS jsonb),
                    retry_at = CASE WHEN parked_key LIKE CAST(:parked_for_version AS text) THEN NULL
                                    ELSE retry_at END,
                    parked_key = CASE WHEN parked_key LIKE CAST(:parked_for_version AS text)
                                      THEN NULL ELSE parked_key END,
                    enqueued_at = CASE WHEN status = 'queued' THEN now() ELSE enqueued_at END,
                    updated_at = now()
     WHERE id = CAST(:run_id AS uuid) AND version = CAST(:from AS text)
       AND status IN ('queued', 'waiting', 'interrupted')
    RETURNING *
    """,
)

# The runs parked for a worker of one of these versions (a worker that serves
# them starts): claimable now.
WAKE_VERSIONS = Statement(
    "wake_versions",
    """
    UPDATE runs SET retry_at = now(), enqueued_at = now(), updated_at = now()
     WHERE parked_key = ANY(CAST(:keys AS text[])) AND status = 'queued'
    RETURNING id, parked_key
    """,
)


# A run's moves to another version, oldest first (run_events' primary key).
VERSION_EVENTS = Statement(
    "version_events",
    """
    SELECT run_id, id, type, data, at FROM run_events
     WHERE run_id = CAST(:run_id AS uuid) AND type = CAST(:type AS text)
     ORDER BY id
    """,
)


@dataclass(frozen=True)
class VersionRecord:
    """A version as the store has it (``agent_versions``)."""

    agent: str
    version: str
    label: str | None
    policy: str
    definition: dict[str, Any]
    first_seen: datetime
    last_seen: datetime

    @property
    def title(self) -> str:
        return f"{self.label} ({self.version})" if self.label else self.version


@dataclass(frozen=True)
class VersionCount:
    """The runs of one agent's version that have not ended, by what they do."""

    agent: str
    version: str | None
    running: int
    queued: int
    parked: int
    waiting: int


def _record(row: Any) -> VersionRecord:
    return VersionRecord(
        agent=row["agent"],
        version=row["version"],
        label=row["label"],
        policy=row["policy"],
        definition=dict(row["definition"] or {}),
        first_seen=row["first_seen"],
        last_seen=row["last_seen"],
    )


class PgVersions(PgExecution):
    def record_version(self, fence: Fence, version: str, change: dict[str, Any] | None) -> None:
        """The fenced run runs on ``version`` (``change``: what changed since
        the version it ran on, and it is a move: the run's version event)."""
        params = {
            "run_id": fence.run_id,
            "owner": fence.owner,
            "epoch": fence.epoch,
            "version": version,
            "change": None if change is None else dumps(change),
        }
        if self.db.first(RECORD_VERSION, params) is None:
            raise lost_lease(fence)
        if change is not None:
            self._committed(fence.run_id)

    def note_versions(self, found: list[dict[str, Any]]) -> None:
        """Record versions loaded (each: agent, version, label, policy, definition)."""
        with self.db.tx() as tx:
            for item in found:
                tx.execute(
                    NOTE_VERSION,
                    {
                        "agent": item["agent"],
                        "version": item["version"],
                        "label": item.get("label"),
                        "policy": item.get("policy") or "continue",
                        "definition": dumps(item["definition"]),
                    },
                )

    def agent_version(self, agent: str, version: str) -> VersionRecord | None:
        row = self.db.first(AGENT_VERSION, {"agent": agent, "version": version})
        return None if row is None else _record(row)

    def agent_versions(self, agent: str | None = None) -> list[VersionRecord]:
        """The versions seen, by agent, the latest loaded first."""
        return [_record(row) for row in self.db.rows(AGENT_VERSIONS, {"agent": agent})]

    def version_events(self, run_id: str) -> list[RunEvent]:
        """The run's moves to another version (its ``version`` events), oldest first."""
        params = {"run_id": check_run_id(run_id), "type": EventType.VERSION.value}
        return [
            event_from_row(row, sealing=self.sealing)
            for row in self.db.rows(VERSION_EVENTS, params)
        ]

    def version_titles(self, agent: str, ids: list[str | None]) -> dict[str, str]:
        """How people read these versions of ``agent``: the label with the
        id where one was recorded, else the id."""
        wanted = {version for version in ids if version}
        found = {r.version: r.title for r in self.agent_versions(agent) if r.version in wanted}
        return {version: found.get(version, version) for version in wanted}

    def version_counts(self, agent: str | None = None) -> list[VersionCount]:
        return [
            VersionCount(
                row["agent"],
                row["version"],
                int(row["n_running"]),
                int(row["n_queued"]),
                int(row["n_parked"]),
                int(row["n_waiting"]),
            )
            for row in self.db.rows(VERSION_COUNTS, {"agent": agent})
        ]

    def movable_runs(self, agent: str, version: str) -> list[Run]:
        """The runs of ``agent`` on ``version`` that are not running nor ended."""
        rows = self.db.rows(MOVABLE, {"agent": agent, "version": version})
        return [run_from_row(row, sealing=self.sealing) for row in rows]

    def move_run(self, run_id: str, old: str, new: str, change: dict[str, Any]) -> Run | None:
        """Move a run that is not running from version ``old`` to ``new``
        (its version event says ``change``); None if it moved on meanwhile."""
        params = {
            "run_id": check_run_id(run_id),
            "from": old,
            "to": new,
            "change": dumps(change),
            "parked_for_version": f"{WAITING_PREFIX}%",
        }
        row = self.db.first(MOVE_RUN, params)
        if row is None:
            return None
        self._committed(run_id)
        return run_from_row(row, sealing=self.sealing)

    def wake_versions(self, keys: list[str]) -> list[tuple[str, str]]:
        """Make the runs parked for a worker of these versions claimable now:
        (run id, key) of each, to send to its version's queue."""
        if not keys:
            return []
        rows = self.db.rows(WAKE_VERSIONS, {"keys": keys})
        return [(str(row["id"]), row["parked_key"]) for row in rows]
