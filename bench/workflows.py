#!/usr/bin/env python
"""Workflows benchmark: a batch's fan-out and a chain, each beside as many plain jobs.

    DATABASE_URL=postgres://... python bench/workflows.py         # 10,000 and 1,000, 3 rounds
    python bench/workflows.py --database sqlite-wal --rounds 1    # a temporary SQLite file
    DATABASE_URL=mysql://... python bench/workflows.py --database mariadb
    DATABASE_URL=postgres://... python bench/workflows.py --only chain --chain 200

Four shapes, each drained by ``--processes`` ``manage.py runjobs --queue default
--workers --threads`` processes started for it (idle, woken by LISTEN on PostgreSQL and
polling every ``--poll`` seconds), after one warm-up job has run:

- plain: ``--jobs`` ``demo.noop`` jobs, ``schedule_jobs()`` in calls of ``--batch``;
- fan-out: as many, in one ``with batch(on_finish=("demo.noop", ...))`` block;
- plain (chain's count): ``--chain`` ``demo.noop`` jobs;
- chain: ``chain()`` of ``--chain`` ``demo.noop`` steps, each waiting for the one before.

Each shape is enqueued in one transaction (on PostgreSQL the jobs table is analyzed in
it, so that the workers' plans see the rows they drain rather than an empty table), and
timed from its commit (the host's clock) to the last end it waits for, read from the
rows: the last job's ``finished_at`` (plain, chain), the ``on_finish`` callback's
(fan-out). For the chain, the gap between steps is the ``started_at`` of step n+1's
attempt less step n's ``finished_at`` (the worker's clock, which follows the database's).
Every table of django_jobs is emptied before each shape. Shapes alternate (plain first in
odd rounds, the workflow first in even ones), and the report gives each round and the
median. ``--database postgresql`` (the default) and
``mariadb`` use the server ``DATABASE_URL`` names: never point it at a database whose jobs
you want to keep. ``--database sqlite-wal`` uses a new temporary SQLite file in WAL mode.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import harness
from harness import JOB_NAME, QUEUE, BenchError

#: How often the bench reads whether a shape is done, and how often it looks for a failure.
DB_POLL_SECONDS = 0.1
FAILURE_CHECK_SECONDS = 2.0
STOP_GRACE_SECONDS = 15.0
COLUMNS = [("shape", 24), ("jobs", 7), ("median s", 10), ("jobs/s", 9), ("  rounds (s)", 14)]


@dataclass(frozen=True)
class Options:
    database: str
    jobs: int
    chain: int
    rounds: int
    processes: int
    threads: int
    poll: float
    batch: int
    timeout: float
    only: str | None


@dataclass(frozen=True)
class Shape:
    """What is enqueued (``kind``: plain, fan-out or chain), and how many: ``--jobs`` or
    ``--chain`` (``count``)."""

    label: str
    kind: str
    count: str


#: Each workflow beside as many plain jobs, by the name ``--only`` gives it.
PAIRS = {
    "fan-out": (Shape("plain", "plain", "jobs"), Shape("fan-out", "fan-out", "jobs")),
    "chain": (
        Shape("plain (chain's count)", "plain", "chain"),
        Shape("chain", "chain", "chain"),
    ),
}


@dataclass
class Result:
    """One shape's runs: seconds each, and for the chain the gaps between steps."""

    shape: str
    jobs: int
    seconds: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Enqueued:
    """What a shape enqueued: its job ids, and how to know it is done and when it ended."""

    ids: range
    done: Callable[[], bool]
    ended: Callable[[], datetime]


# -- set-up ---------------------------------------------------------------------------


def parse_options(argv: list[str] | None = None) -> Options:
    parser = harness.option_parser(__doc__)
    harness.add_database_option(parser, choices=(*harness.DATABASES, harness.MARIADB))
    parser.add_argument("--jobs", type=int, default=10_000, help="the fan-out's members")
    parser.add_argument("--chain", type=int, default=1_000, help="the chain's steps")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=1, help="runjobs processes")
    parser.add_argument("--threads", type=int, default=2, help="runjobs --workers")
    parser.add_argument(
        "--poll", type=float, help="POLL_SECONDS (default: 1 on PostgreSQL, 0.05 elsewhere)"
    )
    harness.add_batch_option(parser)
    parser.add_argument("--timeout", type=float, default=900.0, help="per shape (seconds)")
    parser.add_argument("--only", choices=list(PAIRS), help="one pair of shapes")
    args = parser.parse_args(argv)
    harness.require_at_least_one(parser, args, "jobs", "chain", "rounds", "processes", "threads")
    if args.poll is None:
        args.poll = 1.0 if args.database == "postgresql" else 0.05
    return Options(**vars(args))


