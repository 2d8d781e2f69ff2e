#!/usr/bin/env python
"""Enqueue benchmark: ``schedule_job()`` (plain, keyed, unique), ``task.enqueue()``, raw INSERT.

    python bench/enqueue.py                              # a fresh temporary SQLite file
    DATABASE_URL=postgres://... python bench/enqueue.py  # migrate, then empty the jobs tables
    python bench/enqueue.py --jobs 2000 --rounds 5
    DATABASE_URL=postgres://... python bench/enqueue.py --batch 500 --jobs 20000

Each way enqueues one no-op job per call, in the same process, against the same
database: ``schedule_job("demo.noop", {"n": n})``; a job with a concurrency limit,
``schedule_job("example.keyed", {"n": n}, concurrency_key=...)``; a unique job,
``schedule_job("demo.noop", {"n": n}, unique_key=...)`` with a new key each call (so
each inserts); and ``example.tasks.noop.enqueue(n)``;
first each call its own transaction (autocommit: the commit, and on a durable
database its flush to disk, is most of the cost), then all the calls of a round in
one ``transaction.atomic()`` (what is left is the Python work and the INSERT). The
ways alternate in rounds of ``--jobs`` calls, in one order and then in the reverse,
so that a drift of the machine or of the database, or what one round leaves to
the next, touches them alike; the jobs tables are emptied before each round.
It prints each way's median time per call over the rounds (wall clock), its calls
per second, its ratio to ``schedule_job()``, and the median CPU time this process
spent per call (``time.process_time()``: on SQLite the database's work is in it,
on PostgreSQL the server's is not), which a busy machine disturbs less.

With ``--batch B`` it measures the bulk way instead: ``schedule_jobs()`` of ``B`` jobs
a call, each call its own transaction, beside the same limit for it: what one such
call sends (on PostgreSQL the ids' statement, the ``COPY`` of the same rows written
with psycopg's ``write_row``, and the NOTIFY), sent again past Django.

The last way is the limit: what one ``schedule_job()`` sends (on PostgreSQL
one statement, the INSERT with its NOTIFY), recorded once in each mode and
sent again as recorded, on the same connection but past Django (psycopg's own
cursor, prepared, as the driver's; sqlite3's connection), with its commit as
Django sends it: the database's work and the round trip, and no more.

Like ``bench/drain.py``, a non-SQLite database is migrated and its Job and
Attempt rows are deleted: do not point it at a database whose jobs you want to keep.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial

import harness
from raw_statements import Sender, Statement, record_schedule_jobs, recording

COLUMNS = [("way", 40), ("us/call", 10), ("calls/s", 10), ("ratio", 8), ("CPU us/call", 13)]
BULK_COLUMNS = [("way", 40), ("us/job", 10), ("jobs/s", 10), ("ratio", 8), ("CPU us/job", 13)]


@dataclass(frozen=True)
class Options:
    jobs: int
    rounds: int
    batch: int = 0


def parse_options(argv: list[str] | None = None) -> Options:
    parser = harness.option_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=2000, help="calls per round, per way")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each way, alternating")
    parser.add_argument(
        "--batch", type=int, default=0, help="the bulk way instead, in calls of so many jobs"
    )
    args = parser.parse_args(argv)
    harness.require_at_least_one(parser, args, "jobs", "rounds")
    if args.batch < 0 or (args.batch and args.jobs % args.batch):
        parser.error("--batch must divide --jobs")
    return Options(**vars(args))


def setup_django(url: str) -> None:
    harness.configure_environment(url)
    harness.setup_django()
    harness.migrate()


def schedule_job_calls(count: int) -> None:
    from django_jobs import schedule_job

    for number in range(count):
        schedule_job(harness.JOB_NAME, {"n": number})


def keyed_calls(count: int) -> None:
    """A job with a concurrency limit, a key of ten per call (``example.keyed``)."""
    from django_jobs import schedule_job

    for number in range(count):
        schedule_job(KEYED, {"n": number}, concurrency_key=f"k{number % 10}")


def unique_calls(count: int) -> None:
    """A job with a unique key, a new one each call: each call inserts."""
    from django_jobs import schedule_job

    for number in range(count):
        schedule_job(harness.JOB_NAME, {"n": number}, unique_key=f"u{number}")


def task_enqueue_calls(count: int) -> None:
    from testproject.example.tasks import noop

    for number in range(count):
        noop.enqueue(number)


def raw_insert_calls(statements: list[Statement], count: int) -> None:
    """``statements`` (what a schedule_job() sent) sent again ``count`` times, past Django."""
    from django.db import connection

    connection.ensure_connection()
    sender = Sender(connection.connection, connection.vendor)
    try:
        for _ in range(count):
            sender.send(statements)
    finally:
        sender.close()


def schedule_jobs_calls(batch: int, count: int) -> None:
    from django_jobs.scheduling import JobSpec, schedule_jobs

    for start in range(0, count, batch):
        schedule_jobs([JobSpec(harness.JOB_NAME, {"n": n}) for n in range(start, start + batch)])


def raw_bulk_calls(statements: list[Statement], batch: int, count: int) -> None:
    """``statements`` (what a schedule_jobs() of ``batch`` sent) sent again, past Django,
    once for each ``batch`` of ``count``."""
    raw_insert_calls(statements, count // batch)


def record_schedule_job(atomic: bool) -> list[Statement]:
    """What one schedule_job() sends, in a transaction of its caller's or in autocommit."""
    from django.db import transaction

    from django_jobs import schedule_job

    with transaction.atomic() if atomic else nullcontext(), recording() as statements:
        schedule_job(harness.JOB_NAME, {"n": 0})
    return statements


