#!/usr/bin/env python
"""Backlog benchmark: the drain of a queue that has fallen behind, while jobs keep coming.

    DATABASE_URL=postgres://... python bench/backlog.py                  # 300,000 queued
    DATABASE_URL=postgres://... python bench/backlog.py --backlog 20000 --seconds 20

1. The jobs tables are emptied, and ``--backlog`` no-op jobs enqueued (``schedule_jobs()``).
2. ``--processes`` processes of ``manage.py runjobs --workers --threads`` start, and this
   process enqueues ``--rate`` no-op jobs a second, in a ``schedule_jobs()`` every 100 ms,
   as a steady producer does: each call rings the queue's doorbell (``NOTIFY``) in every
   worker.
3. After ``--warmup`` seconds, the jobs that succeed in the next ``--seconds`` are
   counted: the drain, in jobs per second.

The test project registers async handlers, so each worker claims the queue in two lanes
(docs/explanation/claiming.md): what a lane with nothing due costs over a deep backlog
shows here, where a drain of a few thousand jobs (bench/drain.py) would not see it.

Any database but SQLite (whose file the workers would share with this process's writes:
bench/drain.py measures it). The jobs tables are emptied first: do not point it at a
database whose jobs you want to keep.
"""

from __future__ import annotations

import json
import os
import sys
import time
from argparse import Namespace
from pathlib import Path

import harness
from harness import JOB_NAME, QUEUE, BenchError

TICK_SECONDS = 0.1


def parse_options(argv: list[str] | None = None) -> Namespace:
    parser = harness.option_parser(__doc__)
    parser.add_argument("--backlog", type=int, default=300_000, help="jobs queued first")
    parser.add_argument("--rate", type=float, default=100.0, help="jobs/s enqueued meanwhile")
    parser.add_argument("--seconds", type=float, default=40.0, help="seconds counted")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds not counted")
    parser.add_argument("--processes", type=int, default=2, help="runjobs processes")
    parser.add_argument("--workers", type=int, default=2, help="handler threads each")
    harness.add_json_option(parser)
    args = parser.parse_args(argv)
    harness.require_at_least_one(parser, args, "backlog", "seconds", "processes", "workers")
    return args


def succeeded() -> int:
    from django_jobs.models import Job, JobStatus

    return Job.objects.filter(status=JobStatus.SUCCEEDED).count()


def produce(rate: float, until: float) -> None:
    """``rate`` jobs a second, a ``schedule_jobs()`` call each tick, until ``until``."""
    from django_jobs.scheduling import JobSpec, schedule_jobs

    per_tick = max(1, round(rate * TICK_SECONDS))
    tick = time.monotonic()
    while tick < until:
        schedule_jobs([JobSpec(JOB_NAME, {"n": number}) for number in range(per_tick)])
        tick += TICK_SECONDS
        time.sleep(max(0.0, tick - time.monotonic()))


def run(options: Namespace) -> dict[str, object]:
    harness.migrate()
    harness.empty_tables()
    harness.schedule_noop_jobs(options.backlog, 500)
    harness.settle_database()
    command = harness.runjobs_command("--queue", QUEUE, "--workers", str(options.workers))
    with harness.work_directory("django-jobs-backlog.") as logs:
        workers = [
            harness.start_process(command, logs / f"runjobs-{number}.log")
            for number in range(options.processes)
        ]
        try:
            start = time.monotonic()
            produce(options.rate, start + options.warmup)
            before = succeeded()
            counted = time.monotonic()
            produce(options.rate, counted + options.seconds)
            done = succeeded() - before
            seconds = time.monotonic() - counted
        finally:
            harness.stop_processes(workers, grace=10.0)
        for number, worker in enumerate(workers):
            if worker.returncode not in (0, -15):
                harness.print_log_tail(Path(logs) / f"runjobs-{number}.log")
                raise BenchError(f"runjobs exited with {worker.returncode}")
    return {
        "bench": "backlog",
        "version": harness.database_version(),
        "settings": harness.durability(),
        **harness.software(),
        "backlog": options.backlog,
        "rate": options.rate,
        "processes": options.processes,
        "workers": options.workers,
        "seconds": round(seconds, 2),
        "succeeded": done,
        "jobs_per_second": round(done / seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    url = os.environ.get("DATABASE_URL", "")
    if not url or url.startswith("sqlite"):
        return harness.failed(BenchError("set DATABASE_URL to a PostgreSQL or MariaDB database"))
    harness.configure_environment(url, PYTHONUNBUFFERED="1")
    harness.setup_django()
    try:
        result = run(options)
    except BenchError as exc:
        return harness.failed(exc)
    print(
        f"{result['version']}: {options.backlog:,} queued, {options.rate:,.0f} jobs/s enqueued,"
        f" {options.processes} runjobs x {options.workers} threads:"
        f" {result['jobs_per_second']:,.0f} jobs/s drained over {result['seconds']} s"
    )
    if options.json:
        Path(options.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
