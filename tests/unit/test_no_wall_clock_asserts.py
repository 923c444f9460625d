"""Tests check order and state; how long things take is for the benchmarks
(bench/). An assertion on elapsed wall-clock time passes on a quiet machine
and fails on a busy one (the suite on two cores, or over eight processes),
and says nothing the order of events would not say better.

This scans tests/ for assertions that compare an elapsed time: a difference
of clock reads (``time.monotonic()``, ``perf_counter()``, ``time.time()``, a
loop's ``time()``, ``utcnow()``, ``datetime.now()``), a name bound to one, or
``(end - start).total_seconds()`` against a bound. Waiting for a condition
up to a deadline (``assert time.monotonic() < deadline, "never came"``) is a
safety net, not a measure, and is not flagged. What truly cannot be said
otherwise is allowed below, each with its reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent

# (file under tests/, function) -> why its assertion on elapsed time stays.
# Each is an order of instants, not a bound on how long something took: a
# busy machine cannot break it.
ALLOWED: dict[tuple[str, str], str] = {
    ("e2e/test_metrics.py", "test_a_workers_metrics_match_its_runs"): (
        "ages a worker reports (the oldest approval's, the last tick's) lie between "
        "the ages of the same instants read by the test before and after the scrape; "
        "a worker's clock is not one the test can move"
    ),
    ("e2e/test_setup.py", "test_a_run_whose_agent_no_worker_knows_fails_after_the_grace"): (
        "a lower bound on the store's own timestamps: the run failed no sooner than "
        "the grace of real workers, whose clock the test cannot move"
    ),
    (
        "e2e/test_watchdog.py",
        "test_after_a_redis_restart_a_worker_says_when_tick_last_ran_not_never",
    ): (
        "the worker's log gives an age, not an instant: the tick it dates from came "
        "after beat started, which no worker uptime could satisfy"
    ),
}

CLOCKS = {"monotonic", "perf_counter", "time", "utcnow", "now", "monotonic_ns", "time_ns"}


def _is_clock_read(node: ast.AST) -> bool:
    """``time.monotonic()``, ``loop.time()``, ``utcnow()``, ``datetime.now(UTC)``..."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in {"monotonic", "perf_counter", "utcnow", "monotonic_ns"}
    if isinstance(func, ast.Attribute) and func.attr in CLOCKS:
        owner = ast.unparse(func.value)
        if func.attr == "now":
            return owner in {"datetime", "datetime.datetime"}
        if func.attr == "time":
            return owner == "time" or owner.endswith("loop") or owner.endswith("loop()")
        return True
    return False


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _timed(node: ast.AST, timed: set[str]) -> bool:
    """Whether ``node`` reads a clock, or a name that holds a clock's reading."""
    return any(_is_clock_read(n) for n in ast.walk(node)) or bool(_names(node) & timed)


def _offset(node: ast.AST, offsets: set[str]) -> bool:
    """A fixed amount of time: a number, a ``timedelta(...)``, a name bound
    to one, or sums of them."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in offsets
    if isinstance(node, ast.Call):
        return ast.unparse(node.func).split(".")[-1] == "timedelta"
    if isinstance(node, ast.UnaryOp):
        return _offset(node.operand, offsets)
    if isinstance(node, ast.BinOp):
        return _offset(node.left, offsets) and _offset(node.right, offsets)
    return False


def _elapsed(node: ast.AST, timed: set[str], elapsed: set[str], offsets: set[str]) -> bool:
    """Whether ``node`` holds an elapsed time: a difference between a clock
    reading and another instant (not a clock reading less a fixed amount,
    which is an instant), or a name bound to one."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Sub):
            left, right = _timed(sub.left, timed), _timed(sub.right, timed)
            if (left and not _offset(sub.right, offsets)) or (
                right and not _offset(sub.left, offsets)
            ):
                return True
        if isinstance(sub, ast.Name) and sub.id in elapsed:
            return True
    return False


def _measured_span(node: ast.AST, spans: set[str]) -> bool:
    """``(end - start).total_seconds()``, or ``waited.total_seconds()`` of a
    name bound to such a difference: a span between two instants."""
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "total_seconds"
        ):
            of = sub.func.value
            if isinstance(of, ast.BinOp) and isinstance(of.op, ast.Sub):
                return True
            if isinstance(of, ast.Name) and of.id in spans:
                return True
    return False


