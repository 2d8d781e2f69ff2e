"""Jobs: every job, its progress and attempts, and the buttons that steer it."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from ..models import Job
from .common import (
    JOB_FIELDS,
    AttemptInline,
    CappedPaginator,
    FinishedOnlyDeleteMixin,
    JobDisplayMixin,
    JobSearchMixin,
    NameFilter,
    QueueFilter,
    ReadOnlyAdminMixin,
    ScheduleFilter,
)
from .job_actions import JobActionsMixin


@admin.register(Job)
class JobAdmin(
    JobActionsMixin,
    FinishedOnlyDeleteMixin,
    JobSearchMixin,
    JobDisplayMixin,
    ReadOnlyAdminMixin,
    admin.ModelAdmin,
):
    list_display = (
        "id",
        "name",
        "queue",
        "status_badge",
        "attempts",
        "run_at_shown",
        "duration",
        "progress",
        "short_error",
    )
    # Choices from JobStatus, the settings and the registry: never read from the table.
    list_filter = ("status", QueueFilter, NameFilter, ScheduleFilter)
    search_fields = ("name", "unique_key")
    # Sorting by another column would sort the whole table; the id is the primary key.
    sortable_by = ("id",)
    show_full_result_count = False
    paginator = CappedPaginator
    fields = readonly_fields = JOB_FIELDS
    inlines = [AttemptInline]
    actions = [
        "delete_selected",
        "retry_selected",
        "retry_now_selected",
        "run_now_selected",
        "cancel_selected",
    ]
    list_select_related = False

    def get_urls(self) -> list[Any]:
        return [*self.verb_urls(), *super().get_urls()]
