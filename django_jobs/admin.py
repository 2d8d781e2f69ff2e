"""The admin: jobs with their attempts, dead letters to retry, recurring schedules."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.text import Truncator

from .leases import retry_job
from .models import Attempt, DeadLetter, Job, JobStatus, RecurringJob, Worker

RETRY_PERMISSION = "django_jobs.change_job"


class ReadOnlyAdminMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class AttemptInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = ("number", "owner", "started_at", "finished_at", "outcome", "error")
    readonly_fields = fields
    ordering = ("number",)


class RetryActionMixin:
    @admin.action(description="Retry selected jobs", permissions=["retry"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        selected = list(queryset.values_list("id", "status"))
        dead = [job_id for job_id, status in selected if status == JobStatus.DEAD_LETTERED]
        retried = sum(1 for job_id in dead if retry_job(job_id))
        skipped = len(selected) - retried
        if retried:
            self.message_user(request, f"{retried} job(s) queued again.", messages.SUCCESS)  # type: ignore[attr-defined]
        if skipped:
            self.message_user(  # type: ignore[attr-defined]
                request,
                f"{skipped} job(s) skipped: not dead-lettered, or a live job has the same "
                "unique key.",
                messages.WARNING,
            )

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(RETRY_PERMISSION)


@admin.register(Job)
class JobAdmin(RetryActionMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
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
    readonly_fields = [field.name for field in Job._meta.fields]
    inlines = [AttemptInline]
    actions = ["retry_selected"]
    list_select_related = False

    @admin.display(description="attempts")
    def attempts(self, obj: Job) -> str:
        return f"{obj.attempts_used}/{obj.max_attempts}"


@admin.register(DeadLetter)
class DeadLetterAdmin(RetryActionMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "name", "queue", "finished_at", "attempts_used", "short_error")
    list_filter = ("queue", "name")
    search_fields = ("name", "last_error", "=id")
    readonly_fields = [field.name for field in Job._meta.fields]
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


@admin.register(RecurringJob)
class RecurringJobAdmin(admin.ModelAdmin):
    list_display = ("name", "job_name", "cron", "timezone", "enabled", "next_run_at", "last_run_at")
    list_filter = ("enabled",)
    search_fields = ("name", "job_name")
    readonly_fields = ("next_run_at", "last_run_at", "created_at")


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Live worker processes; a registration is swept a lease after its last heartbeat."""

    list_display = ("id", "host", "pid", "queues", "started_at", "last_heartbeat_at", "running")
    readonly_fields = ("id", "host", "pid", "queues", "started_at", "last_heartbeat_at")
    search_fields = ("id", "host")

    @admin.display(description="running jobs")
    def running(self, obj: Worker) -> int:
        return Job.objects.filter(status=JobStatus.RUNNING, lease_owner=obj.id).count()
