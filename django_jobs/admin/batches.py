"""Batches: each batch's progress, its callbacks and its members."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..db.workflows import CALLBACK_KINDS
from ..display import format_time
from ..models import Batch, Job
from .common import ReadOnlyAdminMixin
from .workflow import job_url, jobs_list_url, node

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

#: How many members a batch's page lists; the rest are behind a link to the Jobs list.
MEMBERS_SHOWN = 100

CALLBACK_LABELS = {
    "on_finish": _("on finish"),
    "on_success": _("on success"),
    "on_failure": _("on failure"),
}


class FinishedFilter(admin.SimpleListFilter):
    title = _("finished")
    parameter_name = "finished"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("no", _("open")), ("yes", _("finished"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Batch]) -> QuerySet[Batch]:
        if self.value() == "no":
            return queryset.filter(finished_at__isnull=True)
        if self.value() == "yes":
            return queryset.filter(finished_at__isnull=False)
        return queryset


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("id", "name", "progress", "counts", "created", "finished", "callbacks_in")
    list_display_links = ("id", "name")
    list_filter = (FinishedFilter,)
    search_fields = ("name",)
    sortable_by = ("id",)
    fields = readonly_fields = ("name", "progress", "counts", "created", "finished")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a batch goes with its jobs (the cleaner), never on its own

    @admin.display(description=_("progress"))
    def progress(self, obj: Batch) -> SafeString:
        """Ended of total, as a bar."""
        return format_html(
            '<progress value="{}" max="{}"></progress> {}',
            obj.ended,
            max(obj.total, 1),
            gettext("%(ended)s of %(total)s ended") % {"ended": obj.ended, "total": obj.total},
        )

    @admin.display(description=_("ends"))
    def counts(self, obj: Batch) -> str:
        return gettext("%(ok)s succeeded, %(dead)s dead-lettered, %(cancelled)s cancelled") % {
            "ok": obj.succeeded,
            "dead": obj.dead_lettered,
            "cancelled": obj.cancelled,
        }

    @admin.display(description=_("callbacks"), empty_value="-")
    def callbacks_in(self, obj: Batch) -> SafeString | None:
        """Each callback, linked to its job once enqueued, else whether it is still to come."""
        callbacks = callbacks_of(obj)
        if not callbacks:
            return None
        return format_html_join(", ", "{}: {}", ((c.kind, c.outcome) for c in callbacks))

    @admin.display(description=_("created at"))
    def created(self, obj: Batch) -> str:
        return format_time(obj.created_at)

    @admin.display(description=_("finished at"), empty_value="")
    def finished(self, obj: Batch) -> str:
        return "" if obj.finished_at is None else format_time(obj.finished_at)

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> HttpResponse:
        obj = kwargs.get("obj")
        if obj is not None:
            context.update(batch_page(obj))
        return super().render_change_form(request, context, *args, **kwargs)


@dataclass(frozen=True)
class Callback:
    """One of a batch's callbacks, as its pages show it."""

    kind: StrOrPromise  # when it goes in: on finish, on success, on failure
    name: str  # the job it was made with
    id: int | None  # its job, once enqueued
    finished: bool  # whether the batch has finished (a callback not enqueued then never is)

    @property
    def url(self) -> str:
        return "" if self.id is None else job_url(self.id)

    @property
    def outcome(self) -> SafeString:
        """A link to its job, or why there is none."""
        if self.id is not None:
            return format_html('<a href="{}">#{}</a>', self.url, self.id)
        return format_html("{}", gettext("not run") if self.finished else gettext("not yet"))


def callbacks_of(batch: Batch) -> list[Callback]:
    """``batch``'s callbacks, in the order they are given; on success and on failure are
    exclusive, so a finished batch has one of them not run."""
    enqueued = batch.callback_jobs or {}
    return [
        Callback(
            CALLBACK_LABELS[kind],
            batch.callbacks[kind].get("name", ""),
            enqueued.get(kind),
            batch.finished_at is not None,
        )
        for kind in CALLBACK_KINDS
        if kind in batch.callbacks
    ]


def batch_page(batch: Batch) -> dict[str, Any]:
    """What a batch's page shows beside its counts: its callbacks (enqueued or not) and
    its first members."""
    members = Job.objects.using(batch._state.db).filter(batch=batch).order_by("id")
    members = members.exclude(pk__in=list((batch.callback_jobs or {}).values()))
    shown = [node(job) for job in members.only("id", "name", "status")[:MEMBERS_SHOWN]]
    return {
        "batch_callbacks": callbacks_of(batch),
        "batch_members": shown,
        "batch_more": max(0, batch.total - len(shown)),
        "batch_members_url": jobs_list_url(batch__id__exact=batch.pk),
    }
