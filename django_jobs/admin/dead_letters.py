"""Dead letters: the jobs that used up their attempts, to read and retry."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..display import format_age
from ..models import DeadLetter, Job, JobStatus
from .common import (
    JOB_FIELDS,
    AttemptInline,
    CappedPaginator,
    FinishedOnlyDeleteMixin,
    JobDisplayMixin,
    JobSearchMixin,
    ReadOnlyAdminMixin,
)
from .filters import NameFilter, QueueFilter
from .job_actions import JobActionsMixin


@admin.register(DeadLetter)
class DeadLetterAdmin(
    JobActionsMixin,
    FinishedOnlyDeleteMixin,
    JobSearchMixin,
    JobDisplayMixin,
    ReadOnlyAdminMixin,
    admin.ModelAdmin,
):
    change_list_template = "admin/django_jobs/job/change_list.html"  # the jobs list's look
    list_display = (
        "id",
        "name_and_queue",
        "finished_at_shown",
        "age",
        "attempts",
        "short_error",
    )
    list_filter = (QueueFilter, NameFilter)
    search_fields = ("name", "unique_key", "last_error")
    # The finished index serves the newest-first order; other orders would sort the table.
    sortable_by = ("id", "finished_at_shown")
    show_full_result_count = False
    paginator = CappedPaginator
    fields = readonly_fields = JOB_FIELDS
    inlines = [AttemptInline]
    actions = ["delete_selected", "retry_selected"]
    ordering = ("-finished_at", "-id")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).filter(status=JobStatus.DEAD_LETTERED)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj) or request.user.has_perm(
            "django_jobs.view_job"
        )

    @admin.display(description=_("age"))
    def age(self, obj: Job) -> str:
        """How long ago it was dead-lettered."""
        if obj.finished_at is None:
            return ""
        return format_age(timezone.now() - obj.finished_at)
