"""Every test docs/guarantees.md cites exists: each file, and each test
function named after it (``file.py::test_name``, or ``::test_name`` for the
file named before it in the same cell). A promise backed by a test that was
renamed or removed is a promise nobody checks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"`((?:[\w./-]+\.py)?)((?:::\w+)?)`")


def _file(name: str) -> Path | None:
    path = ROOT / name
    if path.is_file():
        return path
    found = sorted((ROOT / "tests").rglob(Path(name).name))
    return found[0] if len(found) == 1 else None


def test_every_cited_test_exists() -> None:
    text = (ROOT / "docs" / "guarantees.md").read_text()
    missing: list[str] = []
    cited = 0
    for line in text.splitlines():
        current: Path | None = None
        for cell in line.split("|"):
            for name, test in CITED.findall(cell):
                if name:
                    current = _file(name)
                    if current is None:
                        missing.append(name)
                        continue
                if test and current is not None:
                    cited += 1
                    if not re.search(rf"^\s*(async )?def {test[2:]}\(", current.read_text(), re.M):
                        missing.append(f"{current.relative_to(ROOT)}{test}")
    assert cited > 50
    assert missing == []
