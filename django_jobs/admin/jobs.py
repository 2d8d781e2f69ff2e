"""Jobs: every job, with its attempts."""

from __future__ import annotations

from django.contrib import admin

from ..models import Job
from .common import (
    JOB_FIELDS,
    AttemptInline,
    CancelActionMixin,
    MaskedPayloadMixin,
    ReadOnlyAdminMixin,
    RetryActionMixin,
)


@admin.register(Job)
class JobAdmin(
    MaskedPayloadMixin, RetryActionMixin, CancelActionMixin, ReadOnlyAdminMixin, admin.ModelAdmin
):
    list_display = (
        "id",
        "name",
        "queue",
        "status",
        "priority",
        "run_at",
        "attempts",
        "created_at",
        "finished_at",
    )
    list_filter = ("status", "queue", "name")
    search_fields = ("name", "unique_key", "=id")
    date_hierarchy = "created_at"
    fields = readonly_fields = JOB_FIELDS
    inlines = [AttemptInline]
    actions = ["retry_selected", "cancel_selected"]
    list_select_related = False

    @admin.display(description="attempts")
    def attempts(self, obj: Job) -> str:
        return f"{obj.attempts_used}/{obj.max_attempts}"
