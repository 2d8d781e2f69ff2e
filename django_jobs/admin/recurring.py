"""Recurring schedules: edit, enable, disable, run now."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from ..cron import get_zone, validate_cron
from ..exceptions import JobsError
from ..models import RecurringJob
from ..payloads import encode_payload
from ..recurring import change_schedule, check_schedule_options, first_run_at
from ..recurring import run_now as enqueue_run_now
from ..registry import get_definition


class RecurringJobForm(forms.ModelForm):
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

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        checks: tuple[tuple[str, Callable[[Any], Any]], ...] = (
            ("cron", validate_cron),
            ("timezone", get_zone),
            ("job_name", get_definition),
            ("payload", encode_payload),
            ("queue", lambda queue: check_schedule_options(queue=queue)),
            ("priority", lambda priority: check_schedule_options(priority=priority)),
            ("max_attempts", lambda attempts: check_schedule_options(max_attempts=attempts)),
        )
        for field, check in checks:
            if data.get(field) is not None and field not in self.errors:
                try:
                    check(data[field])
                except JobsError as exc:
                    self.add_error(field, str(exc))
        return data


@admin.register(RecurringJob)
class RecurringJobAdmin(admin.ModelAdmin):
    form = RecurringJobForm
    list_display = (
        "name",
        "job_name",
        "cron",
        "timezone",
        "enabled",
        "next_run_at",
        "last_run_at",
        "source",
    )
    list_filter = ("enabled", "source")
    search_fields = ("name", "job_name")
    readonly_fields = ("next_run_at", "last_run_at", "source", "created_at")
    actions = ["enable", "disable", "run_now"]

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

    @admin.action(
        description="Enable selected schedules (next run from now)", permissions=["change"]
    )
    def enable(self, request: HttpRequest, queryset: QuerySet[RecurringJob]) -> None:
        disabled = queryset.filter(enabled=False).values_list("pk", flat=True)
        count = sum(1 for pk in disabled if change_schedule(pk, {"enabled": True}) is not None)
        self.message_user(request, f"{count} schedule(s) enabled.", messages.SUCCESS)

    @admin.action(description="Disable selected schedules", permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[RecurringJob]) -> None:
        count = queryset.filter(enabled=True).update(enabled=False)
        self.message_user(request, f"{count} schedule(s) disabled.", messages.SUCCESS)

    @admin.action(description="Run selected schedules now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[RecurringJob]) -> None:
        jobs = [enqueue_run_now(schedule) for schedule in queryset]
        ids = ", ".join(f"#{job.pk}" for job in jobs)
        self.message_user(request, f"{len(jobs)} job(s) enqueued: {ids}.", messages.SUCCESS)
