"""The admin's jobs summary (on the index and the app index) and how its pages print values."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from django import template
from django.db import DatabaseError, connections, router, transaction
from django.template.loader import get_template
from django.urls import NoReverseMatch, reverse

from ..display import format_age, format_time
from ..models import Job
from ..stats import overview

register = template.Library()
logger = logging.getLogger(__name__)
T = TypeVar("T")


@register.simple_tag
def jobs_breadcrumbs_as_list() -> bool:
    """Whether this Django's admin writes its breadcrumbs as a list (``<ol
    class="breadcrumbs">``, Django 6's) rather than a ``<div>``: read from its own change
    list template, so that a page of ours is marked up, and styled, as each version's are."""
    return breadcrumbs_as_list()


@functools.cache
def breadcrumbs_as_list() -> bool:
    # The Django engine's template; its source is the file's text.
    source = getattr(get_template("admin/change_list.html"), "template", None)
    return '<ol class="breadcrumbs">' in str(getattr(source, "source", ""))


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
    using = router.db_for_read(Job)
    try:
        seen = read_guarded(using, lambda: overview(using, chart=False))
    except DatabaseError as exc:  # the jobs database is down or not migrated: say so, serve on
        logger.warning("jobs summary unavailable: %s", exc, extra={"event": "admin_error"})
        return {"visible": True, "error": str(exc).strip() or type(exc).__name__}
    return {"visible": True, "overview": seen, "dashboard_url": url}


def read_guarded(using: str, read: Callable[[], T]) -> T:
    """Run ``read``; inside a transaction, under a savepoint, so that a failed query
    leaves the page's transaction usable. Outside one no transaction is opened (on
    SQLite with ``IMMEDIATE`` transactions it would take the write lock)."""
    if connections[using].in_atomic_block:
        with transaction.atomic(using=using):
            return read()
    return read()


@register.filter
def jobs_time(value: datetime | None) -> str:
    """``2026-01-05 12:00:03 UTC``: in the active time zone, to the second."""
    return format_time(value)


@register.filter
def jobs_age_at(since: datetime | None, now: datetime) -> str:
    """How long before ``now`` ``since`` was: ``1h02m03s``, ``4m05s``, ``6s``."""
    return "-" if since is None else format_age(now - since)


@register.filter
def jobs_count(value: int, estimated: bool) -> str:
    """A count; an estimate is marked ``≈``."""
    return f"≈{value}" if estimated else str(value)


@register.filter
def jobs_item(mapping: dict[str, Any], key: str) -> Any:
    return mapping.get(key)
