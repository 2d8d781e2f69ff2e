"""Dead letters: the jobs that used up their attempts, to read and retry."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.text import Truncator

from ..models import DeadLetter, Job, JobStatus
from .common import (
    JOB_FIELDS,
    AttemptInline,
    MaskedPayloadMixin,
    ReadOnlyAdminMixin,
    RetryActionMixin,
)


@admin.register(DeadLetter)
class DeadLetterAdmin(MaskedPayloadMixin, RetryActionMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "name", "queue", "finished_at", "attempts_used", "short_error")
    list_filter = ("queue", "name")
    search_fields = ("name", "last_error", "=id")
    fields = readonly_fields = JOB_FIELDS
    inlines = [AttemptInline]
    actions = ["retry_selected"]
    ordering = ("-finished_at", "-id")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).filter(status=JobStatus.DEAD_LETTERED)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj) or request.user.has_perm(
            "django_jobs.view_job"
        )

    @admin.display(description="last error")
    def short_error(self, obj: Job) -> str:
        return Truncator(obj.last_error).chars(120)
