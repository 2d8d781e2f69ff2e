"""Metrics in Prometheus' text format: the database-wide gauges, read when scraped.

:func:`view` serves them from the web process, to a staff user or to a scraper that gives
``DJANGO_JOBS["METRICS_TOKEN"]`` as a bearer token (``Authorization: Bearer ...``); a
project mounts it in its ``urls.py``. Each scrape reads the database once, through the
counts the dashboard uses (:func:`django_jobs.stats.overview`): live jobs only, each count
on its partial index, so a scrape costs the same at a million finished rows. Needs
``prometheus_client`` (``django-jobs[prometheus]``).

The names (``docs/how-to/observability.md``):

- ``django_jobs_queue_depth{queue,status}``: live jobs by status (waiting, due,
  scheduled, retrying, running);
- ``django_jobs_oldest_due_age_seconds{queue}``: how long the oldest due job has waited;
- ``django_jobs_running{queue}`` against ``django_jobs_limit{queue}`` (a queue with a
  ``global_limit``), ``django_jobs_queue_paused{queue}``;
- ``django_jobs_leader_epoch`` (absent while no worker leads), ``django_jobs_workers``.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from .conf import settings
from .stats import Overview, overview

logger = logging.getLogger(__name__)

#: The statuses ``django_jobs_queue_depth`` counts, by their label.
DEPTHS = ("waiting", "due", "scheduled", "retrying", "running")
INSTALL = "pip install 'django-jobs[prometheus]'"


def prometheus() -> Any:
    """``prometheus_client``, or a clear error saying how to install it."""
    try:
        import prometheus_client
    except ImportError:
        raise ImproperlyConfigured(
            f"django_jobs.metrics.view needs prometheus_client: {INSTALL}"
        ) from None
    return prometheus_client


@dataclass(frozen=True)
class Gauge:
    """One database-wide gauge: its Prometheus name, what it is, its labels and unit (for
    OpenTelemetry, which names it with a dot: :attr:`otel_name`)."""

    name: str
    description: str
    labels: tuple[str, ...] = ()
    unit: str = "1"

    @property
    def otel_name(self) -> str:
        return "django_jobs." + self.name.removeprefix("django_jobs_").removesuffix("_seconds")


QUEUE_DEPTH = Gauge(
    "django_jobs_queue_depth", "Live jobs of a queue, by status.", ("queue", "status"), "{job}"
)
OLDEST_DUE_AGE = Gauge(
    "django_jobs_oldest_due_age_seconds",
    "How long the oldest due job of a queue has waited past its run_at.",
    ("queue",),
    "s",
)
RUNNING = Gauge("django_jobs_running", "Jobs of a queue running now.", ("queue",), "{job}")
LIMIT = Gauge(
    "django_jobs_limit",
    "A queue's global_limit: the most of its jobs that run at once.",
    ("queue",),
    "{job}",
)
PAUSED = Gauge("django_jobs_queue_paused", "1 while a queue is paused, else 0.", ("queue",))
WORKERS = Gauge(
    "django_jobs_workers",
    "Worker processes serving queues whose heartbeat is fresh (not counting the"
    " supervisor of runjobs --processes).",
    unit="{process}",
)
LEADER_EPOCH = Gauge(
    "django_jobs_leader_epoch", "How many times the leader lease has passed to a new leader."
)
GAUGES = (QUEUE_DEPTH, OLDEST_DUE_AGE, RUNNING, LIMIT, PAUSED, WORKERS, LEADER_EPOCH)

#: A gauge's samples: each its label values (in the gauge's order) and its value.
Readings = dict[Gauge, list[tuple[tuple[str, ...], float]]]


def readings(seen: Overview) -> Readings:
    """The gauges' samples in ``seen`` (an overview read at scrape time)."""
    found: Readings = {gauge: [] for gauge in GAUGES}
    for stats in seen.queues:
        queue = (stats.queue,)
        for status in DEPTHS:
            found[QUEUE_DEPTH].append(((stats.queue, status), getattr(stats, status)))
        age = stats.oldest_due_age(seen.now)
        found[OLDEST_DUE_AGE].append((queue, 0.0 if age is None else age.total_seconds()))
        found[RUNNING].append((queue, stats.running))
        if stats.limits is not None and stats.limits.global_limit is not None:
            found[LIMIT].append((queue, stats.limits.global_limit))
        found[PAUSED].append((queue, 1 if stats.paused_at is not None else 0))
    found[WORKERS].append(((), sum(1 for worker in seen.workers if not worker.process_count)))
    if seen.leader is not None:  # absent while no worker leads
        found[LEADER_EPOCH].append(((), seen.leader.epoch))
    return found


def families(seen: Overview) -> Iterator[Any]:
    """The gauges of ``seen``, as ``prometheus_client`` metric families."""
    from prometheus_client.core import GaugeMetricFamily

    for gauge, samples in readings(seen).items():
        if not samples and not gauge.labels:
            continue
        family = GaugeMetricFamily(gauge.name, gauge.description, labels=list(gauge.labels))
        for values, value in samples:
            family.add_metric(list(values), value)
        yield family


class DatabaseCollector:
    """A ``prometheus_client`` collector that reads the database at each scrape."""

    def __init__(self, using: str | None = None, now: datetime | None = None) -> None:
        self.using = using
        self.now = now

    def collect(self) -> Iterator[Any]:
        seen = overview(self.using, now=self.now, chart=False, finished=False)
        yield from families(seen)


def exposition(using: str | None = None) -> tuple[bytes, str]:
    """The database-wide metrics in the text format, and its content type."""
    client = prometheus()
    registry = client.CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(using))
    return client.generate_latest(registry), client.CONTENT_TYPE_LATEST


def allowed(request: HttpRequest) -> bool:
    """A staff user, or the configured bearer token (compared in constant time)."""
    user = getattr(request, "user", None)
    if user is not None and user.is_active and user.is_staff:
        return True
    token = settings.METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    scheme, _, value = given.partition(" ")
    if token is None or scheme.lower() != "bearer" or not value:
        return False
    return hmac.compare_digest(value.strip().encode(), str(token).encode())


@never_cache
@require_GET
def view(request: HttpRequest) -> HttpResponse:
    """The database-wide metrics, for a staff user or a scraper with ``METRICS_TOKEN``;
    401 to anyone else (a bearer challenge), never a hint of what is configured."""
    if not allowed(request):
        response = HttpResponse("Authentication required.\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="django-jobs metrics"'
        return response
    body, content_type = exposition()
    return HttpResponse(body, content_type=content_type)
