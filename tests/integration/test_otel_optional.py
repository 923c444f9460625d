"""OpenTelemetry is optional (issue 13): without ``RUNWRIGHT_OTEL`` a worker
loads nothing of runwright's tracing, and without the extra installed nothing
of OpenTelemetry at all; with it, a worker installs a tracer provider only if
the process has none. Each check runs in a fresh interpreter, whose
``sys.modules`` and global tracer provider are the evidence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.services import ROOT

SECRET = "test:test-secret-for-runwright-tests-only"

# Makes the extra look uninstalled: every opentelemetry import fails.
WITHOUT_EXTRA = """
import importlib.abc, sys
class _NoOtel(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoOtel())
"""

# A worker's life in one process: the engine from the environment, a run
# started and executed, the worker's observers started and stopped.
WORKER = """
import json, sys
import tasks
from runner import Engine
from runner.core.observe import setup
from runner.core.settings import Settings
engine = Engine.from_env(enqueue=None)
settings = Settings.from_env()
setup.start_worker(settings, [])
import tests.agents
run = engine.start("five", {"n": 1})
done = engine.execute(run.id)
assert done is not None and done.status.value == "completed", done
setup.stop_worker(settings)
engine.close()
print(json.dumps({
    "modules": sorted(m for m in sys.modules if m.startswith(("opentelemetry", "runner.observe"))),
    "observers": [type(o).__name__ for o in engine.deps.observer.observers],
    "trace_context": done.trace_context,
}))
"""


def _probe(code: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(line)
    return result


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RUNWRIGHT_", "OTEL_"))}
    return {
        **base,
        "PYTHONPATH": str(ROOT),
        "RUNWRIGHT_HOME": str(tmp_path),
        "RUNWRIGHT_SECRET_KEY": SECRET,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        **extra,
    }


def test_without_the_extra_a_worker_imports_nothing_of_opentelemetry(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    env = _env(tmp_path, RUNWRIGHT_DATABASE_URL=database_url, RUNWRIGHT_REDIS_URL=redis_url)
    report = _probe(WITHOUT_EXTRA + WORKER, env, tmp_path)
    assert [m for m in report["modules"] if m.startswith("opentelemetry")] == []
    assert "runner.observe.otel" not in report["modules"]
    assert report["observers"] == ["LogObserver"]
    assert report["trace_context"] is None


def test_with_the_extra_but_tracing_off_runwright_loads_no_tracing(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    """Other libraries may load OpenTelemetry's API when it is installed
    (redis-py does, for its own metrics); runwright's tracer, the SDK's
    tracing and the exporter stay out."""
    env = _env(tmp_path, RUNWRIGHT_DATABASE_URL=database_url, RUNWRIGHT_REDIS_URL=redis_url)
    report = _probe(WORKER, env, tmp_path)
    assert "runner.observe.otel" not in report["modules"]
    tracing = ("opentelemetry.sdk.trace", "opentelemetry.exporter")
    assert [m for m in report["modules"] if m.startswith(tracing)] == []
    assert report["observers"] == ["LogObserver"]


def test_with_tracing_on_but_no_extra_the_engine_refuses_to_start(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    env = _env(
        tmp_path,
        RUNWRIGHT_DATABASE_URL=database_url,
        RUNWRIGHT_REDIS_URL=redis_url,
        RUNWRIGHT_OTEL="1",
    )
    code = WITHOUT_EXTRA + (
        "from runner import Engine\n"
        "from runner.core.errors import ConfigurationError\n"
        "try:\n"
        "    Engine.from_env(enqueue=None)\n"
        "except ConfigurationError as exc:\n"
        "    import json; print(json.dumps({'error': str(exc)}))\n"
    )
    report = _probe(code, env, tmp_path)
    assert "pip install 'runwright[otel]'" in report["error"]


def test_with_tracing_on_a_worker_installs_an_exporting_provider(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    # Nothing listens on the endpoint: the export at shutdown fails, quietly.
    env = _env(
        tmp_path,
        RUNWRIGHT_DATABASE_URL=database_url,
        RUNWRIGHT_REDIS_URL=redis_url,
        RUNWRIGHT_OTEL="1",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        OTEL_EXPORTER_OTLP_TIMEOUT="1",
    )
    report = _probe(WORKER, env, tmp_path)
    assert "runner.observe.otel" in report["modules"]
    assert report["observers"] == ["LogObserver", "OtelObserver"]
    # Started outside any trace: the run carries its start span's context.
    assert set(report["trace_context"]) == {"traceparent"}


PROVIDER = """
import json, os
from opentelemetry import trace
from runner.observe import otel
from runner.core.settings import Settings
{setup}
provider = trace.get_tracer_provider()
processors = getattr(getattr(provider, "_active_span_processor", None), "_span_processors", ())
otel.stop_worker()
print(json.dumps({{
    "installed": installed,
    "provider": type(provider).__name__,
    "service": getattr(provider, "resource", None) and provider.resource.attributes["service.name"],
    # The batch processor's delay: private to the SDK, pinned by the lock.
    "delays": [p._batch_processor._schedule_delay_millis for p in processors],
}}))
"""


def _provider(tmp_path: Path, setup: str, **env: str) -> dict[str, Any]:
    return _probe(PROVIDER.format(setup=setup), _env(tmp_path, **env), tmp_path)


def test_a_worker_names_its_service_and_exports_every_second(tmp_path: Path) -> None:
    setup = "otel.start_worker(Settings()); installed = True"
    assert _provider(tmp_path, setup) == {
        "installed": True,
        "provider": "TracerProvider",
        "service": "runwright-worker",
        "delays": [1000],
    }
    named = _provider(
        tmp_path, setup, OTEL_SERVICE_NAME="billing-worker", OTEL_BSP_SCHEDULE_DELAY="250"
    )
    assert (named["service"], named["delays"]) == ("billing-worker", [250])


def test_configure_names_the_app_and_keeps_a_provider_the_app_installed(tmp_path: Path) -> None:
    configured = _provider(tmp_path, "installed = otel.configure('shop-web')")
    assert (configured["installed"], configured["service"]) == (True, "shop-web")
    own = (
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.resources import Resource\n"
        "mine = Resource.create({'service.name': 'mine'})\n"
        "trace.set_tracer_provider(TracerProvider(resource=mine))\n"
        "installed = otel.configure('shop-web')"
    )
    kept = _provider(tmp_path, own)
    assert (kept["installed"], kept["service"], kept["delays"]) == (False, "mine", [])
    disabled = _provider(
        tmp_path, "installed = otel.configure('shop-web')", OTEL_SDK_DISABLED="true"
    )
    assert (disabled["installed"], disabled["provider"]) == (False, "ProxyTracerProvider")
