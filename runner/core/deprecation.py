"""The warning an old name gives: a name the glossary retired (docs/concepts.md,
"Glossary"), or the old path of a module that moved, keeps working for a
release, listed in CHANGELOG.md."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Sequence


def retired(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated for ``new``. The default ``stacklevel``
    names the caller of the function that calls this one: the code to change."""
    warnings.warn(
        f"{old} is deprecated; use {new} (docs/concepts.md, Glossary)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Old import paths of modules that moved, for a release: importing one
    warns and gives the module at its new path, the same object (so that a
    name patched or caught through the old path is the new module's). Each
    entry maps an old module or package to its new one; a package's
    submodules follow it (``runner.engine.engine`` is ``runner.core.engine.engine``)."""

    def __init__(self, moved: dict[str, str]) -> None:
        self.moved = moved
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def new_name(self, old: str) -> str | None:
        for prefix, target in self.moved.items():
            if old == prefix or old.startswith(f"{prefix}."):
                return target + old[len(prefix) :]
        return None

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = self.new_name(fullname)
        if new is None or importlib.util.find_spec(new) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = self.new_name(spec.name)
        assert new is not None
        # The caller's import statement: warnings skips the import system's frames.
        retired(f"the module {spec.name}", new, stacklevel=3)
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # The import system set the old path's spec on the module: give it back its own.
        module.__spec__ = self._specs.pop(module.__spec__.name if module.__spec__ else "", None)


def alias_moved_modules(moved: dict[str, str]) -> None:
    """Install :class:`MovedModules` for ``moved``, once per process."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules(moved))
