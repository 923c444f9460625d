"""One word for one thing: the words the glossary retired do not come back.

docs/concepts.md, "Glossary", gives each thing one word and lists the words it
retired for it. This test reads the code (identifiers, strings, comments), the
docs, the README and the examples, and fails on a retired word, naming the file,
the line and the word to use. What may still hold one is listed here, each with
its reason: a deprecated alias (CHANGELOG.md, "Unreleased"), a stored or wire
name kept for compatibility, or a file another change rewrites.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("runner", "store", "tasks", "docs", "README.md", "examples")
SUFFIXES = {".py", ".md", ".html", ".js", ".css", ".txt", ".toml", ".cfg", ".ini", ".sql"}

# Each retired word: what finds it, and the glossary's word for it.
RETIRED: dict[str, tuple[re.Pattern[str], str]] = {
    "settle": (
        re.compile(r"settl\w*", re.IGNORECASE),
        "a run or an execution ends (ended, Observer.ended, Deps.after_end); an effect "
        "finishes; a reservation is released",
    ),
    "recover": (
        # "Unrecoverable error" is Celery's own message, quoted.
        re.compile(r"(?<!un)recover\w*", re.IGNORECASE),
        "a lapsed claim is taken over (takeover, TickReport.lapsed); a new attempt is a "
        "retry or a fork",
    ),
    "rerun": (
        # rerun_effects (--rerun-effects) is the fork's consent to run effects
        # again, its one meaning (docs/concepts.md).
        re.compile(r"\bre-?run(?:s|ning)?\b(?![-_]effects)", re.IGNORECASE),
        "retry or fork (runner/core/engine/retry_fork.py); an effect runs again",
    ),
    "respond": (
        re.compile(r"\brespond(?:s|ed|ing)?\b", re.IGNORECASE),
        "decide an approval (Engine.decide), answer a question; a scripted model "
        "replies (reply_to)",
    ),
    "aexecute": (
        re.compile(r"\baexecute\b"),
        "the *_async suffix: Engine.execute_async",
    ),
    "W1/W2": (
        re.compile(r"\bW[12]\b"),
        "the journal write (W1), the step commit (W2)",
    ),
}

# Stored and wire names that keep a retired word (docs/concepts.md, "Names kept
# for compatibility"), and references to test files, which are named as they are.
COMPATIBLE = [
    re.compile(r"runwright_runs_settled_total|runs_settled_finished_idx"),
    re.compile(r"\bruns_settled\b"),  # the attribute of that metric
    re.compile(r"""\{\s*"reason"\s*:\s*"settled"\s*\}|reason = "settled" if"""),
    # A child event's action, and a cancel's (runwright cancel --json).
    re.compile(r"`started` / `settled`|\|settled\b|action `settled`|ELSE 'settled' END"),
    # A cancel's action in Python (store/rules.py, CancelAction.ENDED).
    re.compile(r'ENDED = "settled"'),
    re.compile(r"tests/[\w/]+\.py(?:::\w+)?|`::\w+`|test_\w+"),
]

# The deprecated aliases themselves (CHANGELOG.md, "Unreleased"), file by file.
ALIASES: dict[str, list[str]] = {
    "runner/core/engine/engine.py": [
        r"def respond\b",
        r"Engine\.respond\b",
        r"def aexecute\b",
        r"Engine\.aexecute\b",
    ],
    "runner/core/observe/__init__.py": [
        r"def settled\b",
        r"Observers?\.settled\b",
        r"self\.settled\(",
        r'"settled" in cls\.__dict__',
        r"\{cls\.__qualname__\}\.settled",
        r"type\(self\)\.settled",
        r"def recovered\b",
        r"@recovered\.setter",
        r"TickReport\.recovered\b",
        r"``recovered``",
    ],
    "runner/core/engine/deps.py": [r"def after_settle\b", r"Deps\.after_settle\b"],
    "runner/testing/kit.py": [
        r"def (?:run_until_settled|recover|assert_recovered)\b",
        r"TestEngine\.(?:run_until_settled|recover|assert_recovered)\b",
    ],
    "store/status.py": [r"def settled\b", r"RunStatus\.settled\b"],
    "store/models.py": [r"def settled\b", r"Run\.settled\b"],
    "runner/testing/scripted.py": [r"async def respond\b", r"ScriptedModel\.respond\b"],
    "runner/core/events/feed.py": [r"""until == "settled"|'until="settled"'"""],
    "runner/core/engine/rerun.py": [r"runner\.engine\.rerun\b", r"``rerun\.py``"],
    "runner/core/engine/__init__.py": [r"``rerun\.py``"],
    # The runs' event trigger, character for character as migration 0013
    # created it (tests/integration/test_migrations.py compares them).
    "store/events.py": [r"-- A child run's start and settle are events of its parent's too\."],
    # The glossary's last column lists the words it retires.
    "docs/concepts.md": [r"\|[^|]*\|\s*$"],
}

# Files whose name holds a retired word: the deprecated module path.
NAMED_FILES = {"runner/core/engine/rerun.py"}


def _files() -> list[Path]:
    found: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
            ]
    return found


# Migrations are history, never edited: they keep the words of their day.
FROZEN_TREES = ("store/migrations/",)


def _frozen(rel: str) -> bool:
    return rel.startswith(FROZEN_TREES)


def _strip(line: str, patterns: list[re.Pattern[str]]) -> str:
    for pattern in patterns:
        line = pattern.sub(" ", line)
    return line


def retired_words(rel: str, text: str) -> list[str]:
    """Each retired word in ``text`` (the file ``rel``), as ``rel:line: word
    (say: ...)``, past the compatible names and the file's
    aliases."""
    allowed = COMPATIBLE + [re.compile(a) for a in ALIASES.get(rel, [])]
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        rest = _strip(line, allowed)
        for pattern, say in RETIRED.values():
            for match in pattern.finditer(rest):
                found.append(f"{rel}:{number}: {match.group(0)!r} (say: {say})")
    return found


def test_no_retired_word_in_code_docs_or_examples() -> None:
    found = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        if _frozen(rel):
            continue
        found += retired_words(rel, path.read_text(encoding="utf-8", errors="replace"))
    assert not found, "words the glossary retired (docs/concepts.md):\n" + "\n".join(found)


def test_no_file_is_named_by_a_retired_word() -> None:
    named = [
        path.relative_to(ROOT).as_posix()
        for path in _files()
        if any(p.search(path.stem) for p, _ in RETIRED.values())
    ]
    assert set(named) <= NAMED_FILES, f"files named by a retired word: {named}"


def test_no_coroutine_is_named_by_an_a_prefix() -> None:
    """A coroutine twin of a method takes the ``_async`` suffix
    (``wait_async``), not an ``a`` prefix; litellm's own names excepted."""
    litellm_names = {"acompletion", "astreaming", "aembedding"}
    found = []
    for path in sorted((ROOT / "runner").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef | ast.Module):
                continue
            names = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            for fn in node.body:
                if (
                    isinstance(fn, ast.AsyncFunctionDef)
                    and fn.name.startswith("a")
                    and fn.name[1:] in names
                    and fn.name not in litellm_names
                    and not _is_alias(fn)
                ):
                    found.append(f"{path.relative_to(ROOT)}:{fn.lineno}: {fn.name}")
    assert not found, f"use the _async suffix: {found}"


