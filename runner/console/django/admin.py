"""Runs and approvals in the Django admin, read-only: staff with
``view_run``/``view_approval`` list, filter and open them; nobody adds,
changes or deletes one here (the engine does, and the console asks it to).
Each row links to its run's console page."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.db import connections
from django.db.models import Q
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from runner.console.django.db import APP_LABEL, database_alias
from runner.console.django.models import Approval, Run
from store.models import Decision

PENDING = "pending"


class ReadOnlyAdmin(admin.ModelAdmin):
    # Counting a large table twice per page is a cost the list need not pay.
    show_full_result_count = False
    list_per_page = 50

    def has_view_permission(self, request: Any, obj: Any = None) -> bool:
        # Runwright's tables are in Postgres only: on another database (a
        # project on the local stack, with no alias for it) there is no list.
        postgres = connections[database_alias()].vendor == "postgresql"
        return postgres and bool(super().has_view_permission(request, obj))

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


def console_link(run_id: Any) -> str:
    try:
        href = reverse(f"{APP_LABEL}:run", args=[str(run_id)])
    except NoReverseMatch:  # the console is not mounted: the admin alone
        return "-"
    link: str = format_html('<a href="{}">console</a>', href)  # marked safe: not escaped again
    return link


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent", "status", "thread", "created_at", "finished_at", "console")
    list_filter = ("status", "agent")
    search_fields = ("=id", "=thread")
    search_help_text = "A run id, or a thread, whole."
    ordering = ("-id",)  # ids are UUIDv7: newest first, by the primary key
    fields = (
        "id",
        "agent",
        "status",
        "console",
        "thread",
        "trigger_id",
        "trigger",
        "concurrency_key",
        "model",
        "output",
        "error_code",
        "error_message",
        "steps_used",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "cancel_requested",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
    )
    readonly_fields = fields

    @admin.display(description="Console")
    def console(self, run: Run) -> str:
        return console_link(run.id)

    def get_search_results(self, request: Any, queryset: Any, search_term: str) -> tuple[Any, bool]:
        return _exact(queryset, search_term, ("id",), ("thread",)), False


class DecisionFilter(admin.SimpleListFilter):
    title = "decision"
    parameter_name = "decision"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [(PENDING, PENDING)] + [(d.value, d.value) for d in Decision]

    def queryset(self, request: Any, queryset: Any) -> Any:
        value = self.value()
        if value == PENDING:
            return queryset.filter(decision__isnull=True)
        if value in {d.value for d in Decision}:
            return queryset.filter(decision=value)
        return queryset


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = (
        "approval_id",
        "tool_name",
        "agent",
        "decision_text",
        "decided_by",
        "created_at",
        "expires_at",
        "console",
    )
    list_filter = (DecisionFilter, "tool_name", "run__agent")
    list_select_related = ("run",)
    search_fields = ("=approval_id", "=run__id")
    search_help_text = "An approval id, or its run's id, whole."
    ordering = ("-approval_id",)  # UUIDv7 too
    fields = (
        "approval_id",
        "run",
        "console",
        "step_index",
        "tool_name",
        "tool_call_id",
        "input",
        "decision",
        "reason",
        "decided_by",
        "decided_at",
        "on_expire",
        "expires_at",
        "notified_at",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description="Agent", ordering="run__agent")
    def agent(self, approval: Approval) -> str:
        return str(approval.run.agent)

    @admin.display(description="Decision", ordering="decision")
    def decision_text(self, approval: Approval) -> str:
        return str(approval.decision or PENDING)

    @admin.display(description="Console")
    def console(self, approval: Approval) -> str:
        return console_link(approval.run_id)

    def get_search_results(self, request: Any, queryset: Any, search_term: str) -> tuple[Any, bool]:
        return _exact(queryset, search_term, ("approval_id", "run_id")), False


def _exact(queryset: Any, term: str, ids: tuple[str, ...], texts: tuple[str, ...] = ()) -> Any:
    """Rows where one of ``ids`` (UUID columns) or ``texts`` equals the whole
    term: each an indexed lookup, where Django's substring search would scan
    the table (and nobody searches for part of an id)."""
    term = term.strip()
    if not term:
        return queryset
    match = Q(pk__in=[])  # nothing, whatever is OR-ed to it
    try:
        as_uuid = uuid.UUID(term)
    except ValueError:
        as_uuid = None
    if as_uuid is not None:
        for field in ids:
            match |= Q(**{field: as_uuid})
    for field in texts:
        match |= Q(**{field: term})
    return queryset.filter(match)
