#!/usr/bin/env python
"""Pruning benchmark: the drain rate of ``runjobs`` while the cleaner prunes expired jobs.

    bash scripts/bench-pruning                                   # sets up the venv and the server
    DATABASE_URL=postgres://... python bench/pruning.py --jobs 20000 --expired 200000
    DATABASE_URL=postgres://... python bench/pruning.py --rounds 2 --json .tmp/pruning.json
    DATABASE_URL=postgres://... python bench/pruning.py --cleaner --expired 100000 --rounds 3

Each round drains ``--jobs`` fresh ``demo.noop`` jobs twice, on the PostgreSQL
database ``DATABASE_URL`` names (migrated, its django_jobs tables emptied: never
point it at jobs you want to keep):

1. **without** expired rows: the tables hold only the fresh jobs;
2. **with** ``--expired`` succeeded jobs (each with one attempt row) whose retention
   ended long ago, inserted by one set-based ``INSERT ... SELECT generate_series()``
   per table, for the worker's maintenance pass to prune while it drains.

Before each drain the benchmark ANALYZEs and CHECKPOINTs, then starts one
``manage.py runjobs --queue default --workers 2 --burst`` process (as the peers
bench runs django-jobs), with ``MAINTENANCE_SECONDS`` set by ``--maintenance-seconds``
so that pruning overlaps the drain, and waits for it to exit. It reports:

- the drain rate: the fresh jobs divided by the time from the first one's
  ``started_at`` to the last one's ``finished_at``, read from the rows; and, with
  expired rows, the rate while the cleaner pruned: the fresh jobs that finished
  between its first and its last pass of the drain, per second;
- how many expired rows the worker deleted in all (the rows counted before and
  after), and how many during the drain, in how many passes and batches (read from
  the worker's ``jobs_pruned`` log lines: one a pass, giving its count; a pass
  works in batches of the cleaner's ``PRUNE_BATCH``, all full but its last, since
  the expired jobs share one status).

``--cleaner`` times the cleaner alone instead, in this process and with no worker, on
any database ``DATABASE_URL`` names: each round inserts ``--expired`` rows and prunes them
all (``prune_finished``), twice, as the driver deletes a batch (PostgreSQL in one
statement, SQLite and MariaDB a delete a table) and by Django's cascade (as where a delete
receiver asks for it: here the cleaner is told so); it reports the rows a second and the
CPU time this process spent a row, which a worker that leads spends beside its jobs.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import harness
import pruning_data
from harness import JOB_NAME, QUEUE, BenchError

THREADS = 2
STOP_GRACE_SECONDS = 15.0
# "2026-12-01 15:42:06,123 INFO MainThread django_jobs.maintenance.cleaner: 10000 finished ..."
PRUNED_LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ \S+ django_jobs\.maintenance\.cleaner: "
    r"(?P<count>\d+) finished job\(s\) past their retention deleted"
)


@dataclass(frozen=True)
class Options:
    jobs: int
    expired: int
    rounds: int
    batch: int
    maintenance_seconds: float
    timeout: float
    json: Path | None
    cleaner: bool = False


@dataclass(frozen=True)
class Pass:
    """One maintenance pass that deleted rows: when it logged, and how many."""

    at: datetime
    count: int


@dataclass
class DrainResult:
    label: str
    jobs: int
    expired_before: int = 0
    expired_after: int = 0
    drain_seconds: float = 0.0
    drain_rate: float = 0.0
    pruned_during_drain: int = 0
    passes_during_drain: int = 0
    batches_during_drain: int = 0
    rate_while_pruning: float | None = None  # jobs/s from the first pass to the last
    passes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pruned(self) -> int:
        return self.expired_before - self.expired_after


# -- options and set-up -----------------------------------------------------------


def parse_options(argv: list[str] | None = None) -> Options:
    parser = harness.option_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=20_000, help="fresh jobs to drain, each time")
    parser.add_argument(
        "--expired", type=int, default=200_000, help="expired finished jobs to prune"
    )
    parser.add_argument("--rounds", type=int, default=1, help="drains without, then with, x N")
    harness.add_batch_option(parser)
    parser.add_argument(
        "--maintenance-seconds",
        type=float,
        default=1.0,
        help="the worker's MAINTENANCE_SECONDS (how often it prunes)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="per drain (seconds)")
    parser.add_argument(
        "--cleaner", action="store_true", help="time the cleaner alone, both ways (no drain)"
    )
    harness.add_json_option(parser)
    args = parser.parse_args(argv)
    harness.require_at_least_one(parser, args, "jobs", "expired", "rounds", "batch")
    if args.maintenance_seconds <= 0:
        parser.error("--maintenance-seconds must be positive")
    return Options(
        args.jobs,
        args.expired,
        args.rounds,
        args.batch,
        args.maintenance_seconds,
        args.timeout,
        args.json,
        args.cleaner,
    )


# -- the worker -------------------------------------------------------------------


def runjobs_command() -> list[str]:
    return harness.runjobs_command("--queue", QUEUE, "--workers", str(THREADS), "--burst")


def run_worker(log: Path, timeout: float) -> None:
    """One ``runjobs --burst`` process until it exits; SIGTERM then SIGKILL by pid if not."""
    process = harness.start_process(runjobs_command(), log)
    try:
        code = process.wait(timeout)
    except BaseException:
        harness.stop_processes([process], STOP_GRACE_SECONDS)
        harness.print_log_tail(log)
        raise
    if code != 0:
        raise BenchError(f"runjobs exited with code {code}; see {log}")


# -- reading the results ------------------------------------------------------------


def parse_passes(lines: list[str]) -> list[Pass]:
    """The cleaner's ``jobs_pruned`` lines of a worker's log (local times, as logged)."""
    passes = []
    for line in lines:
        match = PRUNED_LINE.match(line)
        if match:
            at = datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S,%f").astimezone()
            passes.append(Pass(at, int(match["count"])))
    return passes


def batches(count: int, batch: int) -> int:
    """Batches a pass took to delete ``count`` rows: full ones, and one short one if any."""
    return math.ceil(count / batch)


def passes_within(passes: list[Pass], first: datetime, last: datetime) -> list[Pass]:
    """The passes that ended inside ``[first, last]``."""
    return [one for one in passes if first <= one.at <= last]


def rate_between(first: datetime, last: datetime) -> float:
    """Fresh jobs per second that finished between ``first`` and ``last``."""
    from django_jobs.models import Job

    done = Job.objects.filter(name=JOB_NAME, finished_at__gte=first, finished_at__lte=last)
    return done.count() / (last - first).total_seconds()


def drain(label: str, options: Options, expired: int, log_dir: Path) -> DrainResult:
    from django.utils import timezone

    from django_jobs.maintenance.cleaner import PRUNE_BATCH

    result = DrainResult(label, options.jobs)
    harness.empty_tables()
    if expired:
        pruning_data.insert_expired(expired, timezone.now())
    pruning_data.enqueue(options.jobs, options.batch)
    harness.settle_database()
    result.expired_before = pruning_data.count_expired(timezone.now())
    log = log_dir / f"runjobs-{label}.log"
    run_worker(log, options.timeout)
    result.expired_after = pruning_data.count_expired(timezone.now())
    first, last = harness.drain_span(options.jobs)
    result.drain_seconds = (last - first).total_seconds()
    result.drain_rate = options.jobs / result.drain_seconds
    passes = parse_passes(log.read_text(errors="replace").splitlines())
    during = passes_within(passes, first, last)
    result.pruned_during_drain = sum(one.count for one in during)
    result.passes_during_drain = len(during)
    result.batches_during_drain = sum(batches(one.count, PRUNE_BATCH) for one in during)
    if len(during) > 1:
        result.rate_while_pruning = rate_between(during[0].at, during[-1].at)
    result.passes = [{"at": one.at.isoformat(), "count": one.count} for one in passes]
    return result


@dataclass
class CleanerResult:
    """The cleaner alone: ``rows`` pruned in ``seconds``, this process's CPU meanwhile."""

    label: str
    rows: int
    seconds: float
    cpu_seconds: float


