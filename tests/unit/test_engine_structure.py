"""The engine's structure: imports run one way (``tasks -> runner -> store``,
never back), no import cycle inside ``runner/`` or ``tasks/``, the engine core
apart from its integrations (the CLI and the demo, the console, SSE) and the
test helpers, the public names and documented import paths in place, and a
fully typed public ``Engine``. A module is as long as its one concern needs:
there is no line limit.

The import rule: every ``import`` statement of a module counts, wherever it
stands (module level, inside a function, under ``TYPE_CHECKING``), since each
is a dependency that a refactoring has to respect. ``from pkg import name``
counts as an import of ``pkg.name`` when that is a module, else of ``pkg``.
Importing ``pkg.sub`` does not count as importing ``pkg``'s ``__init__``: a
package ``__init__`` that re-exports its submodules (``runner/__init__.py``,
``runner/cli/__init__.py``) is a façade over them, and what the rule forbids
is a submodule taking a name from its package's ``__init__``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runner.core.engine.engine import Engine
from tests.services import ROOT

PACKAGES = ("runner", "store", "tasks")
# The layers, lowest first: a module imports its own layer or a lower one.
LAYERS = ("store", "runner", "tasks")
# The tree: the engine core is ``runner/core/``; beside it in ``runner/`` are
# its integrations, clients of its API, and the public paths of a few core
# modules, each nothing but a re-export of one (``FACADES``).
CORE = "runner.core"
INTEGRATIONS = (
    "runner.celery",
    "runner.celery_plugin",
    "runner.chat",
    "runner.evals",
    "runner.cli",
    "runner.console",
    "runner.notifiers",
    "runner.observe",
    "runner.sse",
    "runner.testing",
    "runner.webhooks",
    "tasks",
)
FACADES = {
    "runner.appdb": "runner.core.appdb",
    "runner.errors": "runner.core.errors",
    "runner.faults": "runner.core.faults",
    "runner.mcp": "runner.core.mcp",
    "runner.model": "runner.core.model",
    "runner.retry": "runner.core.retry",
    "runner.settings": "runner.core.settings",
}
# The domain's subpackages, which the graph must see.
SUBPACKAGES = (
    "runner.core.engine",
    "runner.core.steps",
    "runner.core.events",
    "runner.core.approvals",
)

# The layers inside ``runner/``, lowest first: a module imports modules of its
# own layer or of a lower one, never of a higher one (docs/engine-layers.md).
RUNNER_LAYERS = (
    "foundations",  # errors, settings, the clock, retry policies, the observer hooks
    "runtime",  # what an execution stands on: its loop, abort signal, journal, fault points
    "agents",  # what a user declares: agents, tools, the model adapter, MCP servers
    "services",  # around executions: approvals, the event feed, schedules, run logs
    "steps",  # one execution's step loop and its tool calls
    "engine",  # executions, tick(), the Engine façade, the process's listeners
    "integrations",  # clients of the engine: Celery, CLI, console, SSE, webhooks, the kit
)
# Each module's layer. An entry names a module, or a package and every module
# in it; the longest entry that matches wins. ``runner`` stands only for its
# ``__init__`` (the public façade), so a new module of ``runner/`` needs an entry.
LAYER_OF = {
    "runner.core.errors": "foundations",
    "runner.core.settings": "foundations",
    "runner.core.layout": "foundations",
    "runner.core.clock": "foundations",
    "runner.core.costs": "foundations",
    "runner.core.schemas": "foundations",
    "runner.core.retry": "foundations",
    "runner.core.appdb": "foundations",
    "runner.core.deprecation": "foundations",  # the warning a deprecated name gives
    "runner.core.release": "foundations",  # the installed version
    "runner.core.keyring": "foundations",  # encryption at rest: the keys and the cipher
    "runner.core.observe": "foundations",  # the Observer protocol and what it is handed
    "runner.core.redaction": "foundations",  # what is taken out of data leaving for others
    "runner.core.runtime": "runtime",
    "runner.core.steps.run_context": "runtime",
    "runner.core.coordination": "runtime",  # leases, claims, live wake-ups (Redis)
    "runner.core.journal": "runtime",  # the port of one execution's journal
    "runner.core.faults": "runtime",  # the named fault points, which wrap the journal
    "runner.core.limits": "runtime",  # model limits taken in Redis, tenants in turn
    "runner.core.limits.model_limits": "foundations",  # declarations, read by the settings
    "runner.core.model": "agents",
    "runner.core.agent": "agents",
    "runner.core.versions": "agents",  # an agent's fingerprint and what changed
    "runner.core.threads": "agents",  # a thread as a conversation: policies, its history
    "runner.core.children": "agents",
    "runner.core.mcp": "agents",
    "runner.core.steps.tools": "agents",
    "runner.core.steps.builtin_tools": "agents",
    "runner.core.steps.history": "agents",
    "runner.core.steps.context_window": "agents",  # the History an agent declares
    "runner.core.approvals.expiry": "agents",
    "runner.core.approvals": "services",
    "runner.core.events": "services",
    "runner.core.schedules": "services",
    "runner.core.audit": "services",  # the audit log's actions, appended after them
    # The log listener and which listeners a process gets: the engine calls
    # them, they read what it hands them, not the engine. The trace and metric
    # listeners are integrations (runner/observe/), loaded by name when configured.
    "runner.core.observe.logs": "services",
    "runner.core.observe.setup": "services",
    "runner.core.steps": "steps",
    "runner.core.engine": "engine",
    "runner": "integrations",  # the façade: runner/__init__.py
    "runner.celery": "integrations",
    "runner.celery_plugin": "integrations",
    "runner.chat": "integrations",  # chat UI protocols over a thread's runs
    "runner.evals": "integrations",  # replays and evaluations in a sandbox engine
    "runner.cli": "integrations",
    "runner.console": "integrations",
    "runner.sse": "integrations",
    "runner.testing": "integrations",
    "runner.webhooks": "integrations",
    "runner.notifiers": "integrations",
    "runner.observe": "integrations",  # traces and metrics
    **dict.fromkeys(FACADES, "integrations"),  # public paths of core modules
}


@dataclass(frozen=True)
class Import:
    target: str
    line: int
    function: str | None  # the enclosing function, None at module level


def _modules(package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _walk(node: ast.AST, function: str | None = None) -> Iterator[tuple[ast.AST, str | None]]:
    for child in ast.iter_child_nodes(node):
        inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else None
        yield child, function
        yield from _walk(child, inner or function)


def _imports(module: str, path: Path, known: dict[str, Path]) -> list[Import]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node, function in _walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.append(full if full in known else base)
        for target in targets:
            resolved = _resolve(target, known)
            if resolved is not None and resolved != module:
                found.append(Import(resolved, getattr(node, "lineno", 0), function))
    return found


def import_graph(packages: tuple[str, ...]) -> dict[str, list[Import]]:
    known: dict[str, Path] = {}
    for package in packages:
        known.update(_modules(package))
    return {module: _imports(module, path, known) for module, path in known.items()}


def find_cycle(graph: dict[str, list[Import]]) -> list[str] | None:
    """One import cycle as a path of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for edge in graph.get(module, []):
            if state.get(edge.target) == 1:
                return [*path[path.index(edge.target) :], edge.target]
            if edge.target not in state and (cycle := visit(edge.target)) is not None:
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)) is not None:
            return cycle
    return None


