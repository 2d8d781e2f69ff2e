"""Batches: each batch's progress, its callbacks and its members."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..db.workflows import CALLBACK_KINDS
from ..display import format_time
from ..models import Batch, Job
from .common import ReadOnlyAdminMixin
from .workflow import job_url, jobs_list_url, node

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
    list_display = ("id", "name", "progress", "counts", "created", "finished")
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


def batch_page(batch: Batch) -> dict[str, Any]:
    """What a batch's page shows beside its counts: its callbacks (enqueued or not) and
    its first members."""
    enqueued = batch.callback_jobs or {}
    callbacks = [
        {
            "kind": CALLBACK_LABELS[kind],
            "name": batch.callbacks[kind].get("name", ""),
            "url": job_url(enqueued[kind]) if kind in enqueued else "",
            "id": enqueued.get(kind),
        }
        for kind in CALLBACK_KINDS
        if kind in batch.callbacks
    ]
    members = Job.objects.using(batch._state.db).filter(batch=batch).order_by("id")
    members = members.exclude(pk__in=list(enqueued.values()))
    shown = [node(job) for job in members.only("id", "name", "status")[:MEMBERS_SHOWN]]
    return {
        "batch_callbacks": callbacks,
        "batch_members": shown,
        "batch_more": max(0, batch.total - len(shown)),
        "batch_members_url": jobs_list_url(batch__id__exact=batch.pk),
    }
