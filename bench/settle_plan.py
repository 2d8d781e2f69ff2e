#!/usr/bin/env python
"""The settle's plan beside many running jobs: what one settle reads of the jobs table.

    DATABASE_URL=postgres://... python bench/settle_plan.py
    DATABASE_URL=postgres://... python bench/settle_plan.py --running 2000 5000 --batch 16

For each count of ``--running`` and each state of the statistics (stale: those of a
table of 5,000 finished jobs and none running, as autovacuum's last ANALYZE may have
left them; then fresh: analyzed once filled), empties the jobs tables (``TRUNCATE``: a
small, freshly filled table, where the planner's choice matters most), inserts that
many jobs running for another worker and ``--batch`` running for this one, and explains
the settle statement the driver sends for this one's batch (``EXPLAIN (ANALYZE,
BUFFERS)``, rolled back), ``--repeat`` times. It prints how the jobs table was read (the
index, or a scan), the rows read there, the buffers and the median execution time.
PostgreSQL only: SQLite's and MariaDB's planners count a settle's bound rows right
(tests/integration/test_drivers.py).
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import harness
from harness import BenchError

JOB_TABLE = "django_jobs_job"
OWNER = "bench-settle"
#: The finished jobs whose statistics a stale measure plans with.
FINISHED = 5000
COLUMNS = [
    ("running", 10),
    ("statistics", 12),
    ("jobs table read by", 36),
    ("rows read", 10),
    ("buffers", 8),
    ("ms (median)", 12),
]


@dataclass(frozen=True)
class Options:
    running: list[int]
    batch: int
    repeat: int
    json: Path | None = None


@dataclass(frozen=True)
class Access:
    """How a plan read the jobs table: the scans' names and the rows they returned."""

    read_by: str
    rows: int


@dataclass(frozen=True)
class Result:
    running: int
    statistics: str
    read_by: str
    rows: int
    buffers: int
    milliseconds: float


