"""The unprivileged user the local stack's Postgres runs as when we are root
(Postgres refuses to run as root). Part of ``store/local.py``."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from pathlib import Path

PG_USER_NAME = "runwright"


def unprivileged_user() -> pwd.struct_passwd | None:
    """The user Postgres runs as when we are root (Postgres refuses root)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(PG_USER_NAME)
    except KeyError:
        pass
    try:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                PG_USER_NAME,
            ],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(PG_USER_NAME)
    except (OSError, subprocess.CalledProcessError, KeyError):
        return pwd.getpwnam("nobody")


def make_traversable(path: Path) -> None:
    """Let another user reach ``path``: add o+x to every ancestor that lacks it."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)
