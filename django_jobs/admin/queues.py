"""Queues: paused or served, their limits, the slots in use and the jobs due; pause, resume."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db import router
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from ..conf import require_queue_name, settings
from ..control import pause_queue, resume_queue
from ..db import get_driver
from ..display import format_time
from ..models import Job, JobStatus, Queue
from ..queues import unknown_queue
from ..registry import queue_limits
from ..stats import limits_in_words
from .common import ReadOnlyAdminMixin, format_message

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

CHANGE_PERMISSION = "django_jobs.change_queue"
NONE = "—"
# Set on each Queue shown: what one query per page counted, at the instant the page reads.
COUNTED = "django_jobs_counted"


class Counted(NamedTuple):
    running: int  # running under a live lease: each holds a slot of the queue's limits
    due: int  # pending, run_at reached


def can_be_a_queue(name: str) -> bool:
    try:
        require_queue_name(name)
    except ValueError:
        return False  # a hand-written row's: it is listed in the jobs, not here
    return True


def add_missing_rows(using: str) -> None:
    """A row for each configured queue and each queue a pending or running job names, so
    that the list (of rows) shows every queue an operator looks for.

    A write on the page's GET, for staff who may pause queues only (a view-only user's GET
    writes nothing, and lists the queues that have a row): a row with only its name says
    what no row says (the queue is served, nothing counted in its rate window), and a claim
    under limits or a pause would make the same row. Only the missing ones are inserted;
    one made meanwhile by a worker is left as it is.
    """
    live = Job.objects.using(using).live().order_by().values_list("queue", flat=True).distinct()
    wanted = {name for name in (*settings.QUEUES, *live) if can_be_a_queue(name)}
    missing = wanted - set(Queue.objects.using(using).values_list("name", flat=True))
    for name in sorted(missing):
        get_driver(using).flow.make_queue_row(name)  # as a pause or a claim under limits does


def count_jobs(queues: Iterable[Queue], now: datetime, using: str) -> None:
    """Attach to each queue its running jobs under a live lease and its due jobs: one
    grouped query, over the live rows of the queues shown."""
    queues = list(queues)
    counts: dict[str, Counted] = {}
    if queues:
        rows = (
            Job.objects.using(using)
            .live()
            .filter(queue__in=[queue.name for queue in queues])
            .order_by()
            .values("queue")
            .annotate(
                running=Count("id", filter=Q(status=JobStatus.RUNNING, lease_expires_at__gt=now)),
                due=Count("id", filter=Q(status=JobStatus.PENDING, run_at__lte=now)),
            )
        )
        counts = {row["queue"]: Counted(row["running"], row["due"]) for row in rows}
    for queue in queues:
        setattr(queue, COUNTED, counts.get(queue.name, Counted(0, 0)))


def counted(queue: Queue) -> Counted:
    """What :func:`count_jobs` attached (counted now for a queue shown without it)."""
    if getattr(queue, COUNTED, None) is None:
        count_jobs([queue], timezone.now(), queue._state.db or "default")
    value: Counted = getattr(queue, COUNTED)
    return value


class QueueChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        count_jobs(self.result_list, timezone.now(), self.queryset.db)


# The messages say "queue(s)" in English; ngettext lets a translation pick its form by the count.
PAUSED = ngettext_lazy(
    "%(count)s queue(s) paused: their running jobs finish, none start until they are resumed.",
    "%(count)s queue(s) paused: their running jobs finish, none start until they are resumed.",
    "count",
)
ALREADY_PAUSED = ngettext_lazy(
    "%(count)s queue(s) paused already: %(queues)s.",
    "%(count)s queue(s) paused already: %(queues)s.",
    "count",
)
RESUMED = ngettext_lazy(
    "%(count)s queue(s) resumed: their workers start their jobs again.",
    "%(count)s queue(s) resumed: their workers start their jobs again.",
    "count",
)
REMOVED = ngettext_lazy(
    "%(count)s queue(s) named nowhere removed: %(queues)s.",
    "%(count)s queue(s) named nowhere removed: %(queues)s.",
    "count",
)
KEPT = ngettext_lazy(
    "%(count)s queue(s) kept, as the project names them or jobs are on them: %(queues)s.",
    "%(count)s queue(s) kept, as the project names them or jobs are on them: %(queues)s.",
    "count",
)
ALREADY_SERVED = ngettext_lazy(
    "%(count)s queue(s) not paused, served already: %(queues)s.",
    "%(count)s queue(s) not paused, served already: %(queues)s.",
    "count",
)


@admin.register(Queue)
class QueueAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Every queue an operator looks for, with what holds its jobs back; paused ones are
    resumed here. A queue's row holds its state for every worker on every host."""

    list_display = ("queue_name", "state", "limits", "slots", "running", "due")
    list_display_links = None  # a queue has no page of its own: its name links to its jobs
    fields = readonly_fields = ("name", "state", "limits", "slots", "running", "due")
    ordering = ("name",)
    search_fields = ("name",)
    actions = ("pause_selected", "resume_selected", "remove_selected")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return QueueChangeList

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if self.has_control_permission(request):  # a viewer's GET writes nothing
            add_missing_rows(router.db_for_write(Queue))
        return super().changelist_view(request, extra_context)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the page makes the rows again; resume a paused queue instead

    def has_control_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(CHANGE_PERMISSION)

    # -- the columns --------------------------------------------------------------------

    @admin.display(description=_("queue"), ordering="name")
    def queue_name(self, obj: Queue) -> SafeString:
        """The name, a link to the queue's jobs."""
        jobs = reverse("admin:django_jobs_job_changelist", current_app=self.admin_site.name)
        return format_html(
            '<a href="{}?{}" title="{}">{}</a>',
            jobs,
            urlencode({"queue": obj.name}),
            gettext("The jobs of queue %(queue)s") % {"queue": obj.name},
            obj.name,
        )

    @admin.display(description=_("state"), ordering="paused_at")
    def state(self, obj: Queue) -> SafeString:
        if obj.paused_at is None:
            return format_html('<span class="jobs-queue-served">{}</span>', gettext("served"))
        since = gettext("paused since %(time)s") % {"time": format_time(obj.paused_at)}
        return format_html('<strong class="jobs-queue-paused">{}</strong>', since)

    @admin.display(description=_("limits"), empty_value=NONE)
    def limits(self, obj: Queue) -> str:
        """Its global limit, its rate limit and ``per key`` when its jobs carry keys."""
        return limits_in_words(queue_limits(obj.name))

    @admin.display(description=_("slots in use"), empty_value=NONE)
    def slots(self, obj: Queue) -> str:
        """Of its global limit: the running jobs holding a live lease."""
        limits = queue_limits(obj.name)
        if limits is None or limits.global_limit is None:
            return ""
        return gettext("%(used)s of %(limit)s") % {
            "used": counted(obj).running,
            "limit": limits.global_limit,
        }

    @admin.display(description=_("running now"))
    def running(self, obj: Queue) -> int:
        """Running under a live lease: a job whose lease lapsed holds no slot."""
        return counted(obj).running

    @admin.display(description=_("due now"))
    def due(self, obj: Queue) -> int:
        return counted(obj).due

    # -- the actions --------------------------------------------------------------------

    @admin.action(description=_("Pause the selected queues"), permissions=["control"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        self.steer(request, queryset, pause_queue, PAUSED, ALREADY_PAUSED)

    @admin.action(description=_("Resume the selected queues"), permissions=["control"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        self.steer(request, queryset, resume_queue, RESUMED, ALREADY_SERVED)

    @admin.action(
        description=_("Remove the selected queues named nowhere (a typo's)"),
        permissions=["control"],
    )
    def remove_selected(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        """Remove the rows of queues the project names nowhere and no live job is on (a
        stray one, paused under a typo with ``force``); keep the others, and say which."""
        names = list(queryset.order_by("name").values_list("name", flat=True))
        live = set(
            Job.objects.using(queryset.db)
            .live()
            .filter(queue__in=names)
            .values_list("queue", flat=True)
        )
        stray = [name for name in names if name not in live and unknown_queue(name) is not None]
        kept = [name for name in names if name not in stray]
        if stray:
            Queue.objects.using(queryset.db).filter(name__in=stray).delete()
            message = format_message(REMOVED, count=len(stray), queues=", ".join(stray))
            self.message_user(request, message, messages.SUCCESS)
        if kept:
            message = format_message(KEPT, count=len(kept), queues=", ".join(kept))
            self.message_user(request, message, messages.INFO)

    def steer(
        self,
        request: HttpRequest,
        queryset: QuerySet[Queue],
        verb: Callable[..., bool],
        done: StrOrPromise,
        already: StrOrPromise,
    ) -> None:
        """``verb`` (pause_queue or resume_queue) for each queue selected, then one message
        for those it changed and one for those that were so already."""
        names = list(queryset.order_by("name").values_list("name", flat=True))
        changed = [name for name in names if verb(name, using=queryset.db)]
        left = [name for name in names if name not in changed]
        if changed:
            self.message_user(request, done % {"count": len(changed)}, messages.SUCCESS)
        if left:
            message = format_message(already, count=len(left), queues=", ".join(left))
            self.message_user(request, message, messages.INFO)
