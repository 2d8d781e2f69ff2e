"""The admin: jobs with their attempts, dead letters to retry, recurring schedules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.text import Truncator

from .control import cancel_job, retry_job
from .cron import get_zone, validate_cron
from .exceptions import JobNotCancellable, JobsError
from .models import Attempt, DeadLetter, Job, JobStatus, RecurringJob, Worker
from .payloads import encode_payload
from .recurring import change_schedule, check_schedule_options, first_run_at
from .recurring import run_now as enqueue_run_now
from .redaction import masked_json
from .registry import get_definition

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


# Every Job field, the payload shown with the values of its secret keys masked.
JOB_FIELDS = tuple(
    "masked_payload" if field.name == "payload" else field.name for field in Job._meta.fields
)


class MaskedPayloadMixin:
    """The payload as stored errors show it: the values of secret keys masked."""

    @admin.display(description="payload")
    def masked_payload(self, obj: Job) -> str:
        return masked_json(obj.payload)


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


class CancelActionMixin:
    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        cancelled = requested = skipped = 0
        for job_id in queryset.values_list("id", flat=True):
            try:
                job = cancel_job(job_id)
            except (JobNotCancellable, Job.DoesNotExist):
                skipped += 1
                continue
            if job.status == JobStatus.CANCELLED:
                cancelled += 1
            else:
                requested += 1
        if cancelled:
            self.message_user(request, f"{cancelled} job(s) cancelled.", messages.SUCCESS)  # type: ignore[attr-defined]
        if requested:
            self.message_user(  # type: ignore[attr-defined]
                request,
                f"{requested} running job(s) asked to stop: their workers cancel them at "
                "their next heartbeat.",
                messages.SUCCESS,
            )
        if skipped:
            self.message_user(  # type: ignore[attr-defined]
                request, f"{skipped} job(s) skipped: already finished.", messages.WARNING
            )

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(RETRY_PERMISSION)


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


class RecurringJobForm(forms.ModelForm):
    class Meta:
        model = RecurringJob
        fields = [
            "name",
            "job_name",
            "cron",
            "timezone",
            "payload",
            "queue",
            "priority",
            "max_attempts",
            "enabled",
            "overlap",
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        checks: tuple[tuple[str, Callable[[Any], Any]], ...] = (
            ("cron", validate_cron),
            ("timezone", get_zone),
            ("job_name", get_definition),
            ("payload", encode_payload),
            ("queue", lambda queue: check_schedule_options(queue=queue)),
            ("priority", lambda priority: check_schedule_options(priority=priority)),
            ("max_attempts", lambda attempts: check_schedule_options(max_attempts=attempts)),
        )
        for field, check in checks:
            if data.get(field) is not None and field not in self.errors:
                try:
                    check(data[field])
                except JobsError as exc:
                    self.add_error(field, str(exc))
        return data


@admin.register(RecurringJob)
class RecurringJobAdmin(admin.ModelAdmin):
    form = RecurringJobForm
    list_display = (
        "name",
        "job_name",
        "cron",
        "timezone",
        "enabled",
        "next_run_at",
        "last_run_at",
        "source",
    )
    list_filter = ("enabled", "source")
    search_fields = ("name", "job_name")
    readonly_fields = ("next_run_at", "last_run_at", "source", "created_at")
    actions = ["enable", "disable", "run_now"]

    def save_model(self, request: HttpRequest, obj: RecurringJob, form: Any, change: bool) -> None:
        if not change:
            obj.next_run_at = first_run_at(obj.cron, obj.timezone, timezone.now(), obj.enabled)
            super().save_model(request, obj, form, change)
            return
        # Only what the form changed, never next_run_at as read: a scheduler
        # may have fired the schedule since this page was loaded.
        saved = change_schedule(obj.pk, {field: getattr(obj, field) for field in form.changed_data})
        if saved is not None:
            obj.next_run_at, obj.last_run_at = saved.next_run_at, saved.last_run_at

    @admin.action(
        description="Enable selected schedules (next run from now)", permissions=["change"]
    )
    def enable(self, request: HttpRequest, queryset: QuerySet[RecurringJob]) -> None:
        disabled = queryset.filter(enabled=False).values_list("pk", flat=True)
        count = sum(1 for pk in disabled if change_schedule(pk, {"enabled": True}) is not None)
        self.message_user(request, f"{count} schedule(s) enabled.", messages.SUCCESS)

    @admin.action(description="Disable selected schedules", permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[RecurringJob]) -> None:
        count = queryset.filter(enabled=True).update(enabled=False)
        self.message_user(request, f"{count} schedule(s) disabled.", messages.SUCCESS)

    @admin.action(description="Run selected schedules now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[RecurringJob]) -> None:
        jobs = [enqueue_run_now(schedule) for schedule in queryset]
        ids = ", ".join(f"#{job.pk}" for job in jobs)
        self.message_user(request, f"{len(jobs)} job(s) enqueued: {ids}.", messages.SUCCESS)


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Live worker processes; a registration is swept a lease after its last heartbeat."""

    list_display = ("id", "host", "pid", "queues", "started_at", "last_heartbeat_at", "running")
    readonly_fields = ("id", "host", "pid", "queues", "started_at", "last_heartbeat_at")
    search_fields = ("id", "host")

    @admin.display(description="running jobs")
    def running(self, obj: Worker) -> int:
        return Job.objects.filter(status=JobStatus.RUNNING, lease_owner=obj.id).count()
