"""Recurring schedules: edit, enable, disable, run now; when they run next and how they last ran."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, NamedTuple
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..cron import UTC, get_zone, next_occurrences, validate_cron
from ..display import format_time
from ..exceptions import JobsError
from ..models import Job, RecurringJob
from ..payloads import encode_payload
from ..recurring import change_schedule, check_schedule_options, first_run_at, run_now
from ..registry import get_definition, registered_names, user_names
from .common import format_message, status_label

#: How many occurrences the change form previews.
PREVIEW = 5
# Set on a schedule read for its change form: the cron and zone as saved, before the
# form writes what was posted onto the instance.
SAVED = "django_jobs_saved"


class Saved(NamedTuple):
    cron: str
    timezone: str


def not_registered(name: str) -> bool:
    return name not in registered_names()


class RecurringJobForm(forms.ModelForm):
    job_name = forms.ChoiceField(help_text=_("One of the job names registered with @job."))

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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["job_name"]
        assert isinstance(field, forms.ChoiceField)
        choices = [("", "---------"), *((name, name) for name in user_names())]
        stored = self.instance.job_name if self.instance.pk else ""
        if stored and not_registered(stored):
            # Kept, so saving another change does not lose it; flagged, so it gets fixed.
            choices.append((stored, gettext("%(name)s (not registered)") % {"name": stored}))
            # The admin shows help text as HTML: the stored name is escaped.
            field.help_text = format_message(
                gettext(
                    "<strong>%(name)s is not registered</strong>: the schedule cannot fire until "
                    "it is, or until you choose a registered job."
                ),
                name=repr(stored),
            )
        field.choices = choices

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        checks: list[tuple[str, Callable[[Any], Any]]] = [
            ("cron", validate_cron),
            ("timezone", get_zone),
            ("payload", encode_payload),
            ("queue", lambda queue: check_schedule_options(queue=queue)),
            ("priority", lambda priority: check_schedule_options(priority=priority)),
            ("max_attempts", lambda attempts: check_schedule_options(max_attempts=attempts)),
        ]
        if "job_name" in self.changed_data:  # a stored name no longer registered may stay
            checks.append(("job_name", get_definition))
        for field, check in checks:
            if data.get(field) is not None and field not in self.errors:
                try:
                    check(data[field])
                except JobsError as exc:
                    self.add_error(field, str(exc))
        return data


def fired_jobs() -> QuerySet[Job]:
    """The jobs a schedule fired, newest first, read from the index ``(schedule, -id)``.

    Not ``schedule = name ORDER BY id DESC``: PostgreSQL may then walk the primary
    key backwards, hoping to meet one of the schedule's jobs soon, and read the
    whole table for a schedule that never fired. A range of one value keeps
    ``schedule`` in the sort, which only that index serves.
    """
    name = OuterRef("name")
    return Job.objects.filter(schedule__gte=name, schedule__lte=name).order_by("schedule", "-id")


def in_zone(value: datetime, zone_name: str) -> str | SafeString:
    """``value`` in the schedule's zone, then in UTC (once, if the two read the same)."""
    utc = format_time(value, UTC)
    try:
        local = format_time(value, get_zone(zone_name))
    except JobsError as exc:
        return f"{utc} ({exc})"
    return utc if local == utc else format_html("{}<br>{}", local, utc)