KEYED = "example.keyed"
WAYS: dict[str, Callable[[int], None]] = {
    "schedule_job()": schedule_job_calls,
    "schedule_job(concurrency_key=)": keyed_calls,
    "schedule_job(unique_key=)": unique_calls,
    "task.enqueue() (JobsBackend)": task_enqueue_calls,
}
RAW = "raw INSERT (what schedule_job() sends)"
BULK = "schedule_jobs()"
RAW_BULK = "raw (what schedule_jobs() sends)"


Times = dict[str, list[tuple[float, float]]]


def measure(options: Options, atomic: bool) -> Times:
    """(wall, CPU) seconds per call of each way, one pair per round; the ways alternate."""
    from django.db import transaction

    from django_jobs.models import Job

    if options.batch:
        bulk = options.batch
        all_ways = {
            BULK: partial(schedule_jobs_calls, bulk),
            RAW_BULK: partial(raw_bulk_calls, record_schedule_jobs(harness.JOB_NAME, bulk), bulk),
        }
    else:
        all_ways = {**WAYS, RAW: partial(raw_insert_calls, record_schedule_job(atomic))}
        bulk = 10
    times: Times = {label: [] for label in all_ways}
    for way in all_ways.values():
        way(bulk)  # warm up: imports, prepared statements
    for number in range(options.rounds):
        ways = list(all_ways.items())
        for label, way in ways if number % 2 == 0 else reversed(ways):  # each goes first alike
            harness.delete_jobs()
            start, cpu = time.perf_counter(), time.process_time()
            with transaction.atomic() if atomic else nullcontext():
                way(options.jobs)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            times[label].append((wall / options.jobs, cpu / options.jobs))
            if Job.objects.count() != options.jobs:
                raise RuntimeError(f"{label}: expected {options.jobs} jobs")
    harness.delete_jobs()
    return times


def describe() -> str:
    from django_jobs.tasks.framework import ROOT as FRAMEWORK

    software = harness.software()
    return (
        f"database: {harness.database_version()}\n"
        f"python {software['python']}, django {software['django']} ({FRAMEWORK}),"
        f" {software['cpus']} cpus"
    )


def table_row(label: str, figures: list[tuple[float, float]], base: float) -> list[str]:
    """A way's median wall and CPU time per call, its calls per second, its ratio to ``base``."""
    wall = statistics.median(figure[0] for figure in figures)
    cpu = statistics.median(figure[1] for figure in figures)
    return [
        label,
        f"{wall * 1e6:.0f}",
        f"{1 / wall:,.0f}",
        f"{wall / base:.2f}",
        f"{cpu * 1e6:.0f}",
    ]


def table(times: Times, title: str) -> list[str]:
    way, raw_way = (BULK, RAW_BULK) if BULK in times else ("schedule_job()", RAW)
    base = statistics.median(wall for wall, _ in times[way])
    rows = [table_row(label, figures, base) for label, figures in times.items()]
    columns = BULK_COLUMNS if way == BULK else COLUMNS
    lines = [title, *harness.format_table(columns, rows).splitlines()]
    if times.get(raw_way):
        raw = statistics.median(wall for wall, _ in times[raw_way])
        if way == BULK:
            lines.append(f"{way}: {raw / base:.2f} of the raw rate")
        else:
            lines.append(f"{way}: {base / raw:.2f}x the raw INSERT's time per call")
    return lines


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    rounds = f"{options.rounds} rounds x {options.jobs:,} calls each, alternating; median per call"
    with harness.work_directory() as work_dir:
        setup_django(harness.temporary_sqlite_url(os.environ.get("DATABASE_URL", ""), work_dir))
        print(describe())
        if options.batch:
            rounds = f"{options.rounds} rounds x {options.jobs:,} jobs in calls of {options.batch}"
            print(
                *table(measure(options, False), f"{rounds}, alternating; median per job"), sep="\n"
            )
        else:
            for atomic, how in (
                (False, "each call its own transaction"),
                (True, "one transaction"),
            ):
                print(*table(measure(options, atomic), f"{how}: {rounds}"), sep="\n")
        from django.db import connections

        connections.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
