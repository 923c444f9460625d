"""Who sees payloads and who decides: the permissions ``view_payloads`` and
``decide_runs`` (runner/console/abilities.py)."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("runwright_console", "0003_json_columns")]

    operations = [
        migrations.AlterModelOptions(
            name="run",
            options={
                "db_table": "runs",
                "permissions": [
                    ("cancel_run", "Can cancel runs in the console"),
                    ("retry_run", "Can retry runs in the console"),
                    ("resolve_effect", "Can record what an effect of unknown outcome did"),
                    ("view_payloads", "Can see what runs carry in the console"),
                    (
                        "decide_runs",
                        "Can decide in the console (with each action's own permission)",
                    ),
                ],
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
    ]
