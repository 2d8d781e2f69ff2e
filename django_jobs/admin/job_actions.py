"""The verbs behind the job pages' actions and buttons: retry, retry now, run now, cancel.

A list action and a job page's button run the same code over the ids they are given:
each id goes through its verb in ``django_jobs.control``, whose guarded update decides.
A job that moved since the page was loaded is skipped, and the message links to it and
says why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from ..control import RETRYABLE_STATUSES, cancel_job, retry_job_and_dependents, run_job_now
from ..exceptions import JobNotCancellable, JobNotWaiting
from ..models import LIVE_STATUSES, Job, JobStatus
from .common import CHANGE_PERMISSION, JobAdminBase, it_is, report_skipped

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


class Skip(Exception):
    """Why a verb left a job alone."""


def current_status(job_id: int) -> str | None:
    return Job.objects.filter(id=job_id).values_list("status", flat=True).first()


def not_now(status: str | None) -> Skip:
    return Skip(gettext("it no longer exists") if status is None else it_is(status))


def retry(job_id: int) -> Mapping[str, int]:
    """A job retried (queued, or back to waiting for what it depends on) and the
    dependents its failure had cancelled, back to waiting for it."""
    back = retry_job_and_dependents(job_id)
    if back is not None:
        waits = job_id in back
        return {"waiting" if waits else "retried": 1, "dependents": len(back) - waits}
    status = current_status(job_id)
    if status in RETRYABLE_STATUSES:
        raise Skip(gettext("a live job has the same unique key"))
    raise not_now(status)


def cancel(job_id: int) -> Mapping[str, int]:
    try:
        job = cancel_job(job_id)
    except Job.DoesNotExist:
        raise not_now(None) from None
    except JobNotCancellable:
        raise not_now(current_status(job_id)) from None
    return {"cancelled" if job.status == JobStatus.CANCELLED else "asked": 1}


def make_due(retrying: bool) -> Callable[[int], Mapping[str, int]]:
    """Run now (``retrying`` False: a job scheduled for later) or retry now (``retrying``:
    a job waiting out its backoff)."""

    def act(job_id: int) -> Mapping[str, int]:
        job = Job.objects.filter(id=job_id).only("status", "run_at", "attempts_used").first()
        if job and waiting(job, timezone.now(), not retrying):  # the other button's job
            raise Skip(
                gettext("scheduled, with no attempt used")
                if retrying
                else gettext("waiting out a backoff")
            )
        try:
            run_job_now(job_id)
        except Job.DoesNotExist:
            raise not_now(None) from None
        except JobNotWaiting:
            status = current_status(job_id)
            raise (
                Skip(gettext("already due")) if status == JobStatus.PENDING else not_now(status)
            ) from None
        return {"due": 1}

    return act


def waiting(job: Job, now: datetime, retrying: bool) -> bool:
    return (
        job.status == JobStatus.PENDING and job.run_at > now and (job.attempts_used > 0) == retrying
    )


@dataclass(frozen=True)
class JobVerb:
    name: str  # of the action (``<name>_selected``) and of the button's URL
    label: StrOrPromise  # the button's
    act: Callable[[int], Mapping[str, int]]  # what it did (keys of ``done``), or raises Skip
    done: dict[str, StrOrPromise]  # what it did -> the message, with %(count)s
    not_done: StrOrPromise  # the skipped ones: with %(count)s and %(jobs)s, the links
    applies: Callable[[Job, datetime], bool]  # whether a job's page shows the button


# The messages say "job(s)" in English; ngettext lets a translation pick its form by the count.
VERBS = {
    verb.name: verb
    for verb in (
        JobVerb(
            "retry",
            _("Retry"),
            retry,
            {
                "retried": ngettext_lazy(
                    "%(count)s job(s) queued again.", "%(count)s job(s) queued again.", "count"
                ),
                "waiting": ngettext_lazy(
                    "%(count)s job(s) back to waiting for the jobs they depend on.",
                    "%(count)s job(s) back to waiting for the jobs they depend on.",
                    "count",
                ),
                "dependents": ngettext_lazy(
                    "%(count)s dependent job(s) back to waiting (a failed dependency had "
                    "cancelled them).",
                    "%(count)s dependent job(s) back to waiting (a failed dependency had "
                    "cancelled them).",
                    "count",
                ),
            },
            ngettext_lazy(
                "%(count)s job(s) not retried: %(jobs)s.",
                "%(count)s job(s) not retried: %(jobs)s.",
                "count",
            ),
            lambda job, now: job.status in RETRYABLE_STATUSES,
        ),
        JobVerb(
            "retry_now",
            _("Retry now"),
            make_due(retrying=True),
            {
                "due": ngettext_lazy(
                    "%(count)s job(s) retried now: due at once, without waiting out the backoff.",
                    "%(count)s job(s) retried now: due at once, without waiting out the backoff.",
                    "count",
                )
            },
            ngettext_lazy(
                "%(count)s job(s) not retried now: %(jobs)s.",
                "%(count)s job(s) not retried now: %(jobs)s.",
                "count",
            ),
            lambda job, now: waiting(job, now, retrying=True),
        ),
        JobVerb(
            "run_now",
            _("Run now"),
            make_due(retrying=False),
            {
                "due": ngettext_lazy(
                    "%(count)s job(s) due now instead of at their scheduled time.",
                    "%(count)s job(s) due now instead of at their scheduled time.",
                    "count",
                )
            },
            ngettext_lazy(
                "%(count)s job(s) not run now: %(jobs)s.",
                "%(count)s job(s) not run now: %(jobs)s.",
                "count",
            ),
            lambda job, now: waiting(job, now, retrying=False),
        ),
        JobVerb(
            "cancel",
            _("Cancel"),
            cancel,
            {
                "cancelled": ngettext_lazy(
                    "%(count)s job(s) cancelled.", "%(count)s job(s) cancelled.", "count"
                ),
                "asked": ngettext_lazy(
                    "%(count)s running job(s) asked to stop: their workers cancel them at their "
                    "next heartbeat.",
                    "%(count)s running job(s) asked to stop: their workers cancel them at their "
                    "next heartbeat.",
                    "count",
                ),
            },
            ngettext_lazy(
                "%(count)s job(s) not cancelled: %(jobs)s.",
                "%(count)s job(s) not cancelled: %(jobs)s.",
                "count",
            ),
            lambda job, now: job.status in LIVE_STATUSES,
        ),
    )
}


class JobActionsMixin(JobAdminBase):
    """The verbs as list actions, as buttons on a job's page, and the buttons' URLs."""

    def has_control_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(CHANGE_PERMISSION)

    def perform(self, request: HttpRequest, verb: JobVerb, ids: list[int]) -> None:
        done: Counter[str] = Counter()
        skipped: list[tuple[int, str]] = []
        for job_id in ids:
            try:
                done.update(verb.act(job_id))
            except Skip as why:
                skipped.append((job_id, str(why)))
        for kind, message in verb.done.items():
            if done[kind]:
                self.message_user(request, message % {"count": done[kind]}, messages.SUCCESS)
        report_skipped(self, request, skipped, verb.not_done)

    def perform_selected(self, request: HttpRequest, name: str, queryset: QuerySet[Job]) -> None:
        ids = list(queryset.order_by("id").values_list("id", flat=True))
        self.perform(request, VERBS[name], ids)

    @admin.action(description=_("Retry selected jobs"), permissions=["control"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self.perform_selected(request, "retry", queryset)

    @admin.action(
        description=_("Retry selected jobs now (waiting out a backoff)"), permissions=["control"]
    )
    def retry_now_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self.perform_selected(request, "retry_now", queryset)

    @admin.action(
        description=_("Run selected jobs now (scheduled for later)"), permissions=["control"]
    )
    def run_now_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self.perform_selected(request, "run_now", queryset)

    @admin.action(description=_("Cancel selected jobs"), permissions=["control"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self.perform_selected(request, "cancel", queryset)

    # -- the buttons on a job's page ---------------------------------------------------------

    def verb_urls(self) -> list[Any]:
        view = self.admin_site.admin_view(self.verb_view)
        return [
            path(
                f"<int:job_id>/{name.replace('_', '-')}/", view, {"verb": name}, name=url_name(name)
            )
            for name in VERBS
        ]

    def verb_view(self, request: HttpRequest, job_id: int, verb: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_control_permission(request):
            raise PermissionDenied
        self.perform(request, VERBS[verb], [job_id])
        if not Job.objects.filter(id=job_id).exists():
            return HttpResponseRedirect(reverse("admin:django_jobs_job_changelist"))
        return HttpResponseRedirect(reverse("admin:django_jobs_job_change", args=[job_id]))

    def buttons(self, request: HttpRequest, job: Job | None) -> list[tuple[StrOrPromise, str]]:
        """The (label, URL) of each verb that applies to ``job`` as it is now."""
        if job is None or not self.has_control_permission(request):
            return []
        now = timezone.now()
        return [
            (verb.label, reverse(f"admin:{url_name(verb.name)}", args=[job.pk]))
            for verb in VERBS.values()
            if verb.applies(job, now)
        ]

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> HttpResponse:
        context["job_buttons"] = self.buttons(request, kwargs.get("obj"))
        return super().render_change_form(request, context, *args, **kwargs)


def url_name(verb: str) -> str:
    return f"django_jobs_job_{verb}"