#: The ways the cleaner prunes (``--cleaner``), and whether Django's cascade is forced.
CLEANER_WAYS = (("the driver's", False), ("Django's cascade", True))


def time_cleaner(label: str, expired: int, cascade: bool) -> CleanerResult:
    """Insert ``expired`` rows and prune them all, by Django's cascade if ``cascade``."""
    import time

    from django.db import connection
    from django.utils import timezone

    from django_jobs.maintenance import cleaner

    harness.empty_tables()
    if connection.vendor == "postgresql":
        pruning_data.insert_expired(expired, timezone.now())
    else:
        pruning_data.insert_expired_rows(expired, timezone.now())
    harness.settle_database()
    original = cleaner.cascades
    if cascade:
        cleaner.cascades = lambda using: None  # type: ignore[assignment]
    try:
        began, cpu = time.perf_counter(), time.process_time()
        rows = cleaner.prune_finished(timezone.now(), using="default")
        seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    finally:
        cleaner.cascades = original  # type: ignore[assignment]
    return CleanerResult(label, rows, seconds, cpu)


def cleaner_table(results: list[CleanerResult]) -> str:
    """Each timing as a line: rows, seconds, rows a second, this process's CPU a row."""
    lines = [f"{'cleaner':<18}{'rows':>10}{'seconds':>10}{'rows/s':>10}{'CPU us a row':>15}"]
    for result in results:
        lines.append(
            f"{result.label:<18}{result.rows:>10,}{result.seconds:>10.2f}"
            f"{result.rows / result.seconds:>10,.0f}"
            f"{1e6 * result.cpu_seconds / max(1, result.rows):>15,.1f}"
        )
    return "\n".join(lines)


# -- the report -------------------------------------------------------------------

COLUMNS = [
    ("drain", 10),
    ("jobs", 9),
    ("drain jobs/s", 14),
    ("drain s", 9),
    ("while pruning", 15),
    ("expired before", 16),
    ("pruned", 9),
    ("pruned in drain", 17),
    ("passes", 8),
    ("batches", 9),
]