def database_url(options: Options, work_dir: Path) -> str:
    if options.database == "sqlite-wal":
        return harness.sqlite_url(work_dir / "bench.sqlite3")
    if options.database == harness.MARIADB:
        return harness.mariadb_url("bench/workflows.py")
    return harness.postgresql_url("bench/workflows.py")


def describe_database() -> str:
    from django.db import connection

    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            return harness.describe_sqlite(cursor)
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            return f"{connection.display_name} {cursor.fetchone()[0]}"
    settings = harness.format_settings(harness.durability())
    return f"{harness.database_version()} ({settings})"


# -- enqueueing -----------------------------------------------------------------------


def enqueue(shape: str, count: int, batch: int) -> Enqueued:
    """The shape's jobs, in one transaction."""
    from django.db import transaction

    from django_jobs import batch as open_batch
    from django_jobs import chain
    from django_jobs.scheduling import JobSpec, schedule_jobs

    specs = [JobSpec(JOB_NAME, {"n": n}) for n in range(count)]
    if shape == "chain":
        with transaction.atomic():
            rows = chain(*specs)
            analyze()
        return Enqueued(ids_of(rows), *last_job(rows[-1].pk))
    if shape == "fan-out":
        with open_batch(on_finish=(JOB_NAME, {"on_finish": True})) as made:
            rows = [row for some in pieces(specs, batch) for row in schedule_jobs(some)]
            analyze()
        return Enqueued(ids_of(rows), *callback_of(made.pk))
    with transaction.atomic():
        rows = [row for some in pieces(specs, batch) for row in schedule_jobs(some)]
        analyze()
    return Enqueued(ids_of(rows), *last_of(ids_of(rows)))


def analyze() -> None:
    """Statistics of the jobs just written, before they commit (PostgreSQL counts its own
    transaction's rows): the workers' plans see the rows they drain, as after a settle."""
    from django.db import connection

    from django_jobs.models import Job

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {connection.ops.quote_name(Job._meta.db_table)}")


def pieces(specs: list, size: int) -> list[list]:
    return [specs[first : first + size] for first in range(0, len(specs), size)]


def ids_of(rows: list) -> range:
    ids = range(rows[0].pk, rows[-1].pk + 1)
    if len(ids) != len(rows):
        raise BenchError(f"the {len(rows)} jobs' ids are not consecutive")
    return ids


def last_job(job_id: int) -> tuple[Callable[[], bool], Callable[[], datetime]]:
    """Done once job ``job_id`` has succeeded; it ended at its ``finished_at``."""
    from django_jobs.models import Job, JobStatus

    row = Job.objects.filter(pk=job_id)
    return (
        lambda: row.filter(status=JobStatus.SUCCEEDED).exists(),
        lambda: row.values_list("finished_at", flat=True).get(),
    )


def callback_of(batch_id: int) -> tuple[Callable[[], bool], Callable[[], datetime]]:
    """Done once batch ``batch_id``'s ``on_finish`` callback (enqueued by the member that
    ends the batch) has succeeded; it ended at the callback's ``finished_at``."""
    from django_jobs.models import Batch

    def callback() -> tuple[Callable[[], bool], Callable[[], datetime]] | None:
        row = Batch.objects.get(pk=batch_id)
        return last_job(row.callback_jobs["on_finish"]) if row.finished_at else None

    return (
        lambda: (found := callback()) is not None and found[0](),
        lambda: callback()[1](),  # type: ignore[index]
    )


def last_of(ids: range) -> tuple[Callable[[], bool], Callable[[], datetime]]:
    """Done once every job ``ids`` has succeeded; they ended at the last ``finished_at``."""
    from django.db.models import Max

    from django_jobs.models import Job, JobStatus

    rows = Job.objects.filter(id__gte=ids.start, id__lt=ids.stop)
    return (
        lambda: rows.filter(status=JobStatus.SUCCEEDED).count() == len(ids),
        lambda: rows.aggregate(last=Max("finished_at"))["last"],
    )


def check_no_failure() -> None:
    from django_jobs.models import JobStatus

    counts = harness.status_counts()
    if counts.get(JobStatus.DEAD_LETTERED) or counts.get(JobStatus.CANCELLED):
        raise BenchError(f"jobs did not all succeed: {counts}")


# -- the workers ----------------------------------------------------------------------


def start_workers(options: Options, log_dir: Path) -> list[subprocess.Popen[bytes]]:
    command = harness.runjobs_command("--queue", QUEUE, "--workers", str(options.threads))
    return [
        harness.start_process(command, log_dir / f"runjobs-{number}.log")
        for number in range(options.processes)
    ]