def parse_options(argv: list[str] | None = None) -> Options:
    parser = harness.option_parser(__doc__)
    parser.add_argument(
        "--running",
        type=int,
        nargs="+",
        default=[2000, 5000, 50000],
        help="jobs running for another worker (several: one measure each)",
    )
    parser.add_argument("--batch", type=int, default=16, help="settlements in the statement")
    parser.add_argument("--repeat", type=int, default=5, help="explains per measure")
    harness.add_json_option(parser)
    args = parser.parse_args(argv)
    for name in ("batch", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if min(args.running) < 0:
        parser.error("--running must not be negative")
    return Options(running=args.running, batch=args.batch, repeat=args.repeat, json=args.json)


def access(plan: dict[str, Any], table: str = JOB_TABLE) -> Access:
    """How the plan (one node of ``EXPLAIN (FORMAT JSON)``, with its children) read
    ``table``: each scan's node type and index, and the rows the scans read over all their
    loops (those they returned and those their filter removed). The UPDATE's own node,
    which writes the rows, is not a read."""
    scans: list[str] = []
    rows = 0

    def visit(node: dict[str, Any]) -> None:
        nonlocal rows
        if node.get("Relation Name") == table and "Scan" in node["Node Type"]:
            index = node.get("Index Name")
            scans.append(f"{node['Node Type']} {index}" if index else node["Node Type"])
            returned = int(node.get("Actual Rows", 0)) + int(node.get("Rows Removed by Filter", 0))
            rows += returned * int(node.get("Actual Loops", 1))
        for child in node.get("Plans", []):
            visit(child)

    visit(plan)
    return Access(", ".join(sorted(set(scans))) or "-", rows)


def job_rows(count: int, **fields: Any) -> list[Any]:
    """``count`` unsaved no-op jobs of the bench's queue, due now, with ``fields``."""
    from django.utils import timezone

    from django_jobs.models import Job

    now = timezone.now()
    common = {"name": harness.JOB_NAME, "queue": harness.QUEUE, "payload": {}}
    return [Job(**common, run_at=now, created_at=now, **fields) for _ in range(count)]


def fill(running: int, batch: int) -> list[Any]:
    """The jobs table emptied, then ``running`` jobs of another worker's and ``batch`` of
    this one's (with their open attempts); this one's settlements."""
    from django.db import connection
    from django.utils import timezone

    from django_jobs.db.records import Settlement
    from django_jobs.models import Attempt, AttemptOutcome, Job, JobStatus

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {JOB_TABLE} CASCADE")
    now = timezone.now()

    def rows(count: int, owner: str) -> list[Job]:
        return job_rows(
            count,
            status=JobStatus.RUNNING,
            started_at=now,
            lease_owner=owner,
            lease_expires_at=now + timedelta(hours=1),
            attempt=1,
            attempts_used=1,
            max_attempts=3,
        )

    Job.objects.bulk_create(rows(running, "another"), batch_size=5000)
    mine = Job.objects.bulk_create(rows(batch, OWNER))
    Attempt.objects.bulk_create(Attempt(job=j, number=1, owner=OWNER, started_at=now) for j in mine)
    return [
        Settlement(
            job_id=job.pk,
            owner=OWNER,
            attempt=1,
            outcome=AttemptOutcome.SUCCEEDED,
            status=JobStatus.SUCCEEDED,
            ended_at=now,
            finished_at=now,
        )
        for job in mine
    ]


def explain(sql: str, params: list[Any]) -> dict[str, Any]:
    """The settle's plan as it ran, its writes rolled back."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        (document,) = cursor.fetchone()
        transaction.set_rollback(True)
    [plan] = json.loads(document) if isinstance(document, str) else document
    return dict(plan)


def analyze() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {JOB_TABLE}")


def finished_statistics(count: int) -> None:
    """The statistics of a table of ``count`` finished jobs and none running, as
    autovacuum's ANALYZE takes them between bursts; the rows are then gone (``fill()``
    truncates), their statistics stay until the next ANALYZE."""
    from django.utils import timezone

    from django_jobs.models import Job, JobStatus

    rows = job_rows(count, status=JobStatus.SUCCEEDED, finished_at=timezone.now())
    Job.objects.bulk_create(rows, batch_size=5000)
    analyze()


def measure(running: int, state: str, options: Options) -> Result:
    from django_jobs.db import get_driver
    from django_jobs.db.postgresql import PostgresDriver

    if state == "stale":
        finished_statistics(FINISHED)
    settlements = fill(running, options.batch)
    if state == "fresh":
        analyze()
    driver = get_driver()
    if not isinstance(driver, PostgresDriver):
        raise BenchError("the settle's plan is PostgreSQL's")
    sql, params = driver.settle_statement(settlements)
    plans = [explain(sql, params) for _ in range(options.repeat)]
    last = plans[-1]
    read = access(last["Plan"])
    return Result(
        running=running,
        statistics=state,
        read_by=read.read_by,
        rows=read.rows,
        buffers=int(last["Plan"].get("Shared Hit Blocks", 0))
        + int(last["Plan"].get("Shared Read Blocks", 0)),
        milliseconds=statistics.median(plan["Execution Time"] for plan in plans),
    )


def table(results: list[Result]) -> str:
    return harness.format_table(
        COLUMNS,
        (
            [
                f"{r.running:,}",
                r.statistics,
                r.read_by,
                f"{r.rows:,}",
                f"{r.buffers:,}",
                f"{r.milliseconds:.2f}",
            ]
            for r in results
        ),
        align="<<<>>>",
    )


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    try:
        url = harness.postgresql_url("scripts/pgserver.py start DIR")
        harness.configure_environment(url)
        harness.setup_django()
        harness.migrate()
        results = []
        for running in options.running:
            for state in ("stale", "fresh"):
                harness.log(f"{running:,} running, statistics {state}")
                results.append(measure(running, state, options))
        harness.empty_tables()
    except BenchError as exc:
        return harness.failed(exc)
    print(f"\nsettle of {options.batch} outcomes, {options.repeat} explains each")
    print(table(results))
    if options.json:
        harness.write_json(options.json, {"settles": [asdict(r) for r in results]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