@admin.register(RecurringJob)
class RecurringJobAdmin(admin.ModelAdmin):
    form = RecurringJobForm
    change_form_template = "admin/django_jobs/recurringjob/change_form.html"
    change_list_template = "admin/django_jobs/recurringjob/change_list.html"
    list_display = (
        "name",
        "job",
        "cron_in_zone",
        "enabled",
        "next_run",
        "last_outcome",
        "jobs",
        "source",
    )
    list_filter = ("enabled", "source")
    search_fields = ("name", "job_name")
    readonly_fields = (
        "next_run",
        "upcoming",
        "last_fired",
        "last_outcome",
        "jobs",
        "source",
        "created",
    )
    actions = ["enable", "disable", "run_now"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[RecurringJob]:
        # The newest job each schedule fired, in the page's one query.
        return (
            super()
            .get_queryset(request)
            .annotate(
                last_job_id=Subquery(fired_jobs().values("id")[:1]),
                last_job_status=Subquery(fired_jobs().values("status")[:1]),
            )
        )

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        schedule = super().get_object(request, object_id, from_field)
        if schedule is not None:
            setattr(schedule, SAVED, Saved(schedule.cron, schedule.timezone))
        return schedule

    def get_urls(self) -> list[URLPattern]:
        run_now = path(
            "<path:object_id>/run-now/",
            self.admin_site.admin_view(self.run_now_view),
            name="django_jobs_recurringjob_run_now",
        )
        return [run_now, *super().get_urls()]

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: RecurringJob | None = None,
    ) -> HttpResponse:
        if obj is not None and obj.pk is not None and self.has_change_permission(request, obj):
            context["run_now_url"] = reverse(
                "admin:django_jobs_recurringjob_run_now",
                args=[obj.pk],
                current_app=self.admin_site.name,
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

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

    # -- columns and read-only fields --------------------------------------------

    def job_url(self, job_id: int) -> str:
        return reverse(
            "admin:django_jobs_job_change", args=[job_id], current_app=self.admin_site.name
        )

    @admin.display(description=_("job"), ordering="job_name")
    def job(self, obj: RecurringJob) -> str | SafeString:
        if not_registered(obj.job_name):
            return format_html(
                '{} <strong class="jobs-not-registered">{}</strong>',
                obj.job_name,
                gettext("(not registered)"),
            )
        return obj.job_name

    @admin.display(description=_("cron"), ordering="cron")
    def cron_in_zone(self, obj: RecurringJob) -> SafeString:
        return format_html('{}<br><span class="quiet">{}</span>', obj.cron, obj.timezone)

    @admin.display(description=_("next run"), ordering="next_run_at")
    def next_run(self, obj: RecurringJob) -> str | SafeString:
        if obj.next_run_at is None:
            return self.get_empty_value_display()
        return in_zone(obj.next_run_at, saved(obj).timezone)

    @admin.display(description=_("next five runs"))
    def upcoming(self, obj: RecurringJob) -> str | SafeString:
        if obj.pk is None:
            return gettext("Shown once the schedule is saved.")
        cron, zone_name = saved(obj)
        try:
            runs = next_occurrences(cron, zone_name, timezone.now(), PREVIEW)
            zone = get_zone(zone_name)
        except JobsError as exc:
            return gettext("No preview: %(error)s") % {"error": exc}
        return format_html_join("", "<div>{}</div>", ((format_time(run, zone),) for run in runs))

    @admin.display(description=_("last fired"), ordering="last_run_at")
    def last_fired(self, obj: RecurringJob) -> str | SafeString:
        if obj.last_run_at is None:
            return self.get_empty_value_display()
        return in_zone(obj.last_run_at, saved(obj).timezone)

    @admin.display(description=_("last run"))
    def last_outcome(self, obj: RecurringJob) -> SafeString:
        job_id = getattr(obj, "last_job_id", None)
        if job_id is None:
            return self.get_empty_value_display()
        status = getattr(obj, "last_job_status", "")
        return format_html(
            '<a class="jobs-status-{}" href="{}">{} #{}</a>',
            status,
            self.job_url(job_id),
            status_label(status),
            job_id,
        )

    @admin.display(description=_("jobs"))
    def jobs(self, obj: RecurringJob) -> SafeString:
        if obj.pk is None:
            return self.get_empty_value_display()
        changelist = reverse("admin:django_jobs_job_changelist", current_app=self.admin_site.name)
        query = urlencode({"schedule": obj.name})
        return format_html('<a href="{}?{}">{}</a>', changelist, query, gettext("jobs"))

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: RecurringJob) -> str:
        return format_time(obj.created_at)

    # -- run now, enable, disable ----------------------------------------------

    def enqueue_now(self, request: HttpRequest, schedules: Iterable[RecurringJob]) -> None:
        """Enqueue one run of each schedule, without moving them; report each job with a link."""
        enqueued: list[Job] = []
        for schedule in schedules:
            try:
                enqueued.append(run_now(schedule))
            except (JobsError, ValueError) as exc:
                message = gettext("Schedule %(name)s not run: %(error)s")
                self.message_user(
                    request, message % {"name": repr(schedule.name), "error": exc}, messages.ERROR
                )
        if enqueued:
            links = format_html_join(
                ", ",
                '<a href="{}">{} #{}</a>',
                ((self.job_url(job.pk), job.name, job.pk) for job in enqueued),
            )
            count = len(enqueued)
            message = ngettext(
                "%(count)s job(s) enqueued: %(jobs)s.",
                "%(count)s job(s) enqueued: %(jobs)s.",
                count,
            )
            self.message_user(
                request, format_message(message, count=count, jobs=links), messages.SUCCESS
            )

    def run_now_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The change form's Run now button: POST only, with the change permission."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        schedule = self.get_object(request, unquote(object_id))
        if schedule is None:
            raise Http404(gettext("no recurring job with id %(id)s") % {"id": repr(object_id)})
        if not self.has_change_permission(request, schedule):
            raise PermissionDenied
        self.enqueue_now(request, [schedule])
        change = reverse(
            "admin:django_jobs_recurringjob_change",
            args=[schedule.pk],
            current_app=self.admin_site.name,
        )
        return HttpResponseRedirect(change)

    @admin.action(
        description=_("Enable selected schedules (next run from now)"), permissions=["change"]
    )
    def enable(self, request: HttpRequest, queryset: QuerySet[RecurringJob]) -> None:
        disabled = queryset.filter(enabled=False).values_list("pk", flat=True)
        count = sum(1 for pk in disabled if change_schedule(pk, {"enabled": True}) is not None)
        message = ngettext(
            "%(count)s schedule(s) enabled.", "%(count)s schedule(s) enabled.", count
        )
        self.message_user(request, message % {"count": count}, messages.SUCCESS)

    @admin.action(description=_("Disable selected schedules"), permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[RecurringJob]) -> None:
        count = queryset.filter(enabled=True).update(enabled=False)
        message = ngettext(
            "%(count)s schedule(s) disabled.", "%(count)s schedule(s) disabled.", count
        )
        self.message_user(request, message % {"count": count}, messages.SUCCESS)

    @admin.action(description=_("Run selected schedules now"), permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[RecurringJob]) -> None:
        self.enqueue_now(request, queryset)


def saved(obj: RecurringJob) -> Saved:
    """The cron and zone as stored: a posted form may have written others onto ``obj``."""
    stored: Saved | None = getattr(obj, SAVED, None)
    return stored or Saved(obj.cron, obj.timezone)
