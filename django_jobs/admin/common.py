"""What the job pages share: read-only pages, the masked payload, the retry and cancel actions."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from ..control import cancel_job, retry_job
from ..exceptions import JobNotCancellable
from ..models import Attempt, Job, JobStatus
from ..redaction import masked_json

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
