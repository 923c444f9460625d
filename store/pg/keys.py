"""The keys of encryption at rest, as the store holds their work:
``runwright keys status`` (how many values each key seals, and how many are
in clear) and ``runwright keys rotate`` (every value sealed under the first
key of the ring, a batch at a time).

A batch is one transaction: it locks the rows it takes (``FOR UPDATE SKIP
LOCKED``: a row a worker holds is left for the next pass, and no worker
waits on it for long), opens and seals their values in Python, and writes
them back in one statement. Batches go in key order from where the last
ended, so a rotation stopped anywhere resumes by starting again: a value
already under the first key is not touched. Only the payload columns
change: no status, time or event moves (store/events.py), so workers
running meanwhile see nothing but their own rows locked for a moment.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from store.db import dumps
from store.models import RequestKind, StepKind
from store.pg.base import PgBase
from store.sealing import PREFIX, CannotDecrypt, Sealing
from store.statements import Statement

# How many values each key seals (``key`` NULL: in clear), by table and column.
KEY_COUNTS = Statement(
    "key_counts",
    """
    WITH v (tbl, col, value) AS (
        SELECT 'runs', c.col, c.value FROM runs AS t CROSS JOIN LATERAL (VALUES
               ('trigger', t.trigger -> 'payload'), ('output', t.output),
               ('state', t.state)) AS c(col, value)
        UNION ALL
        SELECT 'messages', 'body', body FROM messages
        UNION ALL
        SELECT 'steps', c.col, c.value FROM steps AS t CROSS JOIN LATERAL (VALUES
               ('input', CASE WHEN t.kind <> CAST(:llm AS text) THEN t.input END),
               ('output', t.output), ('error', t.error)) AS c(col, value)
        UNION ALL
        SELECT 'effects', c.col, c.value FROM effects AS t CROSS JOIN LATERAL (VALUES
               ('input', t.input), ('output', t.output)) AS c(col, value)
        UNION ALL
        SELECT 'approvals', c.col, c.value FROM approvals AS t CROSS JOIN LATERAL (VALUES
               ('input', t.input), ('arguments', t.arguments), ('answer', t.answer),
               ('reason', to_json(t.reason))) AS c(col, value)
        UNION ALL
        SELECT 'schedules', 'payload', payload FROM schedules
        UNION ALL
        SELECT 'dataset_cases', 'data', data FROM dataset_cases
        UNION ALL
        SELECT 'evaluation_cases', 'result', result FROM evaluation_cases
        UNION ALL
        SELECT 'run_events', c.col, CAST(c.value AS json)
          FROM run_events AS t CROSS JOIN LATERAL (VALUES
               ('input', t.data -> 'input'), ('arguments', t.data -> 'arguments'),
               ('answer', t.data -> 'answer'), ('reason', t.data -> 'reason')) AS c(col, value)
         WHERE t.type = CAST(:approval AS text)
    )
    SELECT tbl, col,
           CASE WHEN json_typeof(value) = 'string'
                 AND left(value #>> '{}', length(CAST(:marker AS text))) = CAST(:marker AS text)
                THEN split_part(value #>> '{}', ':', 2) END AS key,
           count(*) AS n
      FROM v WHERE json_typeof(value) <> 'null'
     GROUP BY 1, 2, 3
     ORDER BY 1, 2, 3
    """,
)

# Each table's rows with a payload not under the key :prefix names, after
# :after in key order, locked (those a worker holds are skipped).
RESEAL_RUNS = Statement(
    "reseal_runs",
    """
    SELECT id, trigger, output, state FROM runs
     WHERE id > CAST(:after AS uuid)
       AND ((left((trigger -> 'payload') #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM
             CAST(:prefix AS text) AND json_typeof(trigger -> 'payload') <> 'null')
         OR (left(output #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
             AND json_typeof(output) <> 'null')
         OR (left(state #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
             AND json_typeof(state) <> 'null'))
     ORDER BY id
     LIMIT CAST(:limit AS int)
       FOR UPDATE SKIP LOCKED
    """,
)

WRITE_RUNS = Statement(
    "write_resealed_runs",
    """
    UPDATE runs AS r
       SET trigger = n.trigger,
           output = CASE WHEN r.output IS NULL THEN NULL ELSE n.output END,
           state = CASE WHEN r.state IS NULL THEN NULL ELSE n.state END
      FROM json_to_recordset(CAST(:rows AS json)) AS n(id uuid, trigger json, output json,
                                                       state json)
     WHERE r.id = n.id
    """,
)

RESEAL_MESSAGES = Statement(
    "reseal_messages",
    """
    SELECT run_id, seq, body FROM messages
     WHERE (run_id, seq) > (CAST(:after AS uuid), CAST(:after_seq AS int))
       AND left(body #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
       AND json_typeof(body) <> 'null'
     ORDER BY run_id, seq
     LIMIT CAST(:limit AS int)
       FOR UPDATE SKIP LOCKED
    """,
)

WRITE_MESSAGES = Statement(
    "write_resealed_messages",
    """
    UPDATE messages AS m SET body = n.body
      FROM json_to_recordset(CAST(:rows AS json)) AS n(run_id uuid, seq int, body json)
     WHERE m.run_id = n.run_id AND m.seq = n.seq
    """,
)

RESEAL_STEPS = Statement(
    "reseal_steps",
    """
    SELECT run_id, id, kind, index, tool_call_id, input, output, error FROM steps
     WHERE (run_id, id) > (CAST(:after AS uuid), CAST(:after_id AS bigint))
       AND ((kind <> CAST(:llm AS text)
             AND left(input #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
             AND json_typeof(input) <> 'null')
         OR (left(output #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
             AND json_typeof(output) <> 'null')
         OR (left(error #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
             AND json_typeof(error) <> 'null'))
     ORDER BY run_id, id
     LIMIT CAST(:limit AS int)
       FOR UPDATE SKIP LOCKED
    """,
)

WRITE_STEPS = Statement(
    "write_resealed_steps",
    """
    UPDATE steps AS s
       SET input = CASE WHEN s.input IS NULL THEN NULL ELSE n.input END,
           output = CASE WHEN s.output IS NULL THEN NULL ELSE n.output END,
           error = CASE WHEN s.error IS NULL THEN NULL ELSE n.error END
      FROM json_to_recordset(CAST(:rows AS json)) AS n(run_id uuid, id bigint, input json,
                                                       output json, error json)
     WHERE s.run_id = n.run_id AND s.id = n.id
    """,
)

RESEAL_EFFECTS = Statement(
    "reseal_effects",
    """
    SELECT run_id, key, input, output FROM effects
     WHERE (run_id, key) > (CAST(:after AS uuid), CAST(:after_key AS text))
       AND ((left(input #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
             AND json_typeof(input) <> 'null')
         OR (left(output #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
             AND json_typeof(output) <> 'null'))
     ORDER BY run_id, key
     LIMIT CAST(:limit AS int)
       FOR UPDATE SKIP LOCKED
    """,
)

WRITE_EFFECTS = Statement(
    "write_resealed_effects",
    """
    UPDATE effects AS e
       SET input = CASE WHEN e.input IS NULL THEN NULL ELSE n.input END,
           output = CASE WHEN e.output IS NULL THEN NULL ELSE n.output END
      FROM json_to_recordset(CAST(:rows AS json)) AS n(run_id uuid, key text, input json,
                                                       output json)
     WHERE e.run_id = n.run_id AND e.key = n.key
    """,
)

RESEAL_APPROVALS = Statement(
    "reseal_approvals",
    """
    SELECT approval_id, input, arguments, answer, reason FROM approvals
     WHERE approval_id > CAST(:after AS uuid)
       AND ((left(input #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
             AND json_typeof(input) <> 'null')
         OR (left(reason, CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
             AND reason IS NOT NULL)
         OR (left(arguments #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
             AND json_typeof(arguments) <> 'null')
         OR (left(answer #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
             AND json_typeof(answer) <> 'null'))
     ORDER BY approval_id
     LIMIT CAST(:limit AS int)
       FOR UPDATE SKIP LOCKED
    """,
)

# No approval event moves: its trigger fires on a decision only.
WRITE_APPROVALS = Statement(
    "write_resealed_approvals",
    """
    UPDATE approvals AS a
       SET input = CASE WHEN a.input IS NULL THEN NULL ELSE n.input END,
           arguments = CASE WHEN a.arguments IS NULL THEN NULL ELSE n.arguments END,
           answer = CASE WHEN a.answer IS NULL THEN NULL ELSE n.answer END,
           reason = n.reason
      FROM json_to_recordset(CAST(:rows AS json)) AS n(approval_id uuid, input json,
                                                       arguments json, answer json, reason text)
     WHERE a.approval_id = n.approval_id
    """,
)

RESEAL_SCHEDULES = Statement(
    "reseal_schedules",
    """
    SELECT name, payload FROM schedules
     WHERE name > CAST(:after AS text)
       AND left(payload #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
       AND json_typeof(payload) <> 'null'
     ORDER BY name
     LIMIT CAST(:limit AS int)
       FOR UPDATE SKIP LOCKED
    """,
)

WRITE_SCHEDULES = Statement(
    "write_resealed_schedules",
    """
    UPDATE schedules AS s SET payload = n.payload
      FROM json_to_recordset(CAST(:rows AS json)) AS n(name text, payload json)
     WHERE s.name = n.name
    """,
)

RESEAL_DATASET_CASES = Statement(
    "reseal_dataset_cases",
    """
    SELECT name, version, position, data FROM dataset_cases
     WHERE (name, version, position) > (CAST(:after AS text), CAST(:after_version AS text),
                                        CAST(:after_position AS int))
       AND left(data #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
       AND json_typeof(data) <> 'null'
     ORDER BY name, version, position
     LIMIT CAST(:limit AS int)
       FOR UPDATE SKIP LOCKED
    """,
)

WRITE_DATASET_CASES = Statement(
    "write_resealed_dataset_cases",
    """
    UPDATE dataset_cases AS d SET data = n.data
      FROM json_to_recordset(CAST(:rows AS json)) AS n(name text, version text, position int,
                                                       data json)
     WHERE d.name = n.name AND d.version = n.version AND d.position = n.position
    """,
)

RESEAL_EVALUATION_CASES = Statement(
    "reseal_evaluation_cases",
    """
    SELECT evaluation_id, position, result FROM evaluation_cases
     WHERE (evaluation_id, position) > (CAST(:after AS text), CAST(:after_position AS int))
       AND left(result #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM CAST(:prefix AS text)
       AND json_typeof(result) <> 'null'
     ORDER BY evaluation_id, position
     LIMIT CAST(:limit AS int)
       FOR UPDATE SKIP LOCKED
    """,
)

WRITE_EVALUATION_CASES = Statement(
    "write_resealed_evaluation_cases",
    """
    UPDATE evaluation_cases AS c SET result = n.result
      FROM json_to_recordset(CAST(:rows AS json)) AS n(evaluation_id text, position int,
                                                       result json)
     WHERE c.evaluation_id = n.evaluation_id AND c.position = n.position
    """,
)

# An approval event carries its approval's payloads as the row had them.
RESEAL_EVENTS = Statement(
    "reseal_events",
    """
    SELECT id, data FROM run_events
     WHERE id > CAST(:after AS bigint) AND type = CAST(:approval AS text)
       AND ((left((data -> 'input') #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM
             CAST(:prefix AS text) AND jsonb_typeof(data -> 'input') <> 'null')
         OR (left((data -> 'arguments') #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM
             CAST(:prefix AS text) AND jsonb_typeof(data -> 'arguments') <> 'null')
         OR (left((data -> 'answer') #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM
             CAST(:prefix AS text) AND jsonb_typeof(data -> 'answer') <> 'null')
         OR (left((data -> 'reason') #>> '{}', CAST(:plen AS int)) IS DISTINCT FROM
             CAST(:prefix AS text) AND jsonb_typeof(data -> 'reason') <> 'null'))
     ORDER BY id
     LIMIT CAST(:limit AS int)
       FOR UPDATE SKIP LOCKED
    """,
)

WRITE_EVENTS = Statement(
    "write_resealed_events",
    """
    UPDATE run_events AS e SET data = n.data
      FROM json_to_recordset(CAST(:rows AS json)) AS n(id bigint, data jsonb)
     WHERE e.id = n.id
    """,
)

# The first key in order of every table's primary key.
_START: Mapping[str, tuple[Any, ...]] = {
    "runs": ("00000000-0000-0000-0000-000000000000",),
    "messages": ("00000000-0000-0000-0000-000000000000", -1),
    "steps": ("00000000-0000-0000-0000-000000000000", -1),
    "effects": ("00000000-0000-0000-0000-000000000000", ""),
    "approvals": ("00000000-0000-0000-0000-000000000000",),
    "schedules": ("",),
    "run_events": (-1,),
    "dataset_cases": ("", "", -1),
    "evaluation_cases": ("", -1),
}
SEALED_TABLES = tuple(_START)


@dataclass(frozen=True)
class KeyCount:
    """How many values of ``table.column`` the key ``key`` seals (None: in clear)."""

    table: str
    column: str
    key: str | None
    values: int


@dataclass
class Resealed:
    """What one batch of a table did: rows rewritten, values sealed under the
    first key in them, rows whose values no key of the ring opens (left as
    they are, each with the reason), and where the next batch starts (None:
    the table is done)."""

    table: str
    rows: int = 0
    values: int = 0
    unreadable: list[str] = field(default_factory=list)
    after: tuple[Any, ...] | None = None


class _Counting(Sealing):
    """A sealing that counts the values its :meth:`reseal` changed."""

    def __init__(self, sealing: Sealing) -> None:
        super().__init__(sealing.cipher)
        self.changed = 0

    def reseal(self, value: Any, table: str, column: str, *row: object) -> Any:
        done = super().reseal(value, table, column, *row)
        self.changed += done is not value
        return done


def _reseal_run(s: Sealing, r: Mapping[str, Any]) -> dict[str, Any]:
    run_id = str(r["id"])
    trigger = dict(r["trigger"])
    if "payload" in trigger:
        trigger["payload"] = s.reseal(trigger["payload"], "runs", "trigger", run_id)
    return {
        "id": run_id,
        "trigger": trigger,
        "output": s.reseal(r["output"], "runs", "output", run_id),
        "state": s.reseal(r["state"], "runs", "state", run_id),
    }


def _reseal_message(s: Sealing, r: Mapping[str, Any]) -> dict[str, Any]:
    run_id = str(r["run_id"])
    body = s.reseal(r["body"], "messages", "body", run_id, r["seq"])
    return {"run_id": run_id, "seq": r["seq"], "body": body}


def _reseal_step(s: Sealing, r: Mapping[str, Any]) -> dict[str, Any]:
    run_id = str(r["run_id"])
    row = (run_id, r["index"], r["kind"], r["tool_call_id"])
    done = {"run_id": run_id, "id": r["id"]}
    for column in ("input", "output", "error"):
        value = r[column]
        if not (column == "input" and r["kind"] == StepKind.LLM.value):
            value = s.reseal(value, "steps", column, *row)
        done[column] = value
    return done


def _reseal_effect(s: Sealing, r: Mapping[str, Any]) -> dict[str, Any]:
    run_id = str(r["run_id"])
    return {
        "run_id": run_id,
        "key": r["key"],
        "input": s.reseal(r["input"], "effects", "input", run_id, r["key"]),
        "output": s.reseal(r["output"], "effects", "output", run_id, r["key"]),
    }


def _reseal_approval(s: Sealing, r: Mapping[str, Any]) -> dict[str, Any]:
    approval_id = str(r["approval_id"])
    done: dict[str, Any] = {"approval_id": approval_id}
    for column in ("input", "arguments", "answer", "reason"):
        done[column] = s.reseal(r[column], "approvals", column, approval_id)
    return done


def _reseal_schedule(s: Sealing, r: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": r["name"], "payload": s.reseal(r["payload"], "schedules", "payload", r["name"])}


def _reseal_dataset_case(s: Sealing, r: Mapping[str, Any]) -> dict[str, Any]:
    row = (r["name"], r["version"], r["position"])
    return {
        "name": r["name"],
        "version": r["version"],
        "position": r["position"],
        "data": s.reseal(r["data"], "dataset_cases", "data", *row),
    }


def _reseal_evaluation_case(s: Sealing, r: Mapping[str, Any]) -> dict[str, Any]:
    row = (r["evaluation_id"], r["position"])
    return {
        "evaluation_id": r["evaluation_id"],
        "position": r["position"],
        "result": s.reseal(r["result"], "evaluation_cases", "result", *row),
    }


def _reseal_event(s: Sealing, r: Mapping[str, Any]) -> dict[str, Any]:
    data = dict(r["data"])
    for column in ("input", "arguments", "answer", "reason"):
        if data.get(column) is not None:
            data[column] = s.reseal(data[column], "approvals", column, str(data["approval_id"]))
    return {"id": r["id"], "data": data}


@dataclass(frozen=True)
class _Table:
    select: Statement
    write: Statement
    reseal: Callable[[Sealing, Mapping[str, Any]], dict[str, Any]]
    key: tuple[str, ...]  # the primary key's columns, in order
    after: tuple[str, ...]  # their parameters in ``select``


_TABLES: Mapping[str, _Table] = {
    "runs": _Table(RESEAL_RUNS, WRITE_RUNS, _reseal_run, ("id",), ("after",)),
    "messages": _Table(
        RESEAL_MESSAGES, WRITE_MESSAGES, _reseal_message, ("run_id", "seq"), ("after", "after_seq")
    ),
    "steps": _Table(
        RESEAL_STEPS, WRITE_STEPS, _reseal_step, ("run_id", "id"), ("after", "after_id")
    ),
    "effects": _Table(
        RESEAL_EFFECTS, WRITE_EFFECTS, _reseal_effect, ("run_id", "key"), ("after", "after_key")
    ),
    "approvals": _Table(
        RESEAL_APPROVALS, WRITE_APPROVALS, _reseal_approval, ("approval_id",), ("after",)
    ),
    "schedules": _Table(RESEAL_SCHEDULES, WRITE_SCHEDULES, _reseal_schedule, ("name",), ("after",)),
    "run_events": _Table(RESEAL_EVENTS, WRITE_EVENTS, _reseal_event, ("id",), ("after",)),
    "dataset_cases": _Table(
        RESEAL_DATASET_CASES,
        WRITE_DATASET_CASES,
        _reseal_dataset_case,
        ("name", "version", "position"),
        ("after", "after_version", "after_position"),
    ),
    "evaluation_cases": _Table(
        RESEAL_EVALUATION_CASES,
        WRITE_EVALUATION_CASES,
        _reseal_evaluation_case,
        ("evaluation_id", "position"),
        ("after", "after_position"),
    ),
}


class PgKeys(PgBase):
    def key_counts(self) -> list[KeyCount]:
        """How many payload values each key seals, and how many are in clear,
        by table and column (``runwright keys status``); a full read of the
        payload tables."""
        params = {
            "llm": StepKind.LLM.value,
            "approval": RequestKind.APPROVAL.value,
            "marker": f"{PREFIX}:",
        }
        return [
            KeyCount(r["tbl"], r["col"], r["key"], int(r["n"]))
            for r in self.db.rows(KEY_COUNTS, params)
        ]

    def reseal(
        self, table: str, after: tuple[Any, ...] | None = None, *, limit: int = 500
    ) -> Resealed:
        """One batch of ``runwright keys rotate``: up to ``limit`` rows of
        ``table`` after ``after`` (its primary key; None: from the start)
        whose payloads are not all under the ring's first key, sealed under
        it, in one transaction. Raises :class:`CannotDecrypt` without a ring."""
        cipher = self.sealing.cipher
        if cipher is None:
            raise CannotDecrypt(
                "RUNWRIGHT_ENCRYPTION_KEYS is not set: there is no key to seal with"
            )
        spec = _TABLES[table]
        prefix = f"{PREFIX}:{cipher.current}:"
        params: dict[str, Any] = dict(zip(spec.after, after or _START[table], strict=True))
        params.update(
            prefix=prefix,
            plen=len(prefix),
            limit=limit,
            llm=StepKind.LLM.value,
            approval=RequestKind.APPROVAL.value,
        )
        done = Resealed(table)
        counting = _Counting(self.sealing)
        with self.db.tx() as tx:
            rows = tx.rows(spec.select, params)
            written = []
            for row in rows:
                before = counting.changed
                try:
                    written.append(spec.reseal(counting, row))
                except CannotDecrypt as exc:
                    counting.changed = before
                    done.unreadable.append(exc.message)
            if written:
                tx.execute(spec.write, {"rows": dumps(written)})
        done.rows = len(written)
        done.values = counting.changed
        if len(rows) == limit:
            last = rows[-1]
            done.after = tuple(
                str(last[c]) if isinstance(last[c], uuid.UUID) else last[c] for c in spec.key
            )
        return done
