"""What the job pages share: read-only pages, how a job's fields are shown, a list that
never counts the whole table, and deleting finished jobs only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.core.paginator import Paginator
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from ..db import get_driver
from ..display import format_span, format_time
from ..models import FINISHED_STATUSES, LIVE_STATUSES, Attempt, Job, JobStatus
from ..outcomes import ERROR_LIMIT
from ..redaction import masked_json
from ..text import is_number_text
from .workflow import workflow_of

CHANGE_PERMISSION = "django_jobs.change_job"
#: How many rows a job list counts at most: past it, the list says "10000+".
COUNT_CAP = 10_000
#: How many skipped jobs a message links to.
LINKED = 20

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    JobAdminBase = admin.ModelAdmin[Job]
else:
    JobAdminBase = object  # the mixins below go before admin.ModelAdmin


def status_label(status: str) -> str:
    return str(JobStatus(status).label) if status in JobStatus.values else status


def it_is(status: str) -> str:
    """Why a job was left alone: ``it is running``."""
    return gettext("it is %(status)s") % {"status": status_label(status)}


def format_message(message: StrOrPromise, **values: Any) -> SafeString:
    """``message``, a translated text with ``%(name)s`` placeholders, filled with ``values``
    escaped as ``format_html`` escapes its arguments. A number stays a number, so that an
    ``ngettext_lazy(..., "count")`` text picks its plural form by it."""
    escaped = {
        name: value if isinstance(value, int) else conditional_escape(value)
        for name, value in values.items()
    }
    return mark_safe(message % escaped)  # noqa: S308 - the values are escaped, the text is ours


def cut(text: str) -> SafeString:
    """``text`` cut to its column by the list's style (an ellipsis), whole in its tooltip."""
    return format_html('<span class="django-jobs-cut" title="{}">{}</span>', text, text)


def cut_start(name: str) -> SafeString:
    """A dotted name cut from its start (``…tasks.flaky_task``), whose end tells jobs apart;
    whole in its tooltip. The span runs right to left, so its ellipsis comes first; the
    name itself is isolated (``<bdi>``), so its dots stay where they are."""
    return format_html(
        '<span class="django-jobs-cut django-jobs-cut-start" title="{}"><bdi>{}</bdi></span>',
        name,
        name,
    )


def time_display(field: str, description: StrOrPromise) -> Any:
    """An admin column that shows ``field``, a datetime, with seconds and the zone."""

    @admin.display(description=description, ordering=field)
    def show(self: Any, obj: Any) -> str:
        return format_time(getattr(obj, field))

    return show


# -- the pages' parts --------------------------------------------------------------------


class ReadOnlyAdminMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class AttemptInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = ("number", "outcome", "owner", "started", "finished", "duration", "error_shown")
    readonly_fields = fields
    ordering = ("number",)

    started = time_display("started_at", _("started at"))
    finished = time_display("finished_at", _("finished at"))

    @admin.display(description=_("duration"))
    def duration(self, obj: Attempt) -> str:
        if obj.finished_at is None:
            return gettext("running") if obj.outcome is None else "-"
        return format_span(obj.finished_at - obj.started_at)

    @admin.display(description=_("error"))
    def error_shown(self, obj: Attempt) -> SafeString:
        """The error line; under it, folded, the traceback where the handler raised."""
        if not obj.traceback:
            return conditional_escape(obj.error)
        return format_html(
            '{}<details class="django-jobs-traceback"><summary>{}</summary>'
            '<pre class="django-jobs-trace">{}</pre></details>',
            obj.error,
            gettext("Traceback"),
            obj.traceback,
        )


TIME_FIELDS = tuple(
    field.name for field in Job._meta.fields if isinstance(field, models.DateTimeField)
)
PROGRESS_FIELDS = ("progress_done", "progress_total", "progress_note")
#: The labels of the job's times (as the model names them): every field of TIME_FIELDS.
TIME_LABELS = {
    "run_at": _("run at"),
    "lease_expires_at": _("lease expires at"),
    "cancel_requested_at": _("cancel requested at"),
    "created_at": _("created at"),
    "started_at": _("started at"),
    "finished_at": _("finished at"),
}


#: The runtime's marks on a job: its workflow steps still to take, a waiter to notify.
RUNTIME_MARKS = ("workflow_pending", "awaited")


def page_field(name: str) -> str | None:
    """What a job's change page shows for the model field ``name`` (None: shown elsewhere)."""
    if name == "payload":
        return "masked_payload"
    if name in TIME_FIELDS:
        return f"{name}_shown"
    if name == PROGRESS_FIELDS[0]:
        return "progress"
    if name in RUNTIME_MARKS:  # nothing a person acts on
        return None
    return None if name in PROGRESS_FIELDS else name


def page_fields() -> tuple[str, ...]:
    shown = (page_field(field.name) for field in Job._meta.fields)
    fields = tuple(name for name in shown if name is not None)
    at = fields.index("finished_at_shown") + 1
    return (*fields[:at], "duration", *fields[at:])


