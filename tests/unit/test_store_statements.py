"""The store's SQL is written once, whole (issue 50, item 3): every statement is
one literal, no SQL is assembled from f-string fragments, the rules several
statements share are written alike in each, and every status (or other enum
value) the SQL spells is one its enum has."""

from __future__ import annotations

import ast
import importlib
import io
import pkgutil
import re
import tokenize
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path

import pytest

from store import events, pg, schema, statements
from store.models import (
    Decision,
    EffectOutcome,
    EffectStatus,
    EvaluationCaseStatus,
    EvaluationStatus,
    FiringOutcome,
    OnDeny,
    Overlap,
    RequestKind,
    StepKind,
)
from store.pg import base
from store.status import CANCELLABLE, CLAIMABLE, ENDED, KEY_HOLDING, Interruption, RunStatus
from tests.services import ROOT

STORE = ROOT / "store"
FROZEN = STORE / "migrations"  # records of the schema at their revision

# The driver plumbing that writes SQL around a statement it is handed, and the
# local stack's CREATE DATABASE (a name, which no parameter can be).
PLUMBING = {"store/db.py", "store/statements.py", "store/local.py"}
SQL_WORDS = re.compile(
    r"\b(SELECT|INSERT INTO|UPDATE|DELETE FROM|WHERE|SET|VALUES|RETURNING|IN \(|AND|OR|"
    r"FROM|JOIN|nextval|CREATE|DROP)\b"
)


def modules() -> Iterator[Path]:
    for path in sorted(STORE.rglob("*.py")):
        if FROZEN not in path.parents:
            yield path


def assembled_sql(path: Path) -> list[str]:
    """Where ``path`` builds SQL from pieces: an f-string, a ``+`` or a
    ``%``/``.format`` of SQL text, or a statement whose SQL is not one literal
    (adjacent literals are pieces too)."""
    found = []
    source = path.read_text()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        texts: list[str] = []
        if isinstance(node, ast.JoinedStr):
            texts = [v.value for v in node.values if isinstance(v, ast.Constant)]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
            texts = [
                side.value
                for side in (node.left, node.right)
                if isinstance(side, ast.Constant) and isinstance(side.value, str)
            ]
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(".format"):
            texts = [ast.unparse(node.func)]
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "Statement":
            sql = node.args[1] if len(node.args) > 1 else None
            whole = isinstance(sql, ast.Constant) and isinstance(sql.value, str)
            if not whole or len(string_tokens(ast.get_source_segment(source, sql) or "")) != 1:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: a statement not one literal")
            continue
        if any(SQL_WORDS.search(text) for text in texts):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)[:60]}")
    return found


def string_tokens(source: str) -> list[str]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [token.string for token in tokens if token.type == tokenize.STRING]


def test_every_statement_is_one_literal_and_no_sql_is_assembled() -> None:
    found = [
        place
        for path in modules()
        if str(path.relative_to(ROOT)) not in PLUMBING
        for place in assembled_sql(path)
    ]
    assert found == []