def table_row(result: DrainResult) -> list[str]:
    return [
        result.label,
        f"{result.jobs:,}",
        f"{result.drain_rate:,.0f}",
        f"{result.drain_seconds:.2f}",
        "-" if result.rate_while_pruning is None else f"{result.rate_while_pruning:,.0f}",
        f"{result.expired_before:,}",
        f"{result.pruned:,}",
        f"{result.pruned_during_drain:,}",
        str(result.passes_during_drain),
        str(result.batches_during_drain),
    ]


def format_table(results: list[DrainResult]) -> str:
    """The drains as a text table: the label left-aligned, the figures right-aligned."""
    widths = [width for _, width in COLUMNS]
    lines = []
    for row in [[name for name, _ in COLUMNS]] + [table_row(result) for result in results]:
        line = row[0].ljust(widths[0])
        line += "".join(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))
        lines.append(line.rstrip())
    return "\n".join(lines)


def summary(results: list[DrainResult]) -> str:
    """The median drain rate of each kind, and the one with expired rows as a share."""
    rates: dict[str, list[float]] = {}
    for result in results:
        rates.setdefault(result.label, []).append(result.drain_rate)
    medians = {label: statistics.median(values) for label, values in rates.items()}
    text = ", ".join(f"{label}: {rate:,.0f} jobs/s" for label, rate in medians.items())
    if medians.get("without") and "with" in medians:
        text += f"; with pruning at {100 * medians['with'] / medians['without']:.0f}%"
    return f"median drain ({text})"


def run_info(options: Options) -> dict[str, Any]:
    from django.db import connection

    from django_jobs.maintenance.cleaner import PRUNE_BATCH
    from django_jobs.worker.leader.maintainer import PRUNE_BATCHES

    durability = harness.durability() if connection.vendor == "postgresql" else {}
    database = {"database": harness.database_version(), "database_settings": durability}
    details = {
        "jobs": options.jobs,
        "expired": options.expired,
        "threads": THREADS,
        "maintenance_seconds": options.maintenance_seconds,
        "prune_batch": PRUNE_BATCH,
        "prune_batches_per_pass": PRUNE_BATCHES,
        "command": " ".join(runjobs_command()[1:]),
    }
    return harness.run_info("pruning", database, details)


def print_report(info: dict[str, Any], results: list[DrainResult]) -> None:
    print(f"\n{info['database']} ({harness.format_settings(info['database_settings'])})")
    print(
        f"{harness.software_line(info)}; {info['jobs']:,} x {JOB_NAME} per drain, one"
        f" runjobs --workers {info['threads']} --burst; MAINTENANCE_SECONDS="
        f"{info['maintenance_seconds']:g}, up to {info['prune_batches_per_pass']} batches of"
        f" {info['prune_batch']:,} a pass"
    )
    print(format_table(results))
    print(summary(results))


# -- main -------------------------------------------------------------------------


def run(options: Options, work_dir: Path) -> tuple[dict[str, Any], list[Any]]:
    if options.cleaner and os.environ.get("DATABASE_URL"):  # the cleaner alone: any database
        url = os.environ["DATABASE_URL"]
    else:  # the drains, and their expired rows' inserts, are PostgreSQL's
        url = harness.postgresql_url("scripts/bench-pruning")
    harness.configure_environment(
        url,
        JOBS_MAINTENANCE_SECONDS=str(options.maintenance_seconds),
        PYTHONUNBUFFERED="1",
    )
    harness.setup_django()
    harness.migrate()
    info = run_info(options)
    print(info["database"], file=sys.stderr)
    results: list[Any] = []
    if options.cleaner:
        for number in range(1, options.rounds + 1):
            for label, cascade in CLEANER_WAYS:
                harness.heading(f"round {number}: the cleaner, {label}")
                results.append(time_cleaner(label, options.expired, cascade))
        harness.empty_tables()
        return info, results
    for number in range(1, options.rounds + 1):
        for label, expired in (("without", 0), ("with", options.expired)):
            harness.heading(f"round {number}: {label} expired rows")
            results.append(drain(label, options, expired, work_dir))
    harness.empty_tables()
    return info, results


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    harness.raise_on_sigterm()
    with harness.work_directory("django-jobs-pruning.") as work_dir:
        try:
            info, results = run(options, work_dir)
        except BenchError as exc:
            return harness.failed(exc)
    if options.cleaner:
        settings = info["database_settings"]  # PostgreSQL's durability; none elsewhere
        shown = f" ({harness.format_settings(settings)})" if settings else ""
        print(f"\n{info['database']}{shown}")
        print(cleaner_table(results))
        if options.json:
            harness.write_json(options.json, {**info, "cleaner": [asdict(r) for r in results]})
        return 0
    print_report(info, results)
    if options.json:
        data = {
            **info,
            "drains": [asdict(result) | {"pruned": result.pruned} for result in results],
        }
        harness.write_json(options.json, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