def test_the_graph_sees_function_level_and_type_checking_imports() -> None:
    # The rule is only as strong as the parser: check it on a known module.
    edges = {(e.target, e.function) for e in import_graph(PACKAGES)["runner.cli.commands"]}
    assert ("runner.cli.demo", "demo") in edges  # inside the `demo` command
    assert ("runner.core.engine.engine", None) in edges  # under TYPE_CHECKING, at module level
    assert ("runner.core.engine.engine", "_engine") in edges
    # `from runner.core.engine import retry_fork`: the module, not the package's __init__.
    engine = {e.target for e in import_graph(PACKAGES)["runner.core.engine.engine"]}
    assert "runner.core.engine.retry_fork" in engine and "runner.core.engine" not in engine


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {
        "a": [Import("b", 1, None)],
        "b": [Import("c", 1, "f")],
        "c": [Import("a", 1, None)],
    }
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": [Import("b", 1, None)], "b": []}) is None


def test_no_import_cycle_inside_runner_or_tasks() -> None:
    graph = import_graph(PACKAGES)
    assert {"runner.core.engine.engine", "runner.core.steps.step_loop", "tasks.app"} <= set(graph)
    for package in SUBPACKAGES:  # the scan sees the modules of every subpackage
        assert len([m for m in graph if m.startswith(package + ".")]) >= 2, package
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_run_one_way_tasks_runner_store() -> None:
    """``store`` imports neither ``runner`` nor ``tasks``; ``runner`` never
    imports ``tasks`` (it is handed an ``enqueue`` callable)."""
    graph = import_graph(PACKAGES)
    layer = {package: n for n, package in enumerate(LAYERS)}
    upward = [
        (m, e.target, e.line)
        for m, edges in graph.items()
        for e in edges
        if layer[e.target.split(".")[0]] > layer[m.split(".")[0]]
    ]
    assert upward == []
    assert any(e.target.startswith("store") for e in graph["runner.core.engine.engine"])
    assert any(e.target.startswith("runner") for e in graph["tasks.app"])