def wait_for(done: Callable[[], bool], workers: list, deadline: float) -> None:
    checked = time.monotonic()
    while not done():
        if time.monotonic() - checked > FAILURE_CHECK_SECONDS:
            check_no_failure()
            checked = time.monotonic()
        if any(process.poll() is not None for process in workers):
            raise BenchError("a runjobs process exited")
        if time.monotonic() > deadline:
            raise BenchError("timed out waiting for the workers")
        time.sleep(DB_POLL_SECONDS)


def warm_up(workers: list, deadline: float) -> None:
    """One job through the idle workers: they are up, and listening where they can."""
    from django_jobs import schedule_job

    warm = schedule_job(JOB_NAME, {"warm_up": True})
    wait_for(last_job(warm.pk)[0], workers, deadline)


# -- one shape ------------------------------------------------------------------------


def run_shape(shape: str, count: int, options: Options, log_dir: Path) -> tuple[float, list]:
    """Drain one shape with fresh workers; its seconds, and the chain's gaps."""
    from django.utils import timezone

    harness.empty_tables()
    harness.settle_database()
    deadline = time.monotonic() + options.timeout
    workers = start_workers(options, log_dir)
    try:
        warm_up(workers, deadline)
        enqueued = enqueue(shape, count, options.batch)
        committed = timezone.now()
        wait_for(enqueued.done, workers, deadline)
    except Exception:
        for path in sorted(log_dir.glob("runjobs-*.log")):
            harness.print_log_tail(path)
        raise
    finally:
        harness.stop_processes(workers, STOP_GRACE_SECONDS)
    seconds = (enqueued.ended() - committed).total_seconds()
    return seconds, step_gaps(enqueued.ids) if shape == "chain" else []


def step_gaps(ids: range) -> list[float]:
    """Seconds from each step's end to the start of the next one's attempt."""
    from django_jobs.models import Attempt, Job

    ended = dict(Job.objects.filter(id__in=ids).values_list("id", "finished_at"))
    started = dict(Attempt.objects.filter(job_id__in=ids).values_list("job_id", "started_at"))
    return [(started[step + 1] - ended[step]).total_seconds() for step in ids[:-1]]


# -- the report -----------------------------------------------------------------------


def rows(results: list[Result]) -> list[list[str]]:
    table = []
    for result in results:
        median = statistics.median(result.seconds)
        rounds = "  " + ", ".join(f"{seconds:.2f}" for seconds in result.seconds)
        rate = f"{result.jobs / median:,.0f}"
        table.append([result.shape, f"{result.jobs:,}", f"{median:.2f}", rate, rounds])
    return table


def gap_line(gaps: list[float]) -> str:
    ms = sorted(gap * 1000 for gap in gaps)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return (
        f"chain: step n+1's start less step n's end, {len(ms):,} gaps: median"
        f" {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms, max {ms[-1]:.1f} ms"
    )


def report(options: Options, results: dict[str, Result]) -> None:
    print(f"database: {describe_database()}; {harness.software_line(harness.software())}")
    print(
        f"{options.processes} runjobs x {options.threads} threads, POLL_SECONDS={options.poll};"
        f" {options.rounds} rounds, alternating; from the enqueue's commit to the last end"
    )
    print(harness.format_table(COLUMNS, rows(list(results.values())), "<>>><"))
    for plain, workflow in ((a.label, b.label) for a, b in PAIRS.values()):
        if plain in results and workflow in results:
            ratio = statistics.median(results[workflow].seconds) / statistics.median(
                results[plain].seconds
            )
            print(f"{workflow} / {plain}: {ratio:.2f} x the time")
    if "chain" in results:
        print(gap_line(results["chain"].gaps))


# -- main -----------------------------------------------------------------------------


def measure(options: Options, log_dir: Path) -> dict[str, Result]:
    pairs = [PAIRS[options.only]] if options.only else list(PAIRS.values())
    results: dict[str, Result] = {}
    for round_number in range(options.rounds):
        for pair in pairs:
            for shape in pair if round_number % 2 == 0 else reversed(pair):
                count = getattr(options, shape.count)
                result = results.setdefault(shape.label, Result(shape.label, count))
                harness.heading(f"round {round_number + 1}: {shape.label}, {count:,} jobs")
                seconds, gaps = run_shape(shape.kind, count, options, log_dir)
                harness.log(f"{shape.label}: {seconds:.2f} s")
                result.seconds.append(seconds)
                result.gaps += gaps
    return results


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    harness.raise_on_sigterm()
    with harness.work_directory() as work_dir:
        try:
            harness.configure_environment(
                database_url(options, work_dir),
                JOBS_POLL_SECONDS=str(options.poll),
                PYTHONUNBUFFERED="1",
            )
            harness.setup_django()
            harness.migrate()
            if options.database == "sqlite-wal":
                harness.use_wal_journal()
            results = measure(options, work_dir)
        except BenchError as exc:
            return harness.failed(exc)
    report(options, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