def test_the_assembly_scan_finds_fstrings_joins_and_statements_of_pieces(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "FENCE = 'id = 1'\n"
        'A = Statement("a", f"UPDATE runs SET x = 1 WHERE {FENCE}")\n'
        'B = Statement("b", "SELECT 1 FROM runs WHERE " + FENCE)\n'
        "C = 'SELECT * FROM runs WHERE {}'.format(FENCE)\n"
        'D = Statement("d", "SELECT 1" " FROM runs")\n'
        'E = f"run {FENCE} cancelled"\n'
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        lines = sorted(int(place.split(":")[1]) for place in assembled_sql(sample))
    finally:
        ROOT = saved
    # A twice (the statement, and its f-string), B twice, C once, D (two
    # literals side by side) once; E is prose.
    assert lines == [2, 2, 3, 3, 4, 5]


def all_statements() -> list[statements.Statement]:
    names = [f"{pg.__name__}.{info.name}" for info in pkgutil.iter_modules(pg.__path__)]
    found: dict[int, statements.Statement] = {}
    for name in [*names, "store.summary"]:
        for value in vars(importlib.import_module(name)).values():
            if isinstance(value, statements.Statement):
                found[id(value)] = value
    assert len(found) >= 100, "the scan found no statements"
    return list(found.values())


def words(sql: str) -> str:
    """``sql`` with its layout gone: one space between words, none inside brackets."""
    return " ".join(sql.split()).replace("( ", "(").replace(" )", ")").replace(" ,", ",")


# The rules several statements share (store/pg/base.py): a statement that
# shows a rule's mark writes the whole rule, the same words as the rule.
RULES = {
    "the clock": (base.NOW, re.compile(r":now\b")),
    "the fence": (base.FENCE, re.compile(r"claim_owner\s*=\s*CAST\(:owner AS text\)\s+AND")),
    "what an outcome writes": (base.OUTCOME_SET, re.compile(r":o_status\b")),
    "what progress resets": (
        base.PROGRESS_ENDS_RETRY,
        re.compile(r"takeovers\s*=\s*0,\s*retry_attempts"),
    ),
    "what a waiting run waits for": (base.OPEN_WAITS, re.compile(r"FROM approvals AS oa\b")),
    "a run with its first pending wait": (base.RUN_WITH_WAIT, re.compile(r"AS w_approval_id\b")),
}
# The rule of open waits is written for the run by id, and for each of a list (p.id).
RUN_IDS = ("CAST(:run_id AS uuid)", "p.id")


def copies(sql: str, rule: str) -> int:
    text = words(sql)
    variants = {words(rule.replace(RUN_IDS[0], run_id)) for run_id in RUN_IDS}
    return sum(text.count(variant) for variant in variants)


@pytest.mark.parametrize("rule", RULES)
def test_a_shared_rule_is_written_alike_in_every_statement_that_applies_it(rule: str) -> None:
    text, mark = RULES[rule]
    applying = [s for s in all_statements() if mark.search(s.sql)]
    assert applying, f"no statement applies {rule}"
    # Every mark of the rule is inside a whole copy of it: none stands alone.
    differing = [
        s.name
        for s in applying
        if len(mark.findall(words(s.sql))) != copies(s.sql, text) * len(mark.findall(words(text)))
    ]
    assert differing == []


def test_the_rule_check_finds_a_copy_that_drifted() -> None:
    drifted = base.OUTCOME_SET.replace("ELSE 0 END", "ELSE 1 END")
    assert copies(f"UPDATE runs SET {drifted} WHERE id = 1", base.OUTCOME_SET) == 0
    assert copies(f"UPDATE runs SET {base.OUTCOME_SET} WHERE id = 1", base.OUTCOME_SET) == 1


# Each column that holds an enum's value, by (table, column).
ENUMS: dict[tuple[str, str], type[StrEnum]] = {
    ("runs", "status"): RunStatus,
    ("run_attempts", "status"): RunStatus,
    ("runs", "interrupted_reason"): Interruption,
    ("effects", "status"): EffectStatus,
    ("effects", "resolved_outcome"): EffectOutcome,
    ("steps", "kind"): StepKind,
    ("approvals", "decision"): Decision,
    ("approvals", "kind"): RequestKind,
    ("approvals", "on_deny"): OnDeny,
    ("schedules", "overlap"): Overlap,
    ("schedule_firings", "outcome"): FiringOutcome,
    ("evaluations", "status"): EvaluationStatus,
    ("evaluation_cases", "status"): EvaluationCaseStatus,
}
COLUMNS = {column for _, column in ENUMS}
TABLES = {table for table, _ in ENUMS}
# The groups of statuses the rules name (store/status.py), as SQL lists them.
GROUPS = {
    frozenset(group)
    for group in (
        ENDED,
        KEY_HOLDING,
        CLAIMABLE,
        CANCELLABLE,
        set(RunStatus) - ENDED,
        set(RunStatus),
    )
}
# The quoted words of the SQL that are no enum's value: JSON keys and types,
# a key's separator, JSON literals.
NOT_ENUM_VALUES = {
    ":",
    "[]",
    "{}",
    '{"resumed": true}',
    # What erasure keeps and strips (store/pg/erasure.py): JSON keys and values.
    '{"erased": true}',
    '{"usage_estimated": true}',
    "answer",
    "arguments",
    "keys",
    "object",
    "reason",
    "true",
    "usage_estimated",
    "array",
    "id",
    "message",
    "null",
    "mcp_tools",
    "step",
    "tool_calls",
    # The sealed columns' tables and names, and a sealed value's JSON type
    # (store/pg/keys.py, store/pg/erasure.py).
    "approvals",
    "body",
    "data",
    "dataset_cases",
    "evaluation_cases",
    "result",
    "effects",
    "error",
    "messages",
    "output",
    "payload",
    "run_events",
    "runs",
    "schedules",
    "steps",
    "string",
    "trigger",
}

TABLE = re.compile(r"\b(?:UPDATE|FROM|INTO|JOIN)\s+(\w+)(?:\s+AS\s+(\w+))?", re.IGNORECASE)
COMPARED = re.compile(
    r"(?:\b(\w+)\.)?\b(\w+)\s*(?:=|<>|!=)\s*'([^']*)'"
    r"|(?:\b(\w+)\.)?\b(\w+)\s+(NOT\s+)?IN\s*\(('[^)]*)\)",
    re.IGNORECASE,
)


def enum_values_in(sql: str, where: str, *, every_quoted: bool = True) -> list[str]:
    """What is wrong with the enum values ``sql`` spells: a value its column's
    enum lacks, a list of run statuses that is no group the rules name or is
    out of the enum's order; and with ``every_quoted``, a quoted word that is
    no enum's value (the trigger functions quote JSON keys)."""
    wrong = []
    aliases = {}
    for match in TABLE.finditer(sql):
        aliases[match.group(1)] = match.group(1)
        if match.group(2):
            aliases[match.group(2)] = match.group(1)
    aliases.update(NEW="runs", OLD="runs")  # a trigger function's rows (store/events.py)
    known = {value.value for enum in ENUMS.values() for value in enum}
    for text in statements._QUOTED.finditer(sql):
        quoted = text.group(0)
        if every_quoted and quoted.startswith("'"):
            value = quoted[1:-1].replace("''", "'")
            if value not in known and value not in NOT_ENUM_VALUES:
                wrong.append(f"{where}: {value!r} is no enum's value")
    for match in COMPARED.finditer(sql):
        qualifier = match.group(1) or match.group(4)
        column = match.group(2) or match.group(5)
        if column not in COLUMNS:
            continue
        if qualifier is None:  # the table the clause reads or writes: the last one
            # named before it, else the first after it (a select list).
            before = [m.group(1) for m in TABLE.finditer(sql[: match.start()])]
            after = [m.group(1) for m in TABLE.finditer(sql[match.end() :])]
            tables = [t for t in [*reversed(before), *after] if t in TABLES]
            table = tables[0] if tables else None
        else:
            table = aliases.get(qualifier)
        enum = ENUMS.get((table or "", column))
        if enum is None:
            wrong.append(f"{where}: no enum for {qualifier or table}.{column}")
            continue
        if match.group(3) is not None:
            values = [match.group(3)]
        else:
            values = re.findall(r"'([^']*)'", match.group(7))
        lacking = [v for v in values if v not in {e.value for e in enum}]
        if lacking:
            wrong.append(f"{where}: {table}.{column} {lacking} not in {enum.__name__}")
        elif enum is RunStatus and len(values) > 1:
            group = [RunStatus(v) for v in values]
            if frozenset(group) not in GROUPS or group != sorted(group, key=list(RunStatus).index):
                wrong.append(f"{where}: {values} is no group of store/status.py in its order")
    return wrong


def schema_sql() -> dict[str, str]:
    """The SQL of the schema's constraints, index predicates and trigger functions."""
    found = {}
    for table in schema.metadata.tables.values():
        for constraint in table.constraints:
            text = getattr(constraint, "sqltext", None)
            if text is not None:
                found[str(constraint.name)] = f"SELECT 1 FROM {table.name} WHERE {text}"
        for index in table.indexes:
            predicate = index.dialect_options["postgresql"].get("where")
            if predicate is not None:
                found[str(index.name)] = f"SELECT 1 FROM {table.name} WHERE {predicate}"
    for name, create, _ in events.TRIGGERS:
        found[name] = create
    return found


def test_every_enum_value_the_sql_spells_is_its_enums() -> None:
    wrong = [w for s in all_statements() for w in enum_values_in(s.sql, s.name)]
    wrong += [
        w
        for name, sql in schema_sql().items()
        for w in enum_values_in(sql, name, every_quoted=False)
    ]
    for rule, (text, _) in RULES.items():
        wrong += enum_values_in(f"SELECT {text} FROM runs", rule)
    assert wrong == []


def test_the_enum_check_finds_a_misspelt_or_misplaced_status() -> None:
    sql = """
    UPDATE runs AS r SET status = 'queud'
      FROM effects AS e
     WHERE e.status IN ('started', 'done') AND r.status IN ('failed', 'completed')
       AND r.status IN ('queued', 'waiting') AND kind = 'llm'
    """
    assert enum_values_in(sql, "t") == [
        "t: 'queud' is no enum's value",
        "t: runs.status ['queud'] not in RunStatus",
        "t: effects.status ['done'] not in EffectStatus",
        "t: ['failed', 'completed'] is no group of store/status.py in its order",
        "t: ['queued', 'waiting'] is no group of store/status.py in its order",
        "t: no enum for effects.kind",
    ]


def test_a_constraint_on_an_enum_column_lists_its_enum_whole_in_order() -> None:
    checked = set()
    for table in schema.metadata.tables.values():
        for constraint in table.constraints:
            text = str(getattr(constraint, "sqltext", ""))
            match = re.search(r"\b(\w+) IN \(([^)]*)\)", text)
            if match is None or (table.name, match.group(1)) not in ENUMS:
                continue
            enum = ENUMS[(table.name, match.group(1))]
            assert re.findall(r"'([^']*)'", match.group(2)) == [e.value for e in enum], text
            checked.add((table.name, match.group(1)))
    assert checked >= {("runs", "status"), ("effects", "status"), ("steps", "kind")}
