"""The permission to record what an effect of unknown outcome did."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("runwright_console", "0001_initial")]

    operations = [
        migrations.AlterModelOptions(
            name="run",
            options={
                "db_table": "runs",
                "permissions": [
                    ("cancel_run", "Can cancel runs in the console"),
                    ("retry_run", "Can retry runs in the console"),
                    ("resolve_effect", "Can record what an effect of unknown outcome did"),
                ],
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
    ]
