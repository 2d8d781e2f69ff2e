"""Workers: the runjobs processes, their heartbeats and the jobs they hold."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..display import format_age, format_time
from ..models import Job, WorkerProcess
from ..stats import LATE_BEATS, heartbeat_is_stale
from .common import ReadOnlyAdminMixin
from .filters import HeartbeatFilter

# Set on each WorkerProcess shown: what one query per page found, and the instant the page reads.
SHOWN = "django_jobs_shown"


class HeldJob(NamedTuple):
    id: int
    name: str


class Shown(NamedTuple):
    now: datetime
    running: list[HeldJob]


def show_workers(workers: Iterable[WorkerProcess], now: datetime, using: str) -> None:
    """Attach to each worker the running jobs leased to it: one query for them all."""
    workers = list(workers)
    held: dict[str, list[HeldJob]] = defaultdict(list)
    if workers:
        rows = (
            Job.objects.using(using)
            .held_by(worker.id for worker in workers)
            .order_by("id")
            .values_list("lease_owner", "id", "name", named=True)
        )
        for row in rows:
            held[str(row.lease_owner)].append(HeldJob(row.id, row.name))
    for worker in workers:
        setattr(worker, SHOWN, Shown(now, held.get(worker.id, [])))


def shown(worker: WorkerProcess) -> Shown:
    """What :func:`show_workers` attached (worked out now for a worker shown without it)."""
    if getattr(worker, SHOWN, None) is None:
        show_workers([worker], timezone.now(), worker._state.db or "default")
    value: Shown = getattr(worker, SHOWN)
    return value


class WorkerChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        show_workers(self.result_list, timezone.now(), self.queryset.db)


@admin.register(WorkerProcess)
class WorkerAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The runjobs processes that run: a worker removes its registration as it stops, and
    one that could not (killed, cut off) is swept a lease after its last heartbeat."""

    # The id is host:pid:random: the host links to the worker's page, which shows it.
    list_display = (
        "host",
        "pid",
        "state",
        "queue_names",
        "heartbeat",
        "started",
        "jobs_run",
        "running_jobs",
    )
    list_filter = (HeartbeatFilter,)
    change_list_template = "admin/django_jobs/workerprocess/change_list.html"
    fields = readonly_fields = (
        "id",
        "host",
        "pid",
        "queue_names",
        "started",
        "heartbeat",
        "state",
        "jobs_run",
        "running_jobs",
    )
    search_fields = ("id", "host")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return WorkerChangeList

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        worker = super().get_object(request, object_id, from_field)
        if worker is not None:
            show_workers([worker], timezone.now(), worker._state.db or "default")
        return worker

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a worker removes its row as it stops; the sweep removes a dead one's

    @admin.display(description=_("queues"))
    def queue_names(self, obj: WorkerProcess) -> str:
        return ", ".join(obj.queues or [])

    @admin.display(description=_("started"), ordering="started_at")
    def started(self, obj: WorkerProcess) -> str:
        return format_time(obj.started_at)

    @admin.display(description=_("last heartbeat"), ordering="last_heartbeat_at")
    def heartbeat(self, obj: WorkerProcess) -> SafeString:
        age = format_age(shown(obj).now - obj.last_heartbeat_at)
        ago = gettext("%(age)s ago") % {"age": age}
        return format_html("{}<br>{}", format_time(obj.last_heartbeat_at), ago)

    @admin.display(description=_("state"))
    def state(self, obj: WorkerProcess) -> SafeString:
        if heartbeat_is_stale(obj.last_heartbeat_at, shown(obj).now):
            why = gettext(
                "missed more than %(beats)s heartbeats: its jobs go back to the queue "
                "when their leases expire"
            ) % {"beats": LATE_BEATS}
            return format_html(
                '<strong class="jobs-worker-stale" title="{}">{}</strong>', why, gettext("stale")
            )
        return format_html('<span class="jobs-worker-live">{}</span>', gettext("live"))

    @admin.display(description=_("running"))
    def running_jobs(self, obj: WorkerProcess) -> SafeString:
        running = shown(obj).running
        if not running:
            return self.get_empty_value_display()
        return format_html_join(
            ", ",
            '<a href="{}">{} #{}</a>',
            (
                (
                    reverse(
                        "admin:django_jobs_job_change",
                        args=[job.id],
                        current_app=self.admin_site.name,
                    ),
                    job.name,
                    job.id,
                )
                for job in running
            ),
        )
