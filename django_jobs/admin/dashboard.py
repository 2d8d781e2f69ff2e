"""The dashboard: per queue the counts, the oldest due job, the last hour; what needs a look.

Its URL, ``admin:django_jobs_dashboard``, is added to the default ``admin.site`` when
the admin loads this module; ``install(site)`` adds it to another ``AdminSite``. The
same call puts the summary on the site's index, unless the project chose its own
``index_template``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.db import router
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path
from django.utils import timezone
from django.utils.html import format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from .. import health
from ..display import format_time
from ..models import Job
from ..stats import CHART_MINUTES, Minute, overview

VIEW_PERMISSION = "django_jobs.view_job"
INDEX_TEMPLATE = "admin/django_jobs/dashboard_index.html"
URL_NAME = "django_jobs_dashboard"

# The chart's geometry, in SVG user units: finished bars rise above the axis,
# failed bars hang below it, so the two series read apart without colour.
BAR_WIDTH = 6
BAR_GAP = 1
HALF_HEIGHT = 40
LEFT = 34
TOP = 14
LABEL_BAND = 16


def can_view(request: HttpRequest) -> bool:
    return bool(request.user.has_perm(VIEW_PERMISSION))


@dataclass
class Bar:
    x: int
    y: float
    height: float
    count: int
    series: str  # "succeeded" or "failed"
    minute: datetime


@dataclass
class Tick:
    x: int
    minute: datetime
    anchor: str = "start"  # the label's text-anchor: the last one ends at the plot's edge


@dataclass
class Chart:
    """One queue's last hour, laid out for ``admin/django_jobs/dashboard_chart.html``."""

    queue: str
    bars: list[Bar]
    ticks: list[Tick]
    scale: int  # the count a full-height bar stands for
    finished: int
    failed: int
    first_minute: datetime
    last_minute: datetime
    left: int = LEFT
    top: int = TOP
    bar_width: int = BAR_WIDTH

    def bars_svg(self) -> SafeString:
        """The bars as ``<rect>`` elements, each with its minute and count as its title.

        Built here rather than in the template: a template loop over up to 120 bars a
        queue took most of the page's time.
        """
        series = {"succeeded": gettext("succeeded"), "failed": gettext("failed")}
        return format_html_join(
            "\n",
            '<rect class="bar bar-{}" data-series="{}" data-count="{}" data-minute="{}"'
            ' x="{}" y="{}" width="{}" height="{}"><title>{}: {} {}</title></rect>',
            (
                (
                    bar.series,
                    bar.series,
                    bar.count,
                    timezone.localtime(bar.minute).isoformat(),
                    bar.x,
                    bar.y,
                    self.bar_width,
                    bar.height,
                    format_time(bar.minute),
                    bar.count,
                    series[bar.series],
                )
                for bar in self.bars
            ),
        )

    @property
    def axis_y(self) -> int:
        return self.top + HALF_HEIGHT

    @property
    def bottom(self) -> int:
        return self.axis_y + HALF_HEIGHT

    @property
    def plot_right(self) -> int:
        return self.left + CHART_MINUTES * (BAR_WIDTH + BAR_GAP)

    @property
    def middle_x(self) -> int:
        return (self.left + self.plot_right) // 2

    @property
    def width(self) -> int:
        return self.plot_right + 4

    @property
    def height(self) -> int:
        return self.bottom + LABEL_BAND

    @property
    def label_x(self) -> int:
        return self.left - 4

    @property
    def top_label_y(self) -> int:
        return self.top - 4

    @property
    def axis_label_y(self) -> int:
        return self.axis_y + 3

    @property
    def bottom_label_y(self) -> int:
        return self.bottom + 9

    @property
    def tick_label_y(self) -> int:
        return self.height - 1


def bar_height(count: int, scale: int) -> float:
    return round(HALF_HEIGHT * count / scale, 1) if scale else 0.0


def layout_chart(queue: str, minutes: list[Minute]) -> Chart:
    """Bars for the non-empty minutes, on one scale for both series; a tick every 15 minutes and
    at the last one."""
    scale = max([m.finished for m in minutes] + [m.failed for m in minutes] + [0])
    axis_y = TOP + HALF_HEIGHT
    bars: list[Bar] = []
    for i, minute in enumerate(minutes):
        x = LEFT + i * (BAR_WIDTH + BAR_GAP)
        if minute.finished:
            height = bar_height(minute.finished, scale)
            bars.append(Bar(x, axis_y - height, height, minute.finished, "succeeded", minute.start))
        if minute.failed:
            height = bar_height(minute.failed, scale)
            bars.append(Bar(x, axis_y, height, minute.failed, "failed", minute.start))
    ticks = [
        Tick(LEFT + i * (BAR_WIDTH + BAR_GAP), minutes[i].start)
        for i in range(0, len(minutes) - 10, 15)
    ]
    last = minutes[-1].start
    ticks.append(Tick(LEFT + len(minutes) * (BAR_WIDTH + BAR_GAP), last, anchor="end"))
    return Chart(
        queue=queue,
        bars=bars,
        ticks=ticks,
        scale=scale,
        finished=sum(m.finished for m in minutes),
        failed=sum(m.failed for m in minutes),
        first_minute=minutes[0].start,
        last_minute=minutes[-1].start,
    )


def dashboard_view(site: AdminSite) -> Callable[..., HttpResponse]:
    def dashboard(request: HttpRequest) -> HttpResponse:
        if not can_view(request):
            raise PermissionDenied
        seen = overview(router.db_for_read(Job))
        seen_health = health.read(now=seen.now)
        context: dict[str, Any] = {
            **site.each_context(request),
            "title": gettext("Jobs dashboard"),
            "subtitle": None,
            "overview": seen,
            # What holds back the cleanup of the jobs tables (django_jobs.health), past
            # HEALTH_HORIZON_SECONDS; the index's summary leaves it to this page.
            "health_problems": health.problems(seen_health),
            "health_summary": health.summary(seen_health, seen.now),
            "charts": {
                queue: layout_chart(queue, minutes) for queue, minutes in seen.throughput.items()
            },
        }
        request.current_app = site.name
        return TemplateResponse(request, "admin/django_jobs/dashboard.html", context)

    return dashboard


def install(site: AdminSite) -> None:
    """Serve the dashboard at ``<admin>/django_jobs/dashboard/`` of ``site``; once.

    Also sets ``site.index_template`` to the index with the jobs summary, unless
    the project set its own (set it to ``"admin/index.html"`` to leave the summary out).
    """
    if getattr(site, "django_jobs_dashboard", False):
        return
    site.django_jobs_dashboard = True  # type: ignore[attr-defined]
    get_urls = site.get_urls

    def with_dashboard() -> list[URLPattern | URLResolver]:
        view = site.admin_view(dashboard_view(site))
        return [path("django_jobs/dashboard/", view, name=URL_NAME), *get_urls()]

    site.get_urls = with_dashboard  # type: ignore[method-assign]
    if site.index_template is None:
        site.index_template = INDEX_TEMPLATE


install(admin.site)