def layer_of(module: str) -> str | None:
    """The layer of a module of ``runner`` (None if the table has no entry)."""
    if module == "runner":
        return LAYER_OF["runner"]
    name = module
    while "." in name:
        if name in LAYER_OF:
            return LAYER_OF[name]
        name = name.rpartition(".")[0]
    return None


def upward_arrows(graph: dict[str, list[Import]]) -> list[tuple[str, str, int]]:
    """Each import inside ``runner`` whose target sits in a higher layer."""
    rank = {name: n for n, name in enumerate(RUNNER_LAYERS)}
    return sorted(
        (m, e.target, e.line)
        for m, edges in graph.items()
        if m.split(".")[0] == "runner"
        for e in edges
        if e.target.split(".")[0] == "runner"
        and rank[layer_of(e.target) or ""] > rank[layer_of(m) or ""]
    )


def test_every_runner_module_has_a_layer() -> None:
    graph = import_graph(PACKAGES)
    runner = [m for m in graph if m.split(".")[0] == "runner"]
    assert [m for m in runner if layer_of(m) is None] == []
    assert set(LAYER_OF.values()) == set(RUNNER_LAYERS)
    # The integrations are the top layer, and the steps below the engine.
    assert {layer_of(p) for p in INTEGRATIONS if p != "tasks"} == {"integrations"}
    assert layer_of("runner.core.steps.step_loop") == "steps"
    assert layer_of("runner.core.steps.tools") == "agents"
    assert layer_of("runner.core.engine.deps") == "engine"
    assert layer_of("runner.no_such_module") is None


def test_no_import_points_up_a_layer() -> None:
    """No import inside ``runner``, eager or lazy or under ``TYPE_CHECKING``,
    from a layer to a higher one (``RUNNER_LAYERS``): what a lower layer needs
    of a higher one is handed to it (a callable, a protocol it owns)."""
    arrows = upward_arrows(import_graph(PACKAGES))
    assert arrows == []


def test_the_layer_rule_sees_an_arrow_up() -> None:
    graph = {
        "runner.core.events.feed": [Import("runner.core.engine.runtime", 3, "wake")],
        "runner.core.engine.tick": [Import("runner.core.events.feed", 4, None)],
    }
    assert upward_arrows(graph) == [("runner.core.events.feed", "runner.core.engine.runtime", 3)]


def core_imports_outside(graph: dict[str, list[Import]]) -> list[tuple[str, str]]:
    """Each import of a core module (``runner.core``) of a project module that
    is neither of the core nor of the store: an integration, a public path, the
    façade, ``tasks``."""
    return sorted(
        (m, e.target)
        for m, edges in graph.items()
        if m == CORE or m.startswith(f"{CORE}.")
        for e in edges
        if not (e.target == CORE or e.target.startswith((f"{CORE}.", "store")))
    )


def test_the_tree_shows_where_the_core_ends() -> None:
    """Every module of ``runner/`` is the core's (``runner/core/``), an
    integration's, the public façade (``runner/__init__.py``) or a public path
    of a core module; nothing else sits beside them."""
    graph = import_graph(PACKAGES)
    runner = [m for m in graph if m.split(".")[0] == "runner"]
    placed = [
        m
        for m in runner
        if m in ("runner", CORE)
        or m.startswith(f"{CORE}.")
        or m.startswith(tuple(f"{i}." for i in INTEGRATIONS))
        or m in INTEGRATIONS
        or m in FACADES
    ]
    assert sorted(set(runner) - set(placed)) == []
    assert {"runner.core.engine.execution", "runner.cli.commands", "runner.observe.otel"} <= set(
        runner
    )


