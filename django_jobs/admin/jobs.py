"""Jobs: every job, its progress and attempts, and the buttons that steer it."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from ..models import Job
from ..registry import registered_names
from ..text import is_number_text
from .common import (
    JOB_FIELDS,
    AttemptInline,
    CappedPaginator,
    FinishedOnlyDeleteMixin,
    JobDisplayMixin,
    JobSearchMixin,
    ReadOnlyAdminMixin,
)
from .filters import NameFilter, QueueFilter, ScheduleFilter
from .job_actions import JobActionsMixin

#: The workflow lists the Jobs list shows, by the lookups their links give.
WORKFLOW_LOOKUPS = frozenset(
    {
        "batch__id__exact",
        "dependent_links__job__id__exact",
        "dependency_links__depends_on__id__exact",
    }
)


@admin.register(Job)
class JobAdmin(
    JobActionsMixin,
    FinishedOnlyDeleteMixin,
    JobSearchMixin,
    JobDisplayMixin,
    ReadOnlyAdminMixin,
    admin.ModelAdmin,
):
    # Six columns, so that the list fits a laptop's window with the sidebar open: the queue
    # under the name, the attempts under the status, the progress under the duration.
    list_display = (
        "id",
        "name_and_queue",
        "status_and_attempts",
        "run_at_shown",
        "duration_and_progress",
        "short_error",
    )
    # Choices from JobStatus, the settings and the registry: never read from the table.
    list_filter = ("status", QueueFilter, NameFilter, ScheduleFilter)
    # Words: the registered names that contain them, or an exact unique key (see below).
    search_fields = ("name", "unique_key")
    # Sorting by another column would sort the whole table; the id is the primary key.
    sortable_by = ("id",)
    show_full_result_count = False
    paginator = CappedPaginator
    fields = readonly_fields = JOB_FIELDS
    inlines = [AttemptInline]
    actions = [
        "delete_selected",
        "retry_selected",
        "retry_now_selected",
        "run_now_selected",
        "cancel_selected",
    ]
    list_select_related = False

    def get_urls(self) -> list[Any]:
        return [*self.verb_urls(), *super().get_urls()]

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """A batch's members, and a job's dependencies and dependents: the lists the batch
        page and a job's workflow graph link to."""
        return lookup in WORKFLOW_LOOKUPS or super().lookup_allowed(lookup, value, request)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """An id by primary key; words by the registry's names that contain them, or an
        exact unique key: never a ``LIKE`` over every row of the table."""
        term = search_term.strip()
        if not term or is_number_text(term.removeprefix("#")):
            return super().get_search_results(request, queryset, search_term)
        names = [name for name in registered_names() if term.lower() in name.lower()]
        return queryset.filter(Q(name__in=names) | Q(unique_key=term)), False
