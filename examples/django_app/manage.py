#!/usr/bin/env python
"""``python examples/django_app/manage.py migrate``, ``... createsuperuser`` (to
sign in to the console at /console/ through /admin/), then ``... runserver 5000``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
