"""The lists' filters: choices from the registry, the settings and the schedules, never read
from the jobs table; a worker's heartbeat, live or stale."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..conf import settings
from ..models import RecurringJob, WorkerProcess
from ..registry import get_definition, registered_names, user_names
from ..stats import heartbeat_is_stale

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


class ChoicesFilter(admin.SimpleListFilter):
    """A filter whose choices come from code, not from the jobs table."""

    def names(self) -> list[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in self.names()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(**{str(self.parameter_name): value})


class QueueFilter(ChoicesFilter):
    title = _("queue")
    parameter_name = "queue"

    def names(self) -> list[str]:
        queues = set(settings.QUEUES)
        for name in registered_names():
            queues.add(get_definition(name).queue)
        return sorted(queues)


class NameFilter(ChoicesFilter):
    title = _("name")
    parameter_name = "name"

    def names(self) -> list[str]:
        return user_names()


class ScheduleFilter(ChoicesFilter):
    """``?schedule=NAME``: the jobs a recurring schedule fired (the schedules' own table)."""

    title = _("schedule")
    parameter_name = "schedule"

    def names(self) -> list[str]:
        return list(RecurringJob.objects.order_by("name").values_list("name", flat=True))


class HeartbeatFilter(admin.SimpleListFilter):
    """Live or stale, by the one rule the dashboard uses (``stats.heartbeat_is_stale``)."""

    title = _("heartbeat")
    parameter_name = "heartbeat"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, StrOrPromise]]:
        return [("live", _("live")), ("stale", _("stale"))]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[WorkerProcess]
    ) -> QuerySet[WorkerProcess]:
        if self.value() not in ("live", "stale"):
            return queryset
        # A row per live process (the maintenance sweeps the rest): read in one query.
        now = timezone.now()
        beats = queryset.order_by().values_list("id", "last_heartbeat_at")
        stale = [pk for pk, beat in beats if heartbeat_is_stale(beat, now)]
        if self.value() == "stale":
            return queryset.filter(id__in=stale)
        return queryset.exclude(id__in=stale)
