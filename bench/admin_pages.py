#!/usr/bin/env python
"""Admin benchmark: every admin page's time with 1,000,000 finished jobs on PostgreSQL.

    bash scripts/bench-admin                          # a temporary server, filled, timed
    python bench/admin_pages.py --dir .tmp/admin-pg   # keep the filled server in that folder
    python bench/admin_pages.py --reuse .tmp/admin-pg --json .tmp/admin.json

The benchmark starts a private PostgreSQL server with production durability
(``PGSERVER_DURABLE=1 python3 scripts/pgserver.py start DIR``), migrates it, then
fills it:

- the finished part, with a few set-based ``INSERT ... SELECT generate_series()``
  statements: ``--finished`` jobs (99% succeeded, 1% cancelled), each with one
  attempt row, finished over the last six days (inside the default retention), one in
  ten fired by a recurring schedule;
- the live part, with the ORM: jobs due, scheduled and retrying, running jobs held by
  ``Worker`` rows with fresh heartbeats, dead letters with their attempts, recurring
  schedules. The live part is deleted and made again on every run, so that its times
  are fresh.

It ANALYZEs and VACUUMs the tables, then times each page with Django's test client
logged in as a superuser: one warm-up request, then ``--requests`` requests, of
which it reports the median and the slowest, the number of queries of a request
and the slowest query's time (its median over the requests). A page whose median
passes half a second is flagged; ``--explain-ms`` prints the plan (``EXPLAIN
(ANALYZE, BUFFERS)``) of every page's slowest query above that time.

With ``--dir DIR`` the server's data stays in DIR; a later run with ``--dir DIR``
or ``--reuse DIR`` finds the finished part there and fills only the live part (a
run of a few minutes rather than the fill's several). ``--reuse`` refuses a DIR
whose finished part is missing. Without either, a temporary folder is used and
deleted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import admin_data
import admin_timing
import harness
from admin_data import Fill
from admin_timing import SLOW_MS, Page, Timing
from harness import ROOT, BenchError, log

DASHBOARD = "admin:django_jobs_dashboard"
DEEP_PAGE = 100  # the last page the job list offers: it counts at most 10,000 rows


@dataclass(frozen=True)
class Options:
    fill: Fill
    requests: int
    directory: Path | None
    reuse: bool
    json: Path | None
    explain_ms: float | None
    only: str | None


# -- options --------------------------------------------------------------------------


def parse_options(argv: list[str] | None = None) -> Options:
    parser = harness.option_parser(__doc__)
    parser.add_argument("--finished", type=int, default=Fill.finished, help="finished jobs")
    parser.add_argument("--dead-letters", type=int, default=Fill.dead_letters)
    parser.add_argument("--due", type=int, default=Fill.due, help="pending jobs due now")
    parser.add_argument("--scheduled", type=int, default=Fill.scheduled)
    parser.add_argument("--retrying", type=int, default=Fill.retrying)
    parser.add_argument("--running", type=int, default=Fill.running)
    parser.add_argument("--workers", type=int, default=Fill.workers, help="Worker rows")
    parser.add_argument("--schedules", type=int, default=Fill.schedules, help="RecurringJob rows")
    parser.add_argument("--requests", type=int, default=5, help="timed requests per page")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--dir", type=Path, help="keep the server's data in DIR (fills if needed)")
    where.add_argument("--reuse", type=Path, metavar="DIR", help="a DIR filled by an earlier run")
    harness.add_json_option(parser)
    parser.add_argument(
        "--explain-ms",
        type=float,
        metavar="MS",
        help="print EXPLAIN (ANALYZE, BUFFERS) of each page's slowest query above MS",
    )
    parser.add_argument("--only", help="time only the pages whose label contains this text")
    args = parser.parse_args(argv)
    fill = Fill(
        finished=args.finished,
        due=args.due,
        scheduled=args.scheduled,
        retrying=args.retrying,
        running=args.running,
        workers=args.workers,
        dead_letters=args.dead_letters,
        schedules=args.schedules,
    )
    if min(asdict(fill).values()) < 0:
        parser.error("the row counts cannot be negative")
    if fill.running and not fill.workers:
        parser.error("running jobs need at least one worker (--workers)")
    harness.require_at_least_one(parser, args, "finished", "dead_letters", "schedules")
    harness.require_at_least_one(parser, args, "requests")
    return Options(
        fill,
        args.requests,
        args.reuse or args.dir,
        args.reuse is not None,
        args.json,
        args.explain_ms,
        args.only,
    )


# -- the server -----------------------------------------------------------------------


@contextmanager
def postgres_server(directory: Path | None) -> Iterator[str]:
    """A durable private server in ``directory`` (a temporary one if None); its URL.

    A server already running there is used as it is and left running; one
    started here is stopped on the way out (a temporary folder is deleted).
    """
    temporary = directory is None
    root = (
        Path(tempfile.mkdtemp(prefix="django-jobs-admin-pg.")) if directory is None else directory
    )
    root = root.resolve()
    script = [sys.executable, str(ROOT / "scripts" / "pgserver.py")]
    running = (root / "data" / "postmaster.pid").exists() and (root / "url").exists()
    try:
        if running:
            url = (root / "url").read_text().strip()
        else:
            env = {**os.environ, "PGSERVER_DURABLE": "1"}
            started = subprocess.run(
                [*script, "start", str(root)], env=env, check=True, capture_output=True, text=True
            )
            url = started.stdout.strip()
        yield url
    finally:
        if not running:
            subprocess.run([*script, "stop", str(root)], check=False)
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


# -- the pages ------------------------------------------------------------------------


def admin_pages(sample: dict[str, Any]) -> list[Page]:
    """The pages to time; ``sample`` names rows to open (job, dead_letter, schedule, name)."""
    from django.urls import NoReverseMatch, reverse

    from django_jobs.models import FINISHED_STATUSES, LIVE_STATUSES

    jobs = reverse("admin:django_jobs_job_changelist")
    pages = [
        Page("admin index", reverse("admin:index")),
        Page("app index", reverse("admin:app_list", args=["django_jobs"])),
        Page("jobs", jobs),
    ]
    for status in (*LIVE_STATUSES, *FINISHED_STATUSES):
        pages.append(Page(f"jobs, status={status.value}", f"{jobs}?status__exact={status.value}"))
    pages += [
        Page("jobs, queue=default", f"{jobs}?queue__exact=default"),
        Page(f"jobs, name={sample['name']}", f"{jobs}?name__exact={sample['name']}"),
        Page("jobs, search by id", f"{jobs}?q={sample['job']}"),
        Page(f"jobs, search {sample['name']}", f"{jobs}?q={sample['name']}"),
        Page("jobs, page 2", f"{jobs}?p=2"),
        Page(f"jobs, page {DEEP_PAGE:,}", f"{jobs}?p={DEEP_PAGE}"),
        Page("job page (1 attempt)", reverse("admin:django_jobs_job_change", args=[sample["job"]])),
        Page("dead letters", reverse("admin:django_jobs_deadletter_changelist")),
        Page(
            "dead letter page (3 attempts)",
            reverse("admin:django_jobs_deadletter_change", args=[sample["dead_letter"]]),
        ),
        Page("workers", reverse("admin:django_jobs_workerprocess_changelist")),
        Page("recurring", reverse("admin:django_jobs_recurringjob_changelist")),
        Page(
            "schedule page",
            reverse("admin:django_jobs_recurringjob_change", args=[sample["schedule"]]),
        ),
    ]
    try:
        pages.append(Page("dashboard", reverse(DASHBOARD)))
    except NoReverseMatch:
        pages.append(Page("dashboard", "", note=f"not timed: {DASHBOARD} does not resolve"))
    try:  # the Prometheus scrape: the database-wide gauges (the testproject mounts it)
        pages.append(Page("metrics scrape", reverse("metrics")))
    except NoReverseMatch:
        pages.append(Page("metrics scrape", "", note="not timed: no URL named 'metrics'"))
    return pages


def sample_rows(fill: Fill) -> dict[str, Any]:
    """A finished job from the middle of the table, a dead letter, a schedule, a name."""
    from django_jobs.models import Job, JobStatus, RecurringJob

    def ids(status: JobStatus) -> Any:
        return Job.objects.filter(status=status).order_by("id").values_list("id", flat=True)

    return {
        "job": ids(JobStatus.SUCCEEDED)[fill.finished // 2],
        "dead_letter": ids(JobStatus.DEAD_LETTERED)[fill.dead_letters // 2],
        "schedule": RecurringJob.objects.order_by("name").values_list("pk", flat=True)[0],
        "name": "demo.noop",
    }


# -- the report -----------------------------------------------------------------------

COLUMNS = [
    ("page", 34),
    ("status", 7),
    ("median ms", 11),
    ("max ms", 9),
    ("queries", 9),
    ("slowest query ms", 18),
]


def table_row(timing: Timing) -> list[str]:
    """The page's cells, one per column (the label cut to its column), then its flag or note."""
    label = timing.label[: COLUMNS[0][1] - 1]
    if not timing.url:
        return [label, "-", "-", "-", "-", "-", timing.note]
    figures = [
        label,
        str(timing.status),
        f"{timing.median_ms:,.1f}",
        f"{timing.max_ms:,.1f}",
        str(timing.queries),
        f"{timing.slowest_query_ms:,.1f}",
    ]
    return figures + (["SLOW"] if timing.slow else [])


