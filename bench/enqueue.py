#!/usr/bin/env python
"""Enqueue benchmark: ``schedule_job()`` against ``task.enqueue()`` through JobsBackend.

    python bench/enqueue.py                              # a fresh temporary SQLite file
    DATABASE_URL=postgres://... python bench/enqueue.py  # migrate, then empty the jobs tables
    python bench/enqueue.py --jobs 2000 --rounds 5

Both enqueue one no-op job per call, in the same process, against the same
database: ``schedule_job("demo.noop", {"n": n})`` and ``example.tasks.noop.enqueue(n)``;
first each call its own transaction (autocommit: the commit, and on a durable
database its flush to disk, is most of the cost), then all the calls of a round in
one ``transaction.atomic()`` (what is left is the Python work and the INSERT). The
two ways alternate in rounds of ``--jobs`` calls, each going first in every other
round, so that a drift of the machine or of the database, or what one round leaves
to the next, touches both alike; the jobs tables are emptied before each round.
It prints each way's median time per call over the rounds (wall clock), its calls
per second, its ratio to ``schedule_job()``, and the median CPU time this process
spent per call (``time.process_time()``: on SQLite the database's work is in it,
on PostgreSQL the server's is not), which a busy machine disturbs less.
Like ``bench/drain.py``, a non-SQLite database is migrated and its Job and
Attempt rows are deleted: do not point it at a database whose jobs you want to keep.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Options:
    jobs: int
    rounds: int


def parse_options(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="calls per round, per way")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each way, alternating")
    args = parser.parse_args(argv)
    if min(args.jobs, args.rounds) < 1:
        parser.error("--jobs and --rounds must be at least 1")
    return Options(**vars(args))


def database_url(given: str, work_dir: Path) -> str:
    """``given``, or a new SQLite file in ``work_dir`` (keeping a SQLite URL's options)."""
    parts = urlsplit(given)
    if given and not parts.scheme.startswith("sqlite"):
        return given
    query = f"?{parts.query}" if parts.query else ""
    return f"sqlite:///{work_dir / 'bench.sqlite3'}{query}"


def setup_django(url: str) -> None:
    os.environ.update(
        {"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "testproject.settings", "DEBUG": "false"}
    )
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def delete_jobs() -> None:
    from django.db import connection

    from django_jobs.models import Attempt, Job

    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for model in (Attempt, Job):
            cursor.execute(f"DELETE FROM {quote(model._meta.db_table)}")


def schedule_job_calls(count: int) -> None:
    from django_jobs import schedule_job

    for number in range(count):
        schedule_job("demo.noop", {"n": number})


def task_enqueue_calls(count: int) -> None:
    from testproject.example.tasks import noop

    for number in range(count):
        noop.enqueue(number)


WAYS: dict[str, Callable[[int], None]] = {
    "schedule_job()": schedule_job_calls,
    "task.enqueue() (JobsBackend)": task_enqueue_calls,
}


Times = dict[str, list[tuple[float, float]]]


def measure(options: Options, atomic: bool) -> Times:
    """(wall, CPU) seconds per call of each way, one pair per round; the ways alternate."""
    from django.db import transaction

    from django_jobs.models import Job

    times: Times = {label: [] for label in WAYS}
    for way in WAYS.values():
        way(10)  # warm up: imports, prepared statements
    for number in range(options.rounds):
        ways = list(WAYS.items())
        for label, way in ways if number % 2 == 0 else reversed(ways):  # each goes first alike
            delete_jobs()
            start, cpu = time.perf_counter(), time.process_time()
            with transaction.atomic() if atomic else nullcontext():
                way(options.jobs)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            times[label].append((wall / options.jobs, cpu / options.jobs))
            if Job.objects.count() != options.jobs:
                raise RuntimeError(f"{label}: expected {options.jobs} jobs")
    delete_jobs()
    return times


def pg_version(number: int) -> str:
    """PostgreSQL's version number (150018) as it writes it (15.18)."""
    return f"{number // 10000}.{number % 10000}"


def describe() -> str:
    import django
    from django.db import connection

    from django_jobs.tasks.framework import ROOT as FRAMEWORK

    return (
        f"database: {connection.display_name} {connection.Database.sqlite_version}"
        if connection.vendor == "sqlite"
        else f"database: {connection.display_name} {pg_version(connection.pg_version)}"
    ) + (
        f"\npython {sys.version.split()[0]}, django {django.get_version()} ({FRAMEWORK}),"
        f" {os.cpu_count()} cpus"
    )


def table(times: Times, title: str) -> list[str]:
    base = statistics.median(wall for wall, _ in times["schedule_job()"])
    lines = [title, f"{'way':<32}{'us/call':>10}{'calls/s':>10}{'ratio':>8}{'CPU us/call':>13}"]
    for label, figures in times.items():
        wall = statistics.median(figure[0] for figure in figures)
        cpu = statistics.median(figure[1] for figure in figures)
        lines.append(
            f"{label:<32}{wall * 1e6:>10.0f}{1 / wall:>10,.0f}{wall / base:>8.2f}{cpu * 1e6:>13.0f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    rounds = f"{options.rounds} rounds x {options.jobs:,} calls each, alternating; median per call"
    with tempfile.TemporaryDirectory(prefix="django-jobs-bench.") as name:
        setup_django(database_url(os.environ.get("DATABASE_URL", ""), Path(name)))
        print(describe())
        for atomic, how in ((False, "each call its own transaction"), (True, "one transaction")):
            print(*table(measure(options, atomic), f"{how}: {rounds}"), sep="\n")
        from django.db import connections

        connections.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
