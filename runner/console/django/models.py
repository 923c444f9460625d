"""Runwright's ``runs`` and ``approvals`` tables as unmanaged Django models:
for the admin's read-only lists, and to own the console's permissions.

Django never creates, alters or writes these tables (``managed = False``,
and the admin refuses every change); only the columns the admin shows are
mapped, under their persisted names (``tests/unit/test_compat.py`` pins
them). Reads go to :func:`~runner.console.django.db.database_alias`.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from runner.console.django.db import database_alias


class JSONColumn(models.JSONField):
    """A ``json`` column (Runwright keeps what a run's user writes as ``json``,
    not ``jsonb``, to keep its key order). The driver decodes ``json`` itself;
    Django's field expects the text that it gets for ``jsonb``."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return value


class RunwrightManager(models.Manager):
    """Reads from Runwright's database, with or without the router."""

    def get_queryset(self) -> Any:
        return super().get_queryset().using(database_alias())


class Run(models.Model):
    id = models.UUIDField(primary_key=True)
    agent = models.TextField()
    status = models.TextField()
    trigger = JSONColumn()
    trigger_id = models.TextField()
    thread = models.TextField(null=True)
    concurrency_key = models.TextField(null=True)
    model = models.TextField(null=True)
    output = JSONColumn(null=True)
    error_code = models.TextField(null=True)
    error_message = models.TextField(null=True)
    steps_used = models.IntegerField()
    input_tokens = models.BigIntegerField()
    output_tokens = models.BigIntegerField()
    cost_usd = models.FloatField()
    cancel_requested = models.BooleanField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)

    objects = RunwrightManager()

    class Meta:
        managed = False
        db_table = "runs"
        # Only viewing is a model permission; the rest are the console's actions.
        default_permissions = ("view",)
        permissions = [
            ("cancel_run", "Can cancel runs in the console"),
            ("retry_run", "Can retry runs in the console"),
            ("resolve_effect", "Can record what an effect of unknown outcome did"),
            ("view_payloads", "Can see what runs carry in the console"),
            ("decide_runs", "Can decide in the console (with each action's own permission)"),
        ]

    def __str__(self) -> str:
        return f"{self.agent} {self.id}"


class Approval(models.Model):
    approval_id = models.UUIDField(primary_key=True)
    run = models.ForeignKey(
        Run,
        on_delete=models.DO_NOTHING,
        db_column="run_id",
        db_constraint=False,
        related_name="approvals",
    )
    step_index = models.IntegerField()
    tool_call_id = models.TextField()
    tool_name = models.TextField()
    input = JSONColumn(null=True)
    expires_at = models.DateTimeField()
    on_expire = models.TextField()
    decision = models.TextField(null=True)
    reason = models.TextField(null=True)
    decided_by = models.TextField(null=True)
    decided_at = models.DateTimeField(null=True)
    notified_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField()

    objects = RunwrightManager()

    class Meta:
        managed = False
        db_table = "approvals"
        default_permissions = ("view",)
        permissions = [("decide_approval", "Can approve or deny in the console")]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.approval_id}"