#: Every Job field on its change page: the payload masked, times to the second, the
#: progress as a bar, and the duration after the finish.
JOB_FIELDS = page_fields()

#: The model fields a page field shows, where its name is not one of them.
SHOWN_FROM = {
    "masked_payload": ("payload",),
    "progress": ("progress_total", "progress_done", "progress_note"),
    "duration": ("started_at",),
    **{f"{name}_shown": (name,) for name in TIME_FIELDS},
}
#: Shown whatever they hold: what every job has.
ALWAYS_SHOWN = (
    "id",
    "name",
    "queue",
    "masked_payload",
    "status",
    "priority",
    "attempt",
    "attempts_used",
    "max_attempts",
)


def shown_fields(obj: Job | None) -> tuple[str, ...]:
    """The page fields of ``obj`` that hold something (every one for a new form), the last
    error left to the failure block above them (:func:`failure`)."""
    if obj is None:
        return JOB_FIELDS

    def empty(value: object) -> bool:
        return value is None or value == "" or value == {} or value == []

    return tuple(
        name
        for name in JOB_FIELDS
        if name in ALWAYS_SHOWN
        or (
            name != "last_error"
            and not all(empty(getattr(obj, field)) for field in SHOWN_FROM.get(name, (name,)))
        )
    )


def failure(obj: Job | None) -> dict[str, object] | None:
    """What a failed job's page shows first: its last error and the traceback of its last
    attempt that has one (None for a job without an error)."""
    if obj is None or not obj.last_error:
        return None
    attempt = (
        Attempt.objects.using(obj._state.db)
        .filter(job=obj)
        .exclude(traceback="")
        .order_by("-number")
        .values_list("number", "traceback")
        .first()
    )
    number, traceback = attempt if attempt is not None else (None, "")
    return {"error": obj.last_error, "traceback": traceback, "attempt": number}


STATUS_COLOURS: dict[str, str] = {
    JobStatus.WAITING: "#6f42c1",
    JobStatus.PENDING: "#5c636a",
    JobStatus.RUNNING: "#0b5ed7",
    JobStatus.SUCCEEDED: "#1e7e34",
    JobStatus.DEAD_LETTERED: "#b02a37",
    JobStatus.CANCELLED: "#8a5300",
}


class JobDisplayMixin:
    """How the job pages show a job's fields: those that hold something, a failed job's
    error and traceback first."""

    def get_fields(self, request: HttpRequest, obj: Job | None = None) -> tuple[str, ...]:
        return shown_fields(obj)

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> HttpResponse:
        obj = kwargs.get("obj")
        context["job_failure"] = failure(obj)
        context["job_workflow"] = workflow_of(obj)
        if obj is not None and context["job_workflow"] is not None:
            context["job_status_colours"] = list(STATUS_COLOURS.items())
            context["job_status_badge"] = self.status_badge(obj)
        return super().render_change_form(  # type: ignore[misc]
            request, context, *args, **kwargs
        )

    @admin.display(description=_("payload"))
    def masked_payload(self, obj: Job) -> str:
        """The payload as stored errors show it: the values of secret keys masked."""
        return masked_json(obj.payload)

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, obj: Job) -> SafeString:
        colour = STATUS_COLOURS.get(obj.status, "#5c636a")
        return format_html(
            '<span class="django-jobs-status django-jobs-status-{}" style="color: #fff; '
            'background: {}; padding: 1px 6px; border-radius: 3px; white-space: nowrap">{}</span>',
            obj.status,
            colour,
            status_label(obj.status),
        )

    @admin.display(description=_("attempts"))
    def attempts(self, obj: Job) -> str:
        return f"{obj.attempts_used}/{obj.max_attempts}"

    @admin.display(description=_("duration"), empty_value="")
    def duration(self, obj: Job) -> str:
        """Started to finished, or how long the running attempt has run."""
        if obj.started_at is None:
            return ""
        if obj.status == JobStatus.RUNNING:
            span = format_span(timezone.now() - obj.started_at)
            return gettext("running for %(span)s") % {"span": span}
        if obj.finished_at is None:
            return ""
        return format_span(obj.finished_at - obj.started_at)

    @admin.display(description=_("name"), ordering="name")
    def name_and_queue(self, obj: Job) -> SafeString:
        """The job's name, its queue under it: each cut to the column, whole on hover."""
        return format_html(
            '{}<span class="django-jobs-under">{}</span>', cut_start(obj.name), cut(obj.queue)
        )

    @admin.display(description=_("status"), ordering="status")
    def status_and_attempts(self, obj: Job) -> SafeString:
        """The status badge; under it, the attempts used of the maximum."""
        return format_html(
            '{}<span class="django-jobs-under">{}</span>',
            self.status_badge(obj),
            gettext("%(used)s/%(most)s attempts")
            % {"used": obj.attempts_used, "most": obj.max_attempts},
        )

    @admin.display(description=_("duration"), empty_value="")
    def duration_and_progress(self, obj: Job) -> SafeString | str:
        """How long it ran (or has run); under it, a running job's progress."""
        duration, progress = self.duration(obj), self.progress(obj)
        if not progress:
            return duration
        return format_html('{}<span class="django-jobs-under">{}</span>', duration, progress)

    @admin.display(description=_("last error"))
    def short_error(self, obj: Job) -> SafeString:
        """The first 120 characters, cut to three lines of the column; whole on hover (as
        the worker stores it: 2,000 characters at most)."""
        return format_html(
            '<span class="django-jobs-clamp" title="{}">{}</span>',
            obj.last_error[:ERROR_LIMIT],
            Truncator(obj.last_error).chars(120),
        )

    @admin.display(description=_("progress"), empty_value="")
    def progress(self, obj: Job) -> str:
        """The last report the heartbeat wrote; a succeeded job's bar complete, since a
        report made just before the handler returned may not have been written."""
        done, total, note = obj.progress_done, obj.progress_total, obj.progress_note
        if obj.status == JobStatus.SUCCEEDED and total:
            done = total
        if done is None and not note:
            return ""
        if done is None:
            return format_html('<span class="django-jobs-progress">{}</span>', note)
        if total:
            return format_html(
                '<span class="django-jobs-progress"><progress value="{}" max="{}">{}%</progress>'
                " {}/{} {}</span>",
                min(done, total),
                total,
                done * 100 // total,
                done,
                total,
                note,
            )
        return format_html('<span class="django-jobs-progress">{} {}</span>', done, note)