def _spans(tree: ast.AST, offsets: set[str]) -> set[str]:
    """The names bound to a difference of two instants (neither a fixed amount)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.BinOp)
            and isinstance(node.value.op, ast.Sub)
            and not _offset(node.value.left, offsets)
            and not _offset(node.value.right, offsets)
        ):
            found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return found


def _bindings(tree: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """The names that hold a clock's reading (``began = time.monotonic()``,
    ``seen.append(time.monotonic())``), those that hold an elapsed time
    (``took = time.monotonic() - began``) and those that hold a fixed amount
    (``hour = timedelta(hours=1)``), to a fixed point."""
    timed: set[str] = set()
    elapsed: set[str] = set()
    offsets: set[str] = set()
    while True:
        before = (len(timed), len(elapsed), len(offsets))
        for node in ast.walk(tree):
            targets: list[ast.AST] = []
            value: ast.AST | None = None
            if isinstance(node, ast.Assign):
                targets, value = list(node.targets), node.value
            elif isinstance(node, ast.AnnAssign | ast.AugAssign) and node.value is not None:
                targets, value = [node.target], node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"append", "add"}
                and node.args
            ):
                targets, value = [node.func.value], node.args[0]
            if value is None:
                continue
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if _offset(value, offsets) and not isinstance(value, ast.Constant):
                offsets |= names
            elif _elapsed(value, timed, elapsed, offsets):
                elapsed |= names
            elif _timed(value, timed):
                timed |= names
        if (len(timed), len(elapsed), len(offsets)) == before:
            return timed, elapsed, offsets


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node


def wall_clock_asserts(path: Path) -> list[tuple[str, int, str]]:
    """``(function, line, source)`` of each assertion in ``path`` that
    compares an elapsed wall-clock time."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, int, str]] = []
    for name, function in _functions(tree):
        timed, elapsed, offsets = _bindings(function)
        spans = _spans(function, offsets)
        for node in ast.walk(function):
            if not isinstance(node, ast.Assert):
                continue
            for compare in ast.walk(node.test):
                if not isinstance(compare, ast.Compare):
                    continue
                operands = [compare.left, *compare.comparators]
                ordering = any(
                    isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in compare.ops
                )
                if any(_elapsed(o, timed, elapsed, offsets) for o in operands) or (
                    ordering and any(_measured_span(o, spans) for o in operands)
                ):
                    found.append((name, node.lineno, ast.unparse(node.test)[:120]))
                    break
    return found


def test_no_test_asserts_on_elapsed_wall_clock_time() -> None:
    scanned = sorted(TESTS.rglob("*.py"))
    assert len(scanned) > 100, "the scan found no tests"
    found = []
    for path in scanned:
        relative = str(path.relative_to(TESTS))
        for function, line, source in wall_clock_asserts(path):
            if (relative, function) not in ALLOWED:
                found.append(f"tests/{relative}:{line} ({function}): assert {source}")
    assert found == [], (
        "assert order and state, or drive a clock the test controls; how long "
        "things take is for bench/ (a slow machine is not a failure):\n" + "\n".join(found)
    )


def test_every_allowed_assertion_is_still_there() -> None:
    """An entry of ALLOWED whose assertion is gone goes too."""
    for (relative, function), reason in ALLOWED.items():
        assert reason, (relative, function)
        found = {name for name, _, _ in wall_clock_asserts(TESTS / relative)}
        assert function in found, f"tests/{relative}: {function} no longer needs its allowance"


def test_the_scan_finds_elapsed_time_and_leaves_safety_nets(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "import time\n"
        "def test_measured():\n"
        "    began = time.monotonic()\n"
        "    work()\n"
        "    assert time.monotonic() - began < 2.0\n"
        "def test_took():\n"
        "    began = time.perf_counter()\n"
        "    took = time.perf_counter() - began\n"
        "    assert 0.9 <= took < 3.0, f'{took:.1f} s'\n"
        "def test_marks():\n"
        "    seen = []\n"
        "    seen.append(time.monotonic())\n"
        "    returned = time.monotonic()\n"
        "    assert returned - seen[0] < 1.0\n"
        "def test_span(steps):\n"
        "    start = min(s.started_at for s in steps)\n"
        "    end = max(s.finished_at for s in steps)\n"
        "    assert (end - start).total_seconds() < 1.5\n"
        "def test_waited(log):\n"
        "    waited = logged_at(log, 'b') - logged_at(log, 'a')\n"
        "    assert waited.total_seconds() < 5, waited\n"
        "def test_safety_net():\n"
        "    deadline = time.monotonic() + 30\n"
        "    while not done():\n"
        "        assert time.monotonic() < deadline, 'never came'\n"
        "def test_state(run):\n"
        "    assert run.expires_at - run.created_at == DAY\n"
        "def test_instant(run):\n"
        "    hour = timedelta(hours=1)\n"
        "    assert run.created_at > (datetime.now(UTC) - hour)\n"
        "    earlier = time.time() - 600\n"
        "    assert run.next_at > datetime.now(UTC) - timedelta(seconds=1) > earlier\n"
    )
    assert [name for name, _, _ in wall_clock_asserts(sample)] == [
        "test_measured",
        "test_took",
        "test_marks",
        "test_span",
        "test_waited",
    ]
