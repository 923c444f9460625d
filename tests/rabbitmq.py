"""A RabbitMQ node of a test's own, which the test may stop and start again.

The node keeps everything under its folder: its Mnesia database, logs,
configuration, Erlang cookie (``HOME``) and an ``epmd`` of its own on a port
of its own, so it never meets the machine's RabbitMQ (Debian's
``/etc/rabbitmq/rabbitmq-env.conf`` names a node and a port) and leaves no
daemon behind. Durable queues and persistent messages (Celery's) survive a
restart, as on a production node.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from kombu import Connection

from store.local import free_port

# Debian's /usr/sbin/rabbitmq-server is a wrapper that switches to the
# `rabbitmq` user; the script it calls runs the node as the caller.
_SCRIPT_DIRS = (Path("/usr/lib/rabbitmq/bin"), Path("/usr/local/lib/rabbitmq/bin"))


def rabbitmq_script(name: str) -> Path | None:
    """``rabbitmq-server`` or ``rabbitmqctl``, as a script that runs as the caller."""
    for folder in _SCRIPT_DIRS:
        if (folder / name).is_file():
            return folder / name
    found = shutil.which(name)
    return Path(found) if found else None


def rabbitmq_missing() -> str | None:
    """Why no node can be started here, or None."""
    if rabbitmq_script("rabbitmq-server") is None:
        return "rabbitmq-server is not installed (CI has it)"
    if shutil.which("epmd") is None:
        return "epmd (Erlang) is not installed (CI has it)"
    return None


class RabbitNode:
    """One RabbitMQ node in ``root`` listening on 127.0.0.1:``port``."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root.resolve()
        self.port = port or free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.name = f"rwtest{self.port}@localhost"
        self.log_path = self.root / "node.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def env(self) -> dict[str, str]:
        root = self.root
        return {
            **os.environ,
            "HOME": str(root),  # the Erlang cookie is made and read here
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_CONF_ENV_FILE": str(root / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(root / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(root / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(root / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(root / "mnesia"),
            "RABBITMQ_LOG_BASE": str(root / "log"),
            "RABBITMQ_PID_FILE": str(root / "node.pid"),
        }

    def _configure(self) -> None:
        for folder in ("mnesia", "log"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        (self.root / "rabbitmq-env.conf").write_text("")
        (self.root / "enabled_plugins").write_text("[].\n")  # no management listener
        (self.root / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            # A shared /tmp that is nearly full must not block publishers.
            "disk_free_limit.absolute = 1MB\n"
        )

    def start(self, timeout: float = 90) -> None:
        """Start the node and wait until it accepts AMQP connections."""
        script = rabbitmq_script("rabbitmq-server")
        if script is None:
            raise RuntimeError("rabbitmq-server is not installed")
        self._configure()
        log = open(self.log_path, "ab")  # noqa: SIM115  (the child holds it)
        try:
            self._proc = subprocess.Popen(
                [str(script)],
                env=self.env(),
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"RabbitMQ exited:\n{self.log()[-3000:]}")
            if self.accepts():
                return
            time.sleep(0.25)
        raise RuntimeError(f"RabbitMQ did not come up in {timeout:.0f} s:\n{self.log()[-3000:]}")

    def accepts(self) -> bool:
        try:
            with Connection(self.url, connect_timeout=1) as conn:
                conn.ensure_connection(max_retries=1, timeout=1)
            return True
        except Exception:
            return False

    def stop(self, timeout: float = 30) -> None:
        """Stop the node (SIGTERM: it closes its connections and halts)."""
        self._signal(signal.SIGTERM)
        if self._proc is None:
            return
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self._proc.wait(10)
        # The node's children (its port programs) go with its process group.
        self._signal(signal.SIGKILL)
        self._proc = None

    def restart(self, down_seconds: float = 1.0) -> None:
        """Stop the node and start it again on the same port."""
        self.stop()
        time.sleep(down_seconds)
        self.start()

    def close(self) -> None:
        """Stop the node and its epmd; nothing of it keeps running."""
        self.stop()
        epmd = shutil.which("epmd")
        if epmd is not None:
            subprocess.run(
                [epmd, "-port", str(self.epmd_port), "-kill"],
                env=self.env(),
                capture_output=True,
                timeout=10,
                check=False,
            )

    def log(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        for path in sorted((self.root / "log").glob("*.log")):
            text += path.read_text(errors="replace")
        return text

    def _signal(self, sig: int) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, sig)