def test_the_engine_core_does_not_import_its_integrations() -> None:
    """The core imports only itself and the store: the CLI (commands, the
    demo), the console, the SSE responses, traces and metrics import the core,
    never the reverse; and the core imports none of the test helpers: the kit
    plugs its scripted models into the model adapter when imported
    (``runner.core.model.serve_scripted_models``), and a process's trace and
    metric listeners are loaded by name when configured."""
    graph = import_graph(PACKAGES)
    core = [m for m in graph if m.startswith(f"{CORE}.")]
    assert {"runner.core.engine.engine", "runner.core.steps.step_loop", "runner.core.model"} <= set(
        core
    )
    assert core_imports_outside(graph) == []


def test_the_core_rule_sees_an_import_of_an_integration() -> None:
    graph = {
        "runner.core.engine.tick": [Import("runner.core.events.feed", 3, None)],
        "runner.core.model": [Import("runner.testing.scripted", 9, "complete")],
        "runner.core.agent": [Import("runner.errors", 4, None), Import("store.models", 5, None)],
        "runner.cli.commands": [Import("runner.console.server", 7, None)],
    }
    assert core_imports_outside(graph) == [
        ("runner.core.agent", "runner.errors"),
        ("runner.core.model", "runner.testing.scripted"),
    ]


def test_a_public_path_of_a_core_module_only_re_exports_it() -> None:
    """``runner/errors.py`` and its peers hold a docstring and one
    ``from runner.core.… import *``: the names are the core module's own
    objects, so that patching or catching one is patching or catching the
    core's."""
    for public, core in FACADES.items():
        path = ROOT / (public.replace(".", "/") + ".py")
        body = ast.parse(path.read_text()).body
        assert isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), public
        rest = body[1:]
        assert len(rest) == 1 and isinstance(rest[0], ast.ImportFrom), public
        assert rest[0].module == core and [a.name for a in rest[0].names] == ["*"], public
        facade, module = importlib.import_module(public), importlib.import_module(core)
        names = getattr(module, "__all__", None) or [
            n for n in vars(module) if not n.startswith("_")
        ]
        assert all(getattr(facade, n) is getattr(module, n) for n in names), public
    import runner.model
    from runner.core.model import warm_up

    assert runner.model.warm_up is warm_up


# --------------------------------------------------------- the public names


def test_the_public_names_resolve() -> None:
    import runner
    from runner.core.retry import RetryPolicy

    missing = [name for name in runner.__all__ if not hasattr(runner, name)]
    assert missing == []
    assert runner.RetryPolicy is RetryPolicy  # README: `from runner.retry import RetryPolicy`


_DOCUMENTED = re.compile(r"(?<![\w./-])runner(?:\.[A-Za-z_]\w*)+")
_FROM_IMPORT = re.compile(r"^\s*from (runner[\w.]*) import \(?([\w, ]+)", re.MULTILINE)


def documented_paths() -> set[str]:
    """Every ``runner.…`` path the README, docs/ and examples/ name or import."""
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*.py")]
    found: set[str] = set()
    for path in files:
        text = path.read_text()
        found.update(match.group(0) for match in _DOCUMENTED.finditer(text))
        for match in _FROM_IMPORT.finditer(text):
            names = (n.split(" as ")[0].strip() for n in match.group(2).split(","))
            found.update(f"{match.group(1)}.{name}" for name in names if name)
    return found


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def resolves(dotted: str, known: dict[str, Path]) -> bool:
    """Whether ``dotted`` is a module of ours, or a name defined at the top of one
    (read from its source: nothing is imported, so optional extras need not be)."""
    from runner import MOVED_TO_CORE

    moved = next(
        (old for old in MOVED_TO_CORE if dotted == old or dotted.startswith(f"{old}.")), None
    )
    if moved is not None:  # an old path of a core module, which still imports (with a warning)
        return resolves(MOVED_TO_CORE[moved] + dotted[len(moved) :], known)
    module = _resolve(dotted, known)
    if module is None:
        return False
    rest = dotted[len(module) + 1 :].split(".")[0] if dotted != module else ""
    if not rest:
        return True
    if module in FACADES:  # a public path: its names are its core module's
        return resolves(f"{FACADES[module]}.{rest}", known)
    source = known[module]
    if source.name == "__init__.py" and "lazy_attributes(" in source.read_text():
        # A package whose names load on first use (runner, runner.testing).
        package = importlib.import_module(module)
        return rest in getattr(package, "__all__", ()) or hasattr(package, rest)
    return rest in _top_level_names(source)


