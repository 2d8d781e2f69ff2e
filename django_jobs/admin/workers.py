"""Workers: the runjobs processes, their heartbeats and the jobs they hold."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..display import format_age, format_time
from ..models import Job, WorkerProcess
from ..stats import LATE_BEATS, LeaderInfo, current_leader, heartbeat_is_stale
from .common import ReadOnlyAdminMixin
from .filters import HeartbeatFilter

# Set on each WorkerProcess shown: what one query per page found, and the instant the page reads.
SHOWN = "django_jobs_shown"


class HeldJob(NamedTuple):
    id: int
    name: str


class Shown(NamedTuple):
    now: datetime
    running: list[HeldJob]  # its own and its children's
    children: list[WorkerProcess]  # a supervisor's worker processes (runjobs --processes)
    child_running: dict[str, list[HeldJob]]
    leader: LeaderInfo | None  # the leader lease, if one holds at ``now``


def top_level(rows: QuerySet[WorkerProcess]) -> QuerySet[WorkerProcess]:
    """One entry per supervisor or lone worker: a child is listed under its supervisor,
    on its own only while the supervisor's row is missing (swept during an outage)."""
    registered = WorkerProcess.objects.using(rows.db).values("id")
    return rows.filter(Q(supervisor__isnull=True) | ~Q(supervisor__in=registered))


def show_workers(workers: Iterable[WorkerProcess], now: datetime, using: str) -> None:
    """Attach to each entry its children, the running jobs leased to them and the leader
    lease: three queries for them all."""
    workers = list(workers)
    children: dict[str, list[WorkerProcess]] = defaultdict(list)
    if workers:
        rows = WorkerProcess.objects.using(using).filter(
            supervisor__in=[worker.id for worker in workers]
        )
        for child in rows.order_by("started_at", "pid"):
            children[str(child.supervisor)].append(child)
    held: dict[str, list[HeldJob]] = defaultdict(list)
    owners = [w.id for w in workers] + [c.id for kids in children.values() for c in kids]
    if owners:
        jobs = (
            Job.objects.using(using)
            .held_by(owners)
            .order_by("id")
            .values_list("lease_owner", "id", "name", named=True)
        )
        for row in jobs:
            held[str(row.lease_owner)].append(HeldJob(row.id, row.name))
    leader = current_leader(using, now) if workers else None
    for worker in workers:
        kids = children.get(worker.id, [])
        running = held.get(worker.id, []) + [job for c in kids for job in held.get(c.id, [])]
        child_running = {child.id: held.get(child.id, []) for child in kids}
        setattr(worker, SHOWN, Shown(now, sorted(running), kids, child_running, leader))


def shown(worker: WorkerProcess) -> Shown:
    """What :func:`show_workers` attached (worked out now for a worker shown without it)."""
    if getattr(worker, SHOWN, None) is None:
        show_workers([worker], timezone.now(), worker._state.db or "default")
    value: Shown = getattr(worker, SHOWN)
    return value


class WorkerChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
        return top_level(super().get_queryset(request, exclude_parameters))

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
        "total_jobs_run",
        "running_jobs",
        "processes",
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
        "total_jobs_run",
        "running_jobs",
        "processes",
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
        """How long ago: a live worker's reads as seconds, not as an old-looking time, which
        is in the tooltip."""
        age = format_age(shown(obj).now - obj.last_heartbeat_at)
        ago = gettext("%(age)s ago") % {"age": age}
        return format_html('<span title="{}">{}</span>', format_time(obj.last_heartbeat_at), ago)

    @admin.display(description=_("state"))
    def state(self, obj: WorkerProcess) -> SafeString:
        """Live or stale; and ``leader`` for the process that holds the leader lease."""
        seen = shown(obj)
        return format_html("{}{}", self.heartbeat_state(obj, seen.now), leader_badge(obj, seen))

    def heartbeat_state(self, obj: WorkerProcess, now: datetime) -> SafeString:
        if heartbeat_is_stale(obj.last_heartbeat_at, now):
            why = gettext(
                "missed more than %(beats)s heartbeats: its jobs go back to the queue "
                "when their leases expire"
            ) % {"beats": LATE_BEATS}
            return format_html(
                '<strong class="jobs-worker-stale" title="{}">{}</strong>', why, gettext("stale")
            )
        return format_html('<span class="jobs-worker-live">{}</span>', gettext("live"))

    @admin.display(description=_("jobs run"), ordering="jobs_run")
    def total_jobs_run(self, obj: WorkerProcess) -> int:
        """Its own, and its children's as of their last heartbeats."""
        return obj.jobs_run + sum(child.jobs_run for child in shown(obj).children)

    @admin.display(description=_("running"))
    def running_jobs(self, obj: WorkerProcess) -> SafeString:
        return self.job_links(shown(obj).running)

    @admin.display(description=_("processes"))
    def processes(self, obj: WorkerProcess) -> SafeString:
        """A supervisor's worker processes, one line each: pid, jobs run, heartbeat, jobs."""
        seen = shown(obj)
        if not seen.children:
            return self.get_empty_value_display()
        return format_html_join(
            "",
            '<div class="jobs-worker-process">{}</div>',
            ((self.process_line(child, seen),) for child in seen.children),
        )

    def process_line(self, child: WorkerProcess, seen: Shown) -> SafeString:
        stale = heartbeat_is_stale(child.last_heartbeat_at, seen.now)
        beat = gettext("heartbeat %(age)s ago") % {
            "age": format_age(seen.now - child.last_heartbeat_at)
        }
        text = gettext("pid %(pid)s: %(count)s jobs run, %(beat)s") % {
            "pid": child.pid,
            "count": child.jobs_run,
            "beat": beat,
        }
        running = seen.child_running.get(child.id, [])
        return format_html(
            "{}{}{}{}{}",
            text,
            format_html(" <strong>{}</strong>", gettext("stale")) if stale else "",
            leader_badge(child, seen),
            "; " if running else "",
            self.job_links(running) if running else "",
        )

    def job_links(self, running: list[HeldJob]) -> SafeString:
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


def leader_badge(worker: WorkerProcess, seen: Shown) -> SafeString | str:
    """The mark ``leader`` (its epoch and since when as its title) on the process that
    holds the leader lease; nothing on the others."""
    leader = seen.leader
    if leader is None or leader.owner != worker.id:
        return ""
    why = gettext(
        "the leader since %(since)s (epoch %(epoch)s): it takes back expired leases, fires "
        "the recurring schedules and prunes finished jobs for every worker"
    ) % {"since": format_time(leader.elected_at), "epoch": leader.epoch}
    return format_html(
        ' <strong class="jobs-worker-leader" title="{}">{}</strong>', why, gettext("leader")
    )
