"""The console's models: Runwright's own tables, unmanaged (Django creates
and migrates nothing); shipped so that a project's makemigrations never
writes a migration into this package. Keep it in step with models.py:
tests/console/test_django.py runs makemigrations --check."""

from __future__ import annotations

from django.db import migrations, models

import runner.console.django.models


class Migration(migrations.Migration):
    initial = True

    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.CreateModel(
            name="Run",
            fields=[
                ("id", models.UUIDField(primary_key=True, serialize=False)),
                ("agent", models.TextField()),
                ("status", models.TextField()),
                ("trigger", runner.console.django.models.JSONColumn()),
                ("trigger_id", models.TextField()),
                ("thread", models.TextField(null=True)),
                ("concurrency_key", models.TextField(null=True)),
                ("model", models.TextField(null=True)),
                ("output", models.JSONField(null=True)),
                ("error_code", models.TextField(null=True)),
                ("error_message", models.TextField(null=True)),
                ("steps_used", models.IntegerField()),
                ("input_tokens", models.BigIntegerField()),
                ("output_tokens", models.BigIntegerField()),
                ("cost_usd", models.FloatField()),
                ("cancel_requested", models.BooleanField()),
                ("created_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField()),
                ("started_at", models.DateTimeField(null=True)),
                ("finished_at", models.DateTimeField(null=True)),
            ],
            options={
                "db_table": "runs",
                "permissions": [
                    ("cancel_run", "Can cancel runs in the console"),
                    ("retry_run", "Can retry runs in the console"),
                ],
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
        migrations.CreateModel(
            name="Approval",
            fields=[
                ("approval_id", models.UUIDField(primary_key=True, serialize=False)),
                (
                    "run",
                    models.ForeignKey(
                        db_column="run_id",
                        db_constraint=False,
                        on_delete=models.DO_NOTHING,
                        related_name="approvals",
                        to="runwright_console.run",
                    ),
                ),
                ("step_index", models.IntegerField()),
                ("tool_call_id", models.TextField()),
                ("tool_name", models.TextField()),
                ("input", models.JSONField(null=True)),
                ("expires_at", models.DateTimeField()),
                ("on_expire", models.TextField()),
                ("decision", models.TextField(null=True)),
                ("reason", models.TextField(null=True)),
                ("decided_by", models.TextField(null=True)),
                ("decided_at", models.DateTimeField(null=True)),
                ("notified_at", models.DateTimeField(null=True)),
                ("created_at", models.DateTimeField()),
            ],
            options={
                "db_table": "approvals",
                "permissions": [("decide_approval", "Can approve or deny in the console")],
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
    ]