def test_every_documented_import_path_resolves() -> None:
    known = _modules("runner")
    paths = documented_paths()
    assert {"runner.retry.RetryPolicy", "runner.sse.flask_response", "runner.testing"} <= paths
    assert [p for p in sorted(paths) if not resolves(p, known)] == []
    assert not resolves("runner.retry.NoSuchPolicy", known)
    assert resolves("runner.engine.engine.Engine", known)  # moved, and still imports
    assert not resolves("runner.engine.no_such_module", known)
    assert not resolves("runner.no_such_module", known)


# ------------------------------------------------------------------ typing


def _public_methods() -> list[tuple[str, typing.Any]]:
    found = []
    for name, member in inspect.getmembers(Engine):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            found.append((name, member.fget))
        elif inspect.isfunction(member) or inspect.ismethod(member):
            found.append((name, member))
    return found


def _mentions_any(hint: object) -> bool:
    if hint is typing.Any:
        return True
    return any(_mentions_any(arg) for arg in typing.get_args(hint))


def test_engine_public_api_is_fully_typed() -> None:
    methods = dict(_public_methods())
    # The seams the issue names, among the rest.
    assert {"tick", "decide", "start", "execute", "cancel"} <= set(methods)
    for name, fn in methods.items():
        hints = typing.get_type_hints(fn)  # every annotation resolves at runtime
        params = [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]
        assert set(params) <= set(hints), f"Engine.{name}: unannotated {set(params) - set(hints)}"
        assert "return" in hints, f"Engine.{name} has no return annotation"
        assert not _mentions_any(hints["return"]), f"Engine.{name} returns {hints['return']}"


def test_the_seams_return_what_they_say() -> None:
    from runner.core.engine.tick import TickReport
    from store.models import NewApproval, Run

    assert typing.get_type_hints(Engine.tick)["return"] is TickReport
    assert typing.get_type_hints(Engine.decide)["return"] is Run
    from runner.core.engine.deps import Deps

    new = typing.get_type_hints(Deps.notify_approvals)["new"]
    assert typing.get_args(new) == (NewApproval,)


def test_execution_loop_and_tick_do_not_take_the_engine() -> None:
    from runner.core.engine.deps import Deps
    from runner.core.engine.execution import Execution
    from runner.core.engine.tick import tick

    assert typing.get_type_hints(Execution.__init__)["deps"] is Deps
    assert typing.get_type_hints(tick)["deps"] is Deps
    graph = import_graph(PACKAGES)
    for module in (
        "runner.core.engine.execution",
        "runner.core.steps.step_loop",
        "runner.core.engine.tick",
        "runner.core.engine.deps",
    ):
        assert "runner.core.engine.engine" not in {e.target for e in graph[module]}, module


def test_every_module_logs_under_its_own_name() -> None:
    """A module's log lines carry its name (``logging.getLogger(__name__)``),
    so a filter or level set on a package reaches each module in it; a name
    spelled by hand drifts from the module (22 did)."""
    spelled = []
    for package in ("runner", "store", "tasks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"\blog\w* = logging\.getLogger\((?!__name__\))", line):
                    spelled.append(f"{path.relative_to(ROOT)}:{number}")
    assert spelled == []


def test_only_the_model_adapter_imports_litellm() -> None:
    """Every model call goes through runner/core/model.py (its retries, its
    limits, its cost map, its blocked calls in tests); nothing else imports
    litellm, eagerly or lazily (the kit's scripted provider is handed it)."""
    pattern = re.compile(r"^\s*(import litellm|from litellm\b)", re.MULTILINE)
    found = sorted(
        str(path.relative_to(ROOT))
        for package in ("runner", "store", "tasks")
        for path in (ROOT / package).rglob("*.py")
        if pattern.search(path.read_text())
    )
    assert found == ["runner/core/model.py"]