def format_table(timings: list[Timing]) -> str:
    """The results as a text table: the page left-aligned, the figures right-aligned."""
    return harness.format_table(COLUMNS, [table_row(timing) for timing in timings])


def run_info(options: Options) -> dict[str, Any]:
    database = {"database": harness.database_version(), "database_settings": harness.durability()}
    details = {"fill": asdict(options.fill), "requests": options.requests, "slow_ms": SLOW_MS}
    return harness.run_info("admin_pages", database, details)


def print_report(info: dict[str, Any], timings: list[Timing]) -> None:
    fill = info["fill"]
    pending = fill["due"] + fill["scheduled"] + fill["retrying"]
    print(f"\n{info['database']} ({harness.format_settings(info['database_settings'])})")
    print(
        f"{harness.software_line(info)}; {fill['finished']:,} finished jobs,"
        f" {fill['dead_letters']:,} dead letters, {pending:,} pending,"
        f" {fill['running']} running; median of {info['requests']} requests"
    )
    print(format_table(timings))
    slow = [timing.label for timing in timings if timing.url and timing.slow]
    print(f"over {SLOW_MS:.0f} ms or not 200: {', '.join(slow) or 'none'}")


# -- main -----------------------------------------------------------------------------


def measure(options: Options, report: Callable[[Timing], None]) -> list[Timing]:
    from django.utils import timezone

    reused = options.directory if options.reuse else None
    admin_data.prepare_database(options.fill, timezone.now(), reused)
    client = admin_timing.superuser_client()
    pages = admin_pages(sample_rows(options.fill))
    if options.only:
        pages = [page for page in pages if options.only in page.label]
    timings = []
    for page in pages:
        timing, slowest = admin_timing.time_page(client, page, options.requests)
        if slowest and options.explain_ms is not None and slowest.ms > options.explain_ms:
            timing.plan = admin_timing.explain(slowest)
        report(timing)
        timings.append(timing)
    return timings


def report_progress(timing: Timing) -> None:
    log(f"{timing.label}: {timing.median_ms:.1f} ms {timing.note}".rstrip())
    if timing.plan:
        for statement in timing.statements:
            print(f"    {statement['ms']:8.1f} ms  {statement['sql'][:160]}", file=sys.stderr)
        print(f"--- {timing.label}: {timing.slowest_query}\n{timing.plan}\n", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    harness.raise_on_sigterm()
    if options.reuse and options.directory and not options.directory.exists():
        return harness.failed(BenchError(f"--reuse {options.directory}: no such folder"))
    try:
        with postgres_server(options.directory) as url:
            harness.configure_environment(url)
            harness.setup_django()
            timings = measure(options, report_progress)
            info = run_info(options)
    except BenchError as exc:
        return harness.failed(exc)
    print_report(info, timings)
    if options.json:
        data = {**info, "pages": [asdict(timing) | {"slow": timing.slow} for timing in timings]}
        harness.write_json(options.json, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
