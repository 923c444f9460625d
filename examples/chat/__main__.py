"""``python -m examples.chat [--port 5001]``: the chat example in one command.

It uses the services ``RUNWRIGHT_DATABASE_URL`` and ``RUNWRIGHT_REDIS_URL``
name, or starts the local stack (a Postgres and a Redis under
``./.runwright/``), migrates the database, starts a Celery worker for the
chat agent (``celery -A tasks worker``), and serves the page at
http://127.0.0.1:5001/ until Ctrl-C, which stops the worker too.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

from runner.core.engine.engine import Engine
from runner.core.settings import Settings, resolve
from store.migrate import upgrade


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=5001)
    args = parser.parse_args()
    settings = resolve(Settings.from_env())
    assert settings.database_url and settings.redis_url
    upgrade(settings.database_url)
    env = {
        **os.environ,
        "RUNWRIGHT_DATABASE_URL": settings.database_url,
        "RUNWRIGHT_REDIS_URL": settings.redis_url,
        "RUNWRIGHT_AGENTS": "examples.chat.agent",
        "RUNWRIGHT_SECRET_KEY": settings.secret_key or "",
    }
    os.environ.update(env)
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-l", "WARNING", "-c", "8"],
        env=env,  # in this process's group: Ctrl-C stops it too
    )
    import examples.chat.agent  # noqa: F401  (this process's engine knows the agent)
    from examples.chat.app import create_app

    engine = Engine.from_env()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        print(f"chat: http://127.0.0.1:{args.port}/", flush=True)
        create_app(engine).run(host="127.0.0.1", port=args.port, threaded=True)
    except KeyboardInterrupt:
        pass
    finally:
        worker.terminate()
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
        engine.close()


if __name__ == "__main__":
    main()
