"""Workers: the live runjobs processes."""

from __future__ import annotations

from django.contrib import admin

from ..models import Job, JobStatus, Worker
from .common import ReadOnlyAdminMixin


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Live worker processes; a registration is swept a lease after its last heartbeat."""

    list_display = ("id", "host", "pid", "queues", "started_at", "last_heartbeat_at", "running")
    readonly_fields = ("id", "host", "pid", "queues", "started_at", "last_heartbeat_at")
    search_fields = ("id", "host")

    @admin.display(description="running jobs")
    def running(self, obj: Worker) -> int:
        return Job.objects.filter(status=JobStatus.RUNNING, lease_owner=obj.id).count()
