"""``Settings`` is the single source of every ``RUNWRIGHT_*`` variable a
Runwright process reads (issue 10, items 6 and 7); the testing kit reads two of
its own in a test session. The README's table lists every name that Runwright's
installed modules read, and nothing else (issue 49)."""

from __future__ import annotations

import ast
import re

import pytest

from runner.core.settings import Settings
from store.errors import ConfigurationError
from tests.services import ROOT

# Variables of the test suite itself, never of a Runwright process.
TEST_ONLY = re.compile(r"RUNWRIGHT_TEST_\w+")


def readme_variables() -> set[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(RUNWRIGHT_\w+)` \|", section, flags=re.M))


def _constants(tree: ast.Module) -> dict[str, str]:
    """A module's top-level ``NAME = "..."`` strings."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def _django_settings(tree: ast.Module) -> set[str]:
    """Names a module reads from a Django project's settings
    (``getattr(settings, NAME, ...)``): Django settings, not environment variables."""
    constants = _constants(tree)
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "settings"
        ):
            key = node.args[1]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                names.add(key.value)
            elif isinstance(key, ast.Name) and key.id in constants:
                names.add(constants[key.id])
    return names


def variables_in_code() -> dict[str, set[str]]:
    """Every ``RUNWRIGHT_*`` name that Runwright's installed modules spell out
    as a string of its own (a setting's variable, a name the testing kit reads),
    with the files that do, less the Django settings the console reads."""
    paths = [ROOT / "celeryconfig.py"]
    for folder in ("runner", "store", "tasks"):
        paths += sorted((ROOT / folder).rglob("*.py"))
    found: dict[str, set[str]] = {}
    django: set[str] = set()
    for path in paths:
        tree = ast.parse(path.read_text(), str(path))
        django |= _django_settings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.fullmatch(r"RUNWRIGHT_[A-Z0-9_]+", node.value)
            ):
                found.setdefault(node.value, set()).add(str(path.relative_to(ROOT)))
    return {name: files for name, files in found.items() if name not in django}


def test_the_readme_table_lists_every_variable_the_code_reads() -> None:
    listed = readme_variables()
    read = variables_in_code()
    assert set(Settings.variables()) <= set(read)  # the scan sees the settings
    missing = {name: files for name, files in read.items() if name not in listed}
    assert missing == {}, "add these to the README's Configuration table"
    assert listed - set(read) == set(), "the README lists variables nothing reads"


def test_the_scan_knows_a_django_setting_from_a_variable() -> None:
    read = variables_in_code()
    # Read from a Django project's settings (runner/console/django/).
    assert "RUNWRIGHT_CONSOLE_ENGINE" not in read
    # Read by the testing kit through a constant (runner/testing/plugin.py).
    assert "RUNWRIGHT_ALLOW_MODEL_REQUESTS" in read


def test_every_setting_is_parsed_from_its_variable() -> None:
    sample = {
        str: "x",
        int: "7",
        float: "7.5",
        bool: "false",
    }
    for name, field in Settings.variables().items():
        default = getattr(Settings(), field)
        raw = "a,b" if field == "agents" else sample.get(type(default), "/tmp/x")
        if field in ("lease_ttl_seconds", "tick_seconds"):
            raw = "7.5"
        if default is False:
            raw = "true"
        special = {
            "log_format": "json",
            "metrics_port": "9100",
            "model_limits": '{"*": {"rpm": 60}}',
            "tenant_weights": '{"acme": 2}',
            "redact": "email,card",
            "encryption_keys": f"k1:{'A' * 43}=",
        }
        raw = special.get(field, raw)
        value = getattr(Settings.from_env({name: raw}), field)
        assert value != default, (name, value)


def test_the_key_ring_is_checked_at_once_and_never_in_the_settings_repr() -> None:
    ring = f"k1:{'B' * 43}=,k0:{'C' * 43}="
    settings = Settings.from_env({"RUNWRIGHT_ENCRYPTION_KEYS": ring})
    assert settings.encryption_keys == ring
    assert "BBBB" not in repr(settings) and "encryption_keys" not in repr(settings)
    with pytest.raises(ConfigurationError, match="key 'k1' is 3 bytes"):
        Settings.from_env({"RUNWRIGHT_ENCRYPTION_KEYS": "k1:AAAA"})


def test_nothing_else_reads_a_runwright_variable() -> None:
    pattern = re.compile(r"(environ(\.get)?\s*[\(\[]|getenv\()\s*[\"'](RUNWRIGHT_\w+)")
    offenders = []
    for folder in ("runner", "store", "tasks", "examples"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == ROOT / "store" / "config.py":
                continue
            if ROOT / "runner" / "testing" in path.parents:
                continue  # the testing kit reads the test environment, as the suite does
            for match in pattern.finditer(path.read_text()):
                if not TEST_ONLY.fullmatch(match.group(3)):
                    offenders.append(f"{path.relative_to(ROOT)}: {match.group(3)}")
    for path in (ROOT / "celeryconfig.py",):
        offenders += [f"{path.name}: {m.group(3)}" for m in pattern.finditer(path.read_text())]
    assert offenders == []


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("RUNWRIGHT_TICK_SECONDS", "soon"),
        ("RUNWRIGHT_TICK_SECONDS", "nan"),
        ("RUNWRIGHT_LEASE_TTL_SECONDS", "0.01"),
        ("RUNWRIGHT_TICK_BATCH", "1.5"),
        ("RUNWRIGHT_MAX_PAYLOAD_BYTES", "-1"),
    ],
)
def test_a_bad_value_is_a_configuration_error_naming_the_variable(name: str, raw: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_env({name: raw})


def test_observability_settings_refuse_nonsense_in_one_line() -> None:
    with pytest.raises(ConfigurationError, match="RUNWRIGHT_LOG_FORMAT must be one of text, json"):
        Settings.from_env({"RUNWRIGHT_LOG_FORMAT": "xml"})
    with pytest.raises(ConfigurationError, match="RUNWRIGHT_METRICS_PORT must be a port"):
        Settings.from_env({"RUNWRIGHT_METRICS_PORT": "70000"})
    with pytest.raises(ConfigurationError, match="RUNWRIGHT_METRICS_PORT must be a whole number"):
        Settings.from_env({"RUNWRIGHT_METRICS_PORT": "9100.5"})
    assert Settings.from_env({"RUNWRIGHT_METRICS_PORT": "9100"}).metrics_port == 9100
