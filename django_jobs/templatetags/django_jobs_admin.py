"""The admin's jobs summary (on the index and the app index) and how its pages print values."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.db import router
from django.urls import NoReverseMatch, reverse

from ..management.output import format_age, format_time
from ..models import Job
from ..stats import overview

register = template.Library()


@register.inclusion_tag("admin/django_jobs/dashboard_summary.html", takes_context=True)
def jobs_summary(context: template.Context) -> dict[str, Any]:
    """Per queue the live counts, the oldest due job and the flags; for users who may view jobs."""
    # Imported here: Django loads every tag library, also in projects without the admin.
    from ..admin.dashboard import URL_NAME, can_view

    request = context.get("request")
    if request is None or not can_view(request):
        return {"visible": False}
    try:
        url = reverse(f"admin:{URL_NAME}", current_app=getattr(request, "current_app", None))
    except NoReverseMatch:  # a site the dashboard was not installed on
        url = None
    seen = overview(router.db_for_read(Job), chart=False)
    return {"visible": True, "overview": seen, "dashboard_url": url}


@register.filter
def jobs_time(value: datetime | None) -> str:
    """``2026-01-05 12:00:03 UTC``: in the active time zone, to the second."""
    return format_time(value)


@register.filter
def jobs_age_at(since: datetime | None, now: datetime) -> str:
    """How long before ``now`` ``since`` was: ``1h02m03s``, ``4m05s``, ``6s``."""
    return format_age(None if since is None else now - since)


@register.filter
def jobs_count(value: int, estimated: bool) -> str:
    """A count; an estimate is marked ``≈``."""
    return f"≈{value}" if estimated else str(value)


@register.filter
def jobs_item(mapping: dict[str, Any], key: str) -> Any:
    return mapping.get(key)