def _is_alias(fn: ast.AsyncFunctionDef) -> bool:
    doc = ast.get_docstring(fn) or ""
    return doc.startswith("Deprecated")


def test_the_glossary_names_every_retired_word() -> None:
    glossary = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    section = glossary[glossary.index("## Glossary") :]
    for word in ("settle", "recover", "rerun", "respond", "aexecute", "W1", "W2"):
        assert word in section, f"the glossary does not retire {word!r}"


def test_the_check_finds_the_old_words() -> None:
    """The scan is only as strong as its patterns: it finds each retired word
    where it used to be."""
    old = {
        "runner/core/engine/engine.py": "from runner.core.engine import rerun\n",
        "runner/cli/commands.py": "run = engine.respond(approval_id, True)\n"
        "from runner.core.engine.rerun import retry\n",
        "runner/core/engine/tick.py": "    report.recovered = lapsed  # recover next time\n",
        "runner/core/engine/deps.py": "            self.observer.settled(result.run, 0.0)\n",
        "docs/events.md": "engine.wait(run_id)  # the run once it settles\n",
        "docs/guarantees.md": "| started ones are not re-run |\n",
        "README.md": "await engine.aexecute(run.id)\n",
    }
    for rel, text in old.items():
        assert retired_words(rel, text), f"{rel}: {text!r} passed"
