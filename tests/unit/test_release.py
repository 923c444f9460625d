"""A release people can install (issue 49, item 5): one version, written in
pyproject.toml and read at run time from the installed distribution's
metadata; ``make dist``; the changelog and the README's Install section. What
a built wheel holds and says is tests/e2e/test_kit_from_wheel.py's."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

import pytest

import runner
from tests.services import ROOT

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_version_is_pyprojects_read_from_the_installed_metadata() -> None:
    # .venv holds this checkout, installed from its pyproject.toml (make install).
    assert importlib.metadata.version("runwright") == VERSION
    assert runner.__version__ == VERSION


def test_from_a_source_tree_without_metadata_the_version_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner, "version", lambda: None)
    assert runner.__version__ == "0+unknown"


def test_the_changelog_has_this_release() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "\n## [Unreleased]\n" in text
    heading = re.search(rf"^## \[{re.escape(VERSION)}\] - (\d{{4}}-\d{{2}}-\d{{2}})$", text, re.M)
    assert heading is not None, f"CHANGELOG.md has no section for {VERSION}"


def test_the_readme_installs_this_release() -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    assert f"runwright-{VERSION}-py3-none-any.whl[django]" in section
    for extra in ("django", "flask", "mcp"):
        assert f"[{extra}" in section or f",{extra}" in section, extra
    assert "runwright migrate" in section and "celery -A tasks worker" in section
