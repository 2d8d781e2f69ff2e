#!/usr/bin/env python
"""Enqueue benchmark: ``schedule_job()`` (plain, keyed, unique), ``task.enqueue()``, raw INSERT.

    python bench/enqueue.py                              # a fresh temporary SQLite file
    DATABASE_URL=postgres://... python bench/enqueue.py  # migrate, then empty the jobs tables
    python bench/enqueue.py --jobs 2000 --rounds 5

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
from raw_statements import Sender, Statement, recording

COLUMNS = [("way", 40), ("us/call", 10), ("calls/s", 10), ("ratio", 8), ("CPU us/call", 13)]


@dataclass(frozen=True)
class Options:
    jobs: int
    rounds: int


def parse_options(argv: list[str] | None = None) -> Options:
    parser = harness.option_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=2000, help="calls per round, per way")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each way, alternating")
    args = parser.parse_args(argv)
    harness.require_at_least_one(parser, args, "jobs", "rounds")
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


Times = dict[str, list[tuple[float, float]]]


def measure(options: Options, atomic: bool) -> Times:
    """(wall, CPU) seconds per call of each way, one pair per round; the ways alternate."""
    from django.db import transaction

    from django_jobs.models import Job

    all_ways = {**WAYS, RAW: partial(raw_insert_calls, record_schedule_job(atomic))}
    times: Times = {label: [] for label in all_ways}
    for way in all_ways.values():
        way(10)  # warm up: imports, prepared statements
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
    base = statistics.median(wall for wall, _ in times["schedule_job()"])
    rows = [table_row(label, figures, base) for label, figures in times.items()]
    lines = [title, *harness.format_table(COLUMNS, rows).splitlines()]
    if times.get(RAW):
        raw = statistics.median(wall for wall, _ in times[RAW])
        lines.append(f"schedule_job(): {base / raw:.2f}x the raw INSERT's time per call")
    return lines


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    rounds = f"{options.rounds} rounds x {options.jobs:,} calls each, alternating; median per call"
    with harness.work_directory() as work_dir:
        setup_django(harness.temporary_sqlite_url(os.environ.get("DATABASE_URL", ""), work_dir))
        print(describe())
        for atomic, how in ((False, "each call its own transaction"), (True, "one transaction")):
            print(*table(measure(options, atomic), f"{how}: {rounds}"), sep="\n")
        from django.db import connections

        connections.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