for _name in TIME_FIELDS:
    setattr(JobDisplayMixin, f"{_name}_shown", time_display(_name, TIME_LABELS[_name]))


# -- the lists: counts that stop early, search by id ------------------------------------


class AtLeast(int):
    """A count that stopped early: shown as ``10000+``."""

    def __str__(self) -> str:
        return f"{int(self)}+"


class CappedPaginator(Paginator):
    """Counts at most ``COUNT_CAP`` rows: a list of a million jobs pages in milliseconds."""

    @cached_property
    def count(self) -> int:
        counted = self.object_list.order_by()[: COUNT_CAP + 1].count()  # type: ignore[attr-defined]
        return AtLeast(COUNT_CAP) if counted > COUNT_CAP else counted


class JobSearchMixin(JobAdminBase):
    """A number (``1234``, ``#1234``) finds that job by id; other words search the name and
    unique key."""

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip().removeprefix("#")
        if is_number_text(term):
            job_id = int(term)  # past a bigint, no job has it
            return (queryset.filter(id=job_id) if job_id < 2**63 else queryset.none()), False
        return super().get_search_results(request, queryset, search_term)


# -- skipped jobs, linked -----------------------------------------------------------------


def job_link(job_id: int) -> str:
    return format_html(
        '<a href="{}">#{}</a>', reverse("admin:django_jobs_job_change", args=[job_id]), job_id
    )


def report_skipped(
    model_admin: Any, request: HttpRequest, skipped: list[tuple[int, str]], message: StrOrPromise
) -> None:
    """One warning: how many jobs were skipped, each linked with why. ``message`` has the
    placeholders ``count`` (it picks the plural form) and ``jobs``."""
    if not skipped:
        return
    shown = format_html_join(
        ", ", "{} ({})", ((job_link(job_id), why) for job_id, why in skipped[:LINKED])
    )
    if len(skipped) > LINKED:
        more = gettext(", and %(count)s more") % {"count": len(skipped) - LINKED}
        shown = format_html("{}{}", shown, more)
    model_admin.message_user(
        request, format_message(message, count=len(skipped), jobs=shown), messages.WARNING
    )


# -- deleting: finished jobs only -----------------------------------------------------------


NOT_DELETED = ngettext_lazy(
    "%(count)s job(s) not deleted: %(jobs)s.", "%(count)s job(s) not deleted: %(jobs)s.", "count"
)


class FinishedOnlyDeleteMixin(JobAdminBase):
    """A pending or running job cannot be deleted here: cancel it first."""

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        if obj is not None and obj.status in LIVE_STATUSES:
            return False
        return super().has_delete_permission(request, obj)

    # Named as Django's site-wide action, which it replaces on these pages (list it in
    # ``actions``).
    @admin.action(description=_("Delete selected finished jobs"), permissions=["delete"])
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        live = queryset.filter(status__in=LIVE_STATUSES).order_by("id").values_list("id", "status")
        report_skipped(self, request, [(i, it_is(s)) for i, s in live], NOT_DELETED)
        finished = queryset.filter(status__in=FINISHED_STATUSES)
        if not finished.exists():
            return None
        # Django's confirmation page; its "Yes" posts the finished ones only.
        return django_delete_selected(self, request, finished)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        # Locked, then deleted: a job retried meanwhile is live again and stays.
        with get_driver(queryset.db).write_transaction():
            ids = queryset.filter(status__in=FINISHED_STATUSES).select_for_update()
            Job.objects.using(queryset.db).filter(
                id__in=list(ids.values_list("id", flat=True))
            ).delete()

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        with get_driver(obj._state.db or "default").write_transaction():
            Job.objects.using(obj._state.db).filter(
                id=obj.pk, status__in=FINISHED_STATUSES
            ).delete()
