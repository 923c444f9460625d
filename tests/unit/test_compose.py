"""docker-compose.yml and the Dockerfile, checked by parsing (no Docker needed).

Values are read the way Compose reads them: YAML merge keys resolve the shared
``x-`` anchors, and ``${VAR:-default}`` / ``${VAR:?error}`` / ``$$`` are
interpolated by a small implementation of Compose's rules.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from runner.core.settings import Settings
from tests.services import ROOT

COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

RUNWRIGHT_SERVICES = ("migrate", "worker", "beat", "flower")
REQUIRED = {
    "RUNWRIGHT_SECRET_KEY": "k1:s3cret-s3cret-s3cret-s3cret-s3cret",
    "FLOWER_PASSWORD": "flower-pw",
}


class MissingVariable(Exception):
    pass


_VAR = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's variable substitution for the forms this file may use."""

    def substitute(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["bare"]
        op, arg = match["op"], match["arg"] or ""
        current = env.get(name)
        unset = current is None or (op is not None and op.startswith(":") and current == "")
        if op is not None and op.endswith("?") and unset:
            raise MissingVariable(f"{name}: {arg}")
        if op is not None and op.endswith("-") and unset:
            return arg
        return current or ""

    return _VAR.sub(substitute, value)


def resolve(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [resolve(item, env) for item in node]
    if isinstance(node, dict):
        return {key: resolve(value, env) for key, value in node.items()}
    return node


def raw_compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def compose(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The file as Compose would see it with ``env`` in the shell."""
    resolved = resolve(raw_compose(), REQUIRED if env is None else env)
    assert isinstance(resolved, dict)
    return resolved


def services(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    found = compose(env)["services"]
    assert isinstance(found, dict)
    return found


def environment(service: Mapping[str, Any]) -> dict[str, Any]:
    env = service.get("environment", {})
    if isinstance(env, list):  # the KEY=VALUE form
        return dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    assert isinstance(env, dict)
    return env


def argv(command: str | list[str]) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def seconds(duration: str | int | float) -> float:
    """A Compose duration: ``90``, ``90s``, ``1m30s``, ``1h``."""
    if isinstance(duration, int | float):
        return float(duration)
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    unit = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
    return sum(float(n) * unit[u] for n, u in parts)


def depends_on(service: Mapping[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on", {})
    if isinstance(deps, list):  # the short form means service_started
        return {name: "service_started" for name in deps}
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def healthcheck_command(service: Mapping[str, Any]) -> str:
    check = service.get("healthcheck")
    assert check, "no healthcheck"
    assert not check.get("disable"), "healthcheck disabled"
    test = check["test"]
    if isinstance(test, str):
        return test
    assert test[0] in ("CMD", "CMD-SHELL"), test
    return " ".join(test[1:])


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuations joined, comments dropped."""
    joined: list[str] = []
    current = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        joined.append(current + stripped)
        current = ""
    assert not current, "the Dockerfile ends inside a continuation"
    pairs = []
    for line in joined:
        instruction, _, args = line.partition(" ")
        pairs.append((instruction.upper(), args.strip()))
    return pairs


# --- docker-compose.yml ------------------------------------------------------------


def test_services_exist() -> None:
    assert set(services()) >= {"postgres", "redis", "migrate", "worker", "beat", "flower"}
    assert services()["postgres"]["image"].startswith("postgres:16")
    assert services()["redis"]["image"].startswith("redis:7")


def test_redis_persists_with_an_append_only_file() -> None:
    redis = services()["redis"]
    command = argv(redis["command"])
    assert "--appendonly" in command
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(str(v).endswith(":/data") for v in redis.get("volumes", []))


def test_postgres_keeps_its_data_in_a_volume() -> None:
    volumes = services()["postgres"].get("volumes", [])
    mounts = [v.split(":", 1) for v in volumes]
    assert ["pgdata", "/var/lib/postgresql/data"] in mounts
    assert "pgdata" in compose()["volumes"]


def test_runwright_services_share_the_image() -> None:
    found = services()
    images = {found[name].get("image") for name in RUNWRIGHT_SERVICES}
    assert len(images) == 1 and None not in images, images
    for name in RUNWRIGHT_SERVICES:
        assert found[name].get("build") == ".", name


def test_worker_scales() -> None:
    worker = services()["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker
    assert argv(worker["command"])[:4] == ["celery", "-A", "tasks", "worker"]


def test_runwright_env_reaches_every_runwright_service() -> None:
    expected = {
        "RUNWRIGHT_DATABASE_URL": "postgresql://runwright:runwright@postgres:5432/runwright",
        "RUNWRIGHT_REDIS_URL": "redis://redis:6379/0",
        "RUNWRIGHT_BROKER_URL": "redis://redis:6379/1",
        "RUNWRIGHT_SECRET_KEY": REQUIRED["RUNWRIGHT_SECRET_KEY"],
        "RUNWRIGHT_AGENTS": "examples.agents",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    found = services()
    for name in RUNWRIGHT_SERVICES:
        env = environment(found[name])
        assert {key: env.get(key) for key in expected} == expected, name
    # The URLs name the compose services, which the credentials match.
    pg_env = environment(found["postgres"])
    url = f"postgresql://{pg_env['POSTGRES_USER']}:{pg_env['POSTGRES_PASSWORD']}@postgres:5432/"
    assert expected["RUNWRIGHT_DATABASE_URL"] == url + pg_env["POSTGRES_DB"]


def test_secret_key_and_flower_password_have_no_default() -> None:
    for name in ("RUNWRIGHT_SECRET_KEY", "FLOWER_PASSWORD"):
        without = {k: v for k, v in REQUIRED.items() if k != name}
        with pytest.raises(MissingVariable, match=name):
            compose(without)
        with pytest.raises(MissingVariable, match=name):
            compose({**without, name: ""})


def test_agents_default_to_the_examples_and_can_be_chosen() -> None:
    for name in RUNWRIGHT_SERVICES:
        chosen = environment(services({**REQUIRED, "RUNWRIGHT_AGENTS": "myapp.agents"})[name])
        assert chosen["RUNWRIGHT_AGENTS"] == "myapp.agents", name
    # The default module ships in the build context (so in the image).
    assert (ROOT / "examples" / "agents.py").is_file()
    assert (ROOT / "examples" / "__init__.py").is_file()
    assert "examples" not in dockerignore_patterns()


def test_provider_keys_pass_through_without_defaults() -> None:
    raw = raw_compose()["services"]
    worker_env = environment(raw["worker"])
    keys = [k for k in worker_env if k.endswith("_API_KEY")] + ["RUNWRIGHT_MODEL"]
    assert "OPENAI_API_KEY" in keys
    for key in keys:
        assert worker_env[key] is None, f"{key} must come from the host, not the file"
    # Services that never call a model do not get them.
    for name in ("migrate", "beat", "flower"):
        assert not [k for k in environment(raw[name]) if k in keys], name


def test_migrate_runs_once_and_workers_wait_for_it() -> None:
    found = services()
    migrate = found["migrate"]
    assert argv(migrate["command"]) == ["runwright", "migrate"]
    assert migrate.get("restart") == "no"
    assert depends_on(migrate).get("postgres") == "service_healthy"
    worker_deps = depends_on(found["worker"])
    assert worker_deps.get("migrate") == "service_completed_successfully"
    assert worker_deps.get("redis") == "service_healthy"
    assert depends_on(found["beat"]).get("redis") == "service_healthy"


def test_beat_keeps_its_schedule_in_a_writable_place() -> None:
    command = argv(services()["beat"]["command"])
    assert command[:4] == ["celery", "-A", "tasks", "beat"]
    assert command[command.index("-s") + 1].startswith("/tmp/")


def test_healthchecks() -> None:
    found = services()
    assert "pg_isready" in healthcheck_command(found["postgres"])
    assert "redis-cli ping" in healthcheck_command(found["redis"])
    ping = healthcheck_command(found["worker"])
    assert "celery -A tasks inspect ping" in ping
    # `$$` in the file, so the container's shell (not Compose) expands it.
    assert "celery@$HOSTNAME" in ping
    assert found["worker"]["healthcheck"]["test"][0] == "CMD-SHELL"


def flower_auth(flower: Mapping[str, Any]) -> list[str]:
    """Flower's basic-auth credentials, from its command line or FLOWER_BASIC_AUTH."""
    found = [c.split("=", 1)[1] for c in argv(flower["command"]) if c.startswith("--basic-auth=")]
    from_env = environment(flower).get("FLOWER_BASIC_AUTH")
    return found + ([from_env] if from_env is not None else [])


def test_flower_requires_basic_auth() -> None:
    flower = services()["flower"]
    assert argv(flower["command"])[:4] == ["celery", "-A", "tasks", "flower"]
    assert flower_auth(flower) == [f"admin:{REQUIRED['FLOWER_PASSWORD']}"]
    assert "FLOWER_UNAUTHENTICATED_API" not in environment(flower)
    custom = services({**REQUIRED, "FLOWER_USER": "ops"})["flower"]
    assert flower_auth(custom) == [f"ops:{REQUIRED['FLOWER_PASSWORD']}"]


def test_flower_publishes_5555_on_loopback_by_default() -> None:
    assert services()["flower"]["ports"] == ["127.0.0.1:5555:5555"]
    opened = services({**REQUIRED, "FLOWER_BIND": "0.0.0.0"})["flower"]
    assert opened["ports"] == ["0.0.0.0:5555:5555"]


def test_stop_grace_period_outlasts_the_drain() -> None:
    worker = services()["worker"]
    drain = Settings.from_env(
        {k: v for k, v in environment(worker).items() if v is not None}
    ).drain_seconds
    assert drain >= Settings().drain_seconds == 10
    # celeryconfig: worker_soft_shutdown_timeout = drain_seconds + 2.
    assert seconds(worker["stop_grace_period"]) > drain + 2


def test_only_postgres_and_redis_have_named_volumes() -> None:
    declared = set(compose()["volumes"])
    used = {
        str(v).split(":", 1)[0]
        for service in services().values()
        for v in service.get("volumes", [])
        if not str(v).startswith((".", "/"))
    }
    assert used == declared == {"pgdata", "redisdata"}


# --- Dockerfile -----------------------------------------------------------------------


def test_dockerfile_base_and_user() -> None:
    steps = dockerfile_instructions()
    assert steps[0] == ("FROM", "python:3.11-slim")
    users = [args for instruction, args in steps if instruction == "USER"]
    assert users and users[-1] not in ("root", "0", "0:0")
    last_user = max(i for i, (instruction, _) in enumerate(steps) if instruction == "USER")
    assert not [a for instruction, a in steps[last_user:] if instruction == "RUN"], (
        "RUN after USER: installs would need root"
    )


def test_dockerfile_installs_from_the_lock_with_hashes() -> None:
    steps = dockerfile_instructions()
    runs = [
        (i, shlex.split(args))
        for i, (instruction, args) in enumerate(steps)
        if instruction == "RUN"
    ]
    locked = [
        (i, words)
        for i, words in runs
        if "install" in words
        and "-r" in words
        and words[words.index("-r") + 1] == "requirements.lock"
    ]
    assert len(locked) == 1, runs
    index, words = locked[0]
    assert "--require-hashes" in words
    assert "--no-deps" in words
    copied = [i for i, (instruction, args) in enumerate(steps) if instruction == "COPY"]
    assert any(i < index and "requirements.lock" in steps[i][1].split() for i in copied), (
        "requirements.lock is not copied before it is installed"
    )
    project = [(i, w) for i, w in runs if "install" in w and "." in w and "-r" not in w]
    assert len(project) == 1, runs
    project_index, project_words = project[0]
    assert project_index > index
    assert {"--no-deps", "--no-build-isolation"} <= set(project_words)
    assert "-e" not in project_words


def test_no_build_isolation_has_its_backend_in_the_lock() -> None:
    lock = (ROOT / "requirements.lock").read_text()
    for package in ("setuptools", "wheel"):
        assert re.search(rf"^{package}==\S+ \\$", lock, re.MULTILINE), package


def test_dockerfile_env_and_cmd() -> None:
    steps = dockerfile_instructions()
    env = dict(
        word.split("=", 1)
        for instruction, args in steps
        if instruction == "ENV"
        for word in shlex.split(args)
    )
    assert env.get("LITELLM_LOCAL_MODEL_COST_MAP") == "True"
    # `celery` (a console script) does not put the working directory on
    # sys.path: agent modules copied with the source must import all the same.
    workdirs = [args for instruction, args in steps if instruction == "WORKDIR"]
    assert workdirs and workdirs[-1] in env.get("PYTHONPATH", "").split(":")
    cmds = [args for instruction, args in steps if instruction == "CMD"]
    assert len(cmds) == 1
    assert yaml.safe_load(cmds[0]) == ["celery", "-A", "tasks", "worker", "-l", "INFO"]


def dockerignore_patterns() -> set[str]:
    return {
        line.strip().rstrip("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }


def test_dockerignore_keeps_local_state_out() -> None:
    patterns = dockerignore_patterns()
    assert {".venv", ".runwright", ".git", ".mypy_cache", ".pytest_cache"} <= patterns
    assert "**/__pycache__" in patterns or "__pycache__" in patterns
    # Never the files the image is built from.
    assert not patterns & {"requirements.lock", "pyproject.toml", "runner", "store", "tasks"}
