"""The worker's own metrics: what its process did, counted as :mod:`django_jobs.events`
reports it (the one reporter), through ``prometheus_client`` and OpenTelemetry's metrics
API, each when installed.

- ``django_jobs_outcomes_total{job,queue,outcome}``: each written end of an attempt, by
  kind (``succeeded``, ``failed`` (due again), ``dead_lettered``, ``cancelled``,
  ``released``, ``snoozed``), and each end the rescuer or the maintenance pass decided;
- ``django_jobs_wait_seconds{job,queue}``: how long each job waited from its ``run_at`` to
  its claim (its attempt's ``started_at``);
- ``django_jobs_run_seconds{job,queue}``: how long each handler ran;
- ``django_jobs_leases_lost_total``, ``django_jobs_reclaims_total`` (leases the rescuer
  took back), ``django_jobs_snoozes_total``.

With ``prometheus_client`` the counters live in :data:`REGISTRY`, which ``runjobs
--metrics-port`` serves (:func:`serve`); under ``runjobs --processes`` each child writes
them to the supervisor's directory (``prometheus_client``'s multiprocess mode) and the
supervisor serves their sum. With OpenTelemetry's API and a meter provider configured,
the same instruments (named with dots: ``django_jobs.outcomes``, ``django_jobs.run`` in
seconds, ...) go to its exporters. Without either, each call does nothing.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

#: Where ``runjobs --processes`` children write their counters for the supervisor to sum
#: (``prometheus_client``'s own variable: it must be set before the children import it).
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: The buckets of a job's wait from its run_at to its start (seconds): a wake-up's to an hour.
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
#: How often the OpenTelemetry meter provider is looked up again (seconds).
PROVIDER_SECONDS = 1.0
#: The histogram's buckets of a handler's run (seconds): a no-op's to an hour's.
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

try:
    import prometheus_client
except ImportError:  # the ``prometheus`` extra is not installed
    prometheus_client = None  # type: ignore[assignment]

try:
    from opentelemetry import metrics as otel_metrics
except ImportError:  # the ``otel`` extra is not installed
    otel_metrics = None  # type: ignore[assignment]


class Prometheus:
    """The instruments in ``prometheus_client``'s registry :attr:`registry`."""

    def __init__(self) -> None:
        client = prometheus_client
        self.registry = client.CollectorRegistry(auto_describe=True)
        labels = ["job", "queue"]
        self.outcomes = client.Counter(
            "django_jobs_outcomes",
            "Ends of attempts, by job, queue and kind of end.",
            [*labels, "outcome"],
            registry=self.registry,
        )
        self.wait = client.Histogram(
            "django_jobs_wait_seconds",
            "How long each job waited from its run_at to its claim (its attempt's start).",
            labels,
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.run = client.Histogram(
            "django_jobs_run_seconds",
            "How long each handler ran.",
            labels,
            buckets=RUN_BUCKETS,
            registry=self.registry,
        )
        self.leases_lost = client.Counter(
            "django_jobs_leases_lost",
            "Outcomes not written: the job's lease had passed to another worker.",
            registry=self.registry,
        )
        self.reclaims = client.Counter(
            "django_jobs_reclaims",
            "Leases the rescuer took back from workers that stopped renewing them.",
            registry=self.registry,
        )
        self.snoozes = client.Counter(
            "django_jobs_snoozes", "Attempts that snoozed (raise Snooze).", registry=self.registry
        )


class OpenTelemetry:
    """The same instruments from a meter of the configured meter provider."""

    def __init__(self, provider: Any) -> None:
        from .version import __version__

        meter = provider.get_meter("django_jobs", __version__)
        self.provider = provider
        self.outcomes = meter.create_counter(
            "django_jobs.outcomes", unit="{attempt}", description="Ends of attempts."
        )
        self.wait = meter.create_histogram(
            "django_jobs.wait", unit="s", description="How long each job waited to start."
        )
        self.run = meter.create_histogram(
            "django_jobs.run", unit="s", description="How long each handler ran."
        )
        self.leases_lost = meter.create_counter(
            "django_jobs.leases_lost", unit="{attempt}", description="Outcomes not written."
        )
        self.reclaims = meter.create_counter(
            "django_jobs.reclaims", unit="{lease}", description="Leases taken back."
        )
        self.snoozes = meter.create_counter(
            "django_jobs.snoozes", unit="{attempt}", description="Attempts that snoozed."
        )
        from .metrics import GAUGES

        self.gauges = [
            meter.create_observable_gauge(
                gauge.otel_name,
                callbacks=[functools.partial(_observe_gauge, gauge)],
                unit=gauge.unit,
                description=gauge.description,
            )
            for gauge in GAUGES
        ]


_prometheus: Prometheus | None = None
_otel: OpenTelemetry | None = None
_otel_looked_at = -math.inf
# Whether the ``prometheus_client`` instruments record: None until first asked (then, whether
# ``PROMETHEUS_MULTIPROC_DIR`` names a directory to write them to), True once served.
_collecting: bool | None = None
# Handler threads record at once: the instruments are made once, under it.
_making = threading.Lock()


def prometheus() -> Prometheus | None:
    """The ``prometheus_client`` instruments, made on first use; None without it, and while
    nothing reads them (:func:`collect_prometheus`)."""
    global _prometheus, _collecting
    if _collecting is None:
        _collecting = bool(os.environ.get(MULTIPROCESS_ENV))
    if not _collecting or prometheus_client is None:
        return None
    if _prometheus is None:
        with _making:
            if _prometheus is None:
                _prometheus = Prometheus()
    return _prometheus


def collect_prometheus(on: bool | None = True) -> None:
    """Record the worker's metrics in ``prometheus_client``'s instruments from now on (or,
    ``on=False``, no longer; None: decide at the next record, as a process starts).

    They are recorded only where something reads them: a worker that serves them
    (``runjobs --metrics-port``, :func:`serve`), and a process whose
    ``PROMETHEUS_MULTIPROC_DIR`` names a directory for them (a child of ``runjobs
    --processes --metrics-port``, or a project's own multiprocess set-up). Elsewhere their
    updates, a lock each, cost a busy worker a tenth of its drain for numbers no one saw."""
    global _collecting
    _collecting = on


def otel() -> OpenTelemetry | None:
    """The OpenTelemetry instruments of the configured meter provider; None without the
    package or while no provider is configured (the API's proxy or no-op).

    The provider is looked up again at most every :data:`PROVIDER_SECONDS`: the API's
    lookup reads the environment on each call while none is set, which would cost every
    job's end more than its metrics."""
    global _otel, _otel_looked_at
    if otel_metrics is None:
        return None
    now = time.monotonic()
    if now - _otel_looked_at < PROVIDER_SECONDS:
        return _otel
    provider = otel_metrics.get_meter_provider()
    with _making:
        _otel_looked_at = now
        if isinstance(provider, otel_metrics.NoOpMeterProvider) or type(provider).__name__ == (
            "_ProxyMeterProvider"
        ):
            _otel = None
        elif _otel is None or _otel.provider is not provider:
            _otel = OpenTelemetry(provider)
    return _otel


def forget() -> None:
    """Look the meter provider up again at the next record (tests that set one)."""
    global _otel, _otel_looked_at
    with _making:
        _otel, _otel_looked_at = None, -math.inf
        _bound.clear()
    database_read(None)


class Bound:
    """One job name and queue's instruments in every backend, their labels applied once.

    ``prometheus_client``'s ``labels()`` and a new attributes dict per call cost more than
    the update itself; a job's end records three times, so each (job, queue) is bound once
    and kept (the names are the registry's, a handful per project)."""

    def __init__(self, name: str, queue: str) -> None:
        self.prometheus = prometheus()
        self.otel = otel()
        labels = {"job": name, "queue": queue}
        self.attributes = labels
        self.outcomes: dict[str, Callable[[], object]] = {}
        self.wait: list[Callable[[float], object]] = []
        self.run: list[Callable[[float], object]] = []
        if self.prometheus is not None:
            self.wait.append(self.prometheus.wait.labels(**labels).observe)
            self.run.append(self.prometheus.run.labels(**labels).observe)
        if self.otel is not None:
            self.wait.append(functools.partial(_record, self.otel.wait, labels))
            self.run.append(functools.partial(_record, self.otel.run, labels))

    def current(self) -> bool:
        """Whether the backends are still those it was bound to (a meter provider is set
        once, usually after the first import)."""
        return self.prometheus is prometheus() and self.otel is otel()

    def outcome(self, kind: str) -> None:
        try:
            add = self.outcomes[kind]
        except KeyError:
            add = self.outcomes[kind] = self._outcome(kind)
        add()

    def _outcome(self, kind: str) -> Callable[[], object]:
        adds: list[Callable[[], object]] = []
        if self.prometheus is not None:
            adds.append(self.prometheus.outcomes.labels(outcome=kind, **self.attributes).inc)
        if self.otel is not None:
            attributes = {**self.attributes, "outcome": kind}
            adds.append(functools.partial(self.otel.outcomes.add, 1, attributes))
        return lambda: [add() for add in adds]


_bound: dict[tuple[str, str], Bound] = {}


def bound(name: str, queue: str) -> Bound:
    """The :class:`Bound` instruments of ``name`` on ``queue``."""
    instruments = _bound.get((name, queue))
    if instruments is None or not instruments.current():
        instruments = _bound[(name, queue)] = Bound(name, queue)
    return instruments


def each(record: Callable[[Any], object]) -> None:
    """``record`` with each backend's instruments; a failure is logged, never raised."""
    for instruments in (prometheus(), otel()):
        if instruments is None:
            continue
        guarded(record, instruments)


def guarded(record: Callable[..., object], *arguments: Any) -> None:
    try:
        record(*arguments)
    except Exception:  # metrics must never cost a job its outcome
        logger.exception("a metric could not be recorded", extra={"event": "worker_error"})


def recording() -> bool:
    """Whether any backend records the worker's metrics: while none does, a job's three
    records return at once (their instruments' lookup cost a busy worker 3 %)."""
    return prometheus() is not None or otel() is not None


def outcome(name: str, queue: str, kind: str) -> None:
    if not recording():
        return
    guarded(lambda: bound(name, queue).outcome(kind))
    if kind == "snoozed":
        each(lambda m: _count(m.snoozes, 1))


def waited(name: str, queue: str, seconds: float) -> None:
    if recording():
        guarded(lambda: [record(seconds) for record in bound(name, queue).wait])


def ran(name: str, queue: str, seconds: float) -> None:
    if recording():
        guarded(lambda: [record(seconds) for record in bound(name, queue).run])


def lease_lost() -> None:
    each(lambda m: _count(m.leases_lost, 1))


def reclaimed() -> None:
    each(lambda m: _count(m.reclaims, 1))


def _count(instrument: Any, amount: int) -> None:
    if hasattr(instrument, "add"):  # OpenTelemetry
        instrument.add(amount)
    else:
        instrument.inc(amount)


def _record(histogram: Any, attributes: dict[str, str], value: float) -> None:
    histogram.record(value, attributes)


# -- the database-wide gauges, through OpenTelemetry ---------------------------------------

#: How often the leader reads the database-wide gauges for OpenTelemetry (seconds).
GAUGE_SECONDS = 15.0
# The leader's last reading (monotonic time, readings); the gauges' callbacks, which run on
# the exporter's thread, observe it and never read the database themselves.
_database_readings: tuple[float, Any] | None = None


def database_read(readings: Any) -> None:
    """The leader's reading of the database-wide gauges (``metrics.readings``), for the
    OpenTelemetry exporter's next collection."""
    global _database_readings
    _database_readings = None if readings is None else (time.monotonic(), readings)


def _observe_gauge(gauge: Any, options: Any = None) -> list[Any]:
    """A database-wide gauge's observations: the leader's last reading while it is recent
    (three of its intervals); none in a process that does not lead, or no longer does."""
    from opentelemetry.metrics import Observation

    latest = _database_readings
    if latest is None or time.monotonic() - latest[0] > 3 * GAUGE_SECONDS:
        return []
    return [
        Observation(value, dict(zip(gauge.labels, values, strict=True)))
        for values, value in latest[1].get(gauge, [])
    ]


# -- serving them: runjobs --metrics-port ------------------------------------------------


def require_prometheus() -> Any:
    """``prometheus_client`` for ``runjobs --metrics-port``, or ValueError saying how."""
    if prometheus_client is None:
        raise ValueError(
            "--metrics-port needs prometheus_client: pip install 'django-jobs[prometheus]'"
        )
    return prometheus_client


def serve(port: int, address: str) -> Any:
    """Serve this process's metrics at ``http://address:port/metrics``; the server."""
    client = require_prometheus()
    collect_prometheus()
    instruments = prometheus()
    assert instruments is not None
    server, _thread = client.start_http_server(port, addr=address, registry=instruments.registry)
    return server


def serve_children(port: int, address: str) -> tuple[Any, str]:
    """For the supervisor of ``runjobs --processes``: a directory its children (which
    inherit :data:`MULTIPROCESS_ENV`) write their counters to, and the sum of them served
    at ``http://address:port/metrics``; the server and the directory (:func:`stop_serving`
    removes it)."""
    client = require_prometheus()
    from prometheus_client import multiprocess

    directory = tempfile.mkdtemp(prefix="django-jobs-metrics-")
    os.environ[MULTIPROCESS_ENV] = directory
    registry = client.CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)
    server, _thread = client.start_http_server(port, addr=address, registry=registry)
    return server, directory


def stop_serving(server: Any, directory: str | None = None) -> None:
    server.shutdown()
    server.server_close()
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
