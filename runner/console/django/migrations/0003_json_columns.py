"""A run's output and an approval's arguments are ``json`` columns (Runwright's
revision 0012), read as the trigger is."""

from __future__ import annotations

from django.db import migrations

import runner.console.django.models


class Migration(migrations.Migration):
    dependencies = [("runwright_console", "0002_resolve_effect_permission")]

    operations = [
        migrations.AlterField(
            model_name="run",
            name="output",
            field=runner.console.django.models.JSONColumn(null=True),
        ),
        migrations.AlterField(
            model_name="approval",
            name="input",
            field=runner.console.django.models.JSONColumn(null=True),
        ),
    ]
