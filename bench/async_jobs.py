#!/usr/bin/env python
"""Async handlers benchmark: jobs that each await a second, on an event loop and on threads.

    DATABASE_URL=postgres://.../postgres python bench/async_jobs.py        # 1,000 jobs of 1 s
    DATABASE_URL=postgres://.../postgres python bench/async_jobs.py --jobs 2000 --seconds 0.5
    DATABASE_URL=postgres://.../postgres python bench/async_jobs.py --only procrastinate

Each system drains ``--jobs`` jobs that each wait ``--seconds`` the way a call to a
slow API does (asleep, touching no database), all enqueued before its one worker
process starts:

- django-jobs async: ``example.async_add`` (``await asyncio.sleep``), ``runjobs
  --queue default --workers 2 --burst`` with ``async_concurrency`` as many as the jobs;
- django-jobs threads: ``example.sleep`` (``time.sleep``), ``runjobs --queue default
  --workers W --burst`` for W of ``--threads`` (100 and 1,000 by default);
- procrastinate async: an ``async def`` task awaiting ``asyncio.sleep``, one
  ``procrastinate worker --concurrency N --one-shot`` with N as many as the jobs
  (its own virtualenv, bench/.envs/procrastinate, as ``bash scripts/bench-peers`` makes it).

For each: the drain (first start to last end, read from the rows: django-jobs'
attempts, procrastinate's events), the worker process's wall time (start to exit),
the most threads it had at once (``/proc/PID/task``) and its peak resident memory
(``VmHWM``), both read every 20 ms, and its CPU time (``wait4``). Each system gets a
fresh database of its own on the server ``DATABASE_URL`` names (dropped and created
again).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import harness
from harness import ROOT, BenchError

PROCRASTINATE = ROOT / "bench" / ".envs" / "procrastinate" / "bin" / "python"
PEERS = ROOT / "bench" / "peers"
SAMPLE_SECONDS = 0.02


@dataclass
class Run:
    system: str
    shape: str
    jobs: int
    drain_seconds: float
    wall_seconds: float
    peak_threads: int
    peak_rss_mib: float
    cpu_seconds: float

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.drain_seconds


def database_url(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def create_database(url: str, name: str) -> str:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as connection:
        identifier = sql.Identifier(name)
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(identifier))
        connection.execute(sql.SQL("CREATE DATABASE {}").format(identifier))
        connection.execute("CHECKPOINT")
    return database_url(url, name)


def watch(command: list[str], env: dict[str, str], log: Path, timeout: float) -> tuple:
    """Run ``command`` to its end; its wall time, most threads, peak RSS (MiB), CPU seconds."""
    with open(log, "wb") as output:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT
        )
    started = time.monotonic()
    most = 0
    peak_kib = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal most, peak_kib
        while not done.wait(SAMPLE_SECONDS):
            try:
                most = max(most, len(os.listdir(f"/proc/{process.pid}/task")))
                peak_kib = max(peak_kib, resident_peak_kib(process.pid))
            except (FileNotFoundError, ProcessLookupError):
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    killer = threading.Timer(timeout, lambda: process.kill())
    killer.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        killer.cancel()
        done.set()
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    if process.returncode != 0:
        harness.print_log_tail(log)
        raise BenchError(f"{command[1:4]} exited with {process.returncode}")
    return wall, most, peak_kib / 1024, usage.ru_utime + usage.ru_stime


def resident_peak_kib(pid: int) -> int:
    """The process's peak resident memory so far (``VmHWM``; ``wait4``'s ``ru_maxrss``
    would count the bench's own memory, which a child keeps across ``exec``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


# -- django-jobs ------------------------------------------------------------------------


def django_jobs_runs(url: str, options: dict, work: Path) -> list[Run]:
    harness.configure_environment(create_database(url, "bench_async_django_jobs"))
    harness.setup_django()
    harness.migrate()
    runs = []
    if options["only"] in (None, "django-jobs"):
        shapes = [("async", 2)] + [("threads", threads) for threads in options["threads"]]
        for kind, threads in shapes:
            runs.append(django_jobs_run(kind, threads, options, work))
    return runs


def django_jobs_run(kind: str, threads: int, options: dict, work: Path) -> Run:
    from django.db.models import Max, Min

    from django_jobs import schedule_jobs
    from django_jobs.models import Attempt, Job

    jobs, seconds = options["jobs"], options["seconds"]
    harness.empty_tables()
    if kind == "async":
        name, payload = "example.async_add", {"a": 0, "b": 0, "sleep": seconds}
    else:
        name, payload = "example.sleep", {"seconds": seconds}
    harness.heading(f"django-jobs {kind}, --workers {threads}: {jobs} jobs of {seconds} s")
    schedule_jobs([{"job": name, "payload": payload}] * jobs)
    harness.settle_database()
    env = {
        **os.environ,
        "JOBS_ASYNC_CONCURRENCY": str(jobs),
        "JOBS_POLL_SECONDS": "0.1",
        "JOBS_LEASE_SECONDS": "60",
    }
    command = harness.runjobs_command("--queue", "default", "--workers", str(threads), "--burst")
    wall, most, rss, cpu = watch(command, env, work / f"{kind}-{threads}.log", options["timeout"])
    succeeded = Job.objects.filter(status="succeeded").count()
    if succeeded != jobs:
        raise BenchError(f"{succeeded} of {jobs} jobs succeeded")
    span = Attempt.objects.aggregate(first=Min("started_at"), last=Max("finished_at"))
    drain = (span["last"] - span["first"]).total_seconds()
    shape = f"1 runjobs, --workers {threads}" + (
        f", async_concurrency {jobs}" if kind == "async" else ""
    )
    return Run(f"django-jobs {kind}", shape, jobs, drain, wall, most, rss, cpu)


# -- procrastinate ----------------------------------------------------------------------

ENQUEUE = """
import procrastinate_app as bench
bench.app.open()
bench.app.schema_manager.apply_schema()
bench.async_wait.batch_defer(*({"seconds": %r} for _ in range(%d)))
"""
DRAIN = """
SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')
                        - min(at) FILTER (WHERE type = 'started')),
       count(*) FILTER (WHERE type = 'succeeded')
FROM procrastinate_events
"""


def procrastinate_run(url: str, options: dict, work: Path) -> Run:
    if not PROCRASTINATE.exists():
        raise BenchError(f"no {PROCRASTINATE}: run `bash scripts/bench-peers --only procrastinate`")
    import psycopg

    jobs, seconds = options["jobs"], options["seconds"]
    target = create_database(url, "bench_async_procrastinate")
    env = {**os.environ, "DATABASE_URL": target, "PYTHONPATH": str(PEERS)}
    harness.heading(f"procrastinate async, --concurrency {jobs}: {jobs} jobs of {seconds} s")
    subprocess.run(
        [str(PROCRASTINATE), "-c", ENQUEUE % (seconds, jobs)], cwd=PEERS, env=env, check=True
    )
    command = [str(PROCRASTINATE), "-m", "procrastinate", "--app", "procrastinate_app.app"]
    command += ["worker", "--concurrency", str(jobs), "--one-shot"]
    wall, most, rss, cpu = watch(command, env, work / "procrastinate.log", options["timeout"])
    with psycopg.connect(target) as connection:
        drain, succeeded = connection.execute(DRAIN).fetchone()
    if succeeded != jobs:
        raise BenchError(f"procrastinate: {succeeded} of {jobs} jobs succeeded")
    shape = f"1 worker, --concurrency {jobs}"
    return Run("procrastinate async", shape, jobs, float(drain), wall, most, rss, cpu)


# -- the report -------------------------------------------------------------------------

COLUMNS = [
    ("system", 22),
    ("drain s", 9),
    ("jobs/s", 8),
    ("wall s", 8),
    ("threads", 9),
    ("RSS MiB", 9),
    ("CPU s", 7),
    ("  shape", 40),
]


def report(runs: list[Run], options: dict) -> str:
    rows = [
        [
            run.system,
            f"{run.drain_seconds:.2f}",
            f"{run.jobs_per_second:.0f}",
            f"{run.wall_seconds:.2f}",
            str(run.peak_threads),
            f"{run.peak_rss_mib:.1f}",
            f"{run.cpu_seconds:.2f}",
            f"  {run.shape}",
        ]
        for run in runs
    ]
    heading = f"{options['jobs']} jobs, each waiting {options['seconds']} s"
    return heading + "\n" + harness.format_table(COLUMNS, rows, align="<>>>>>><")


def main(argv: list[str] | None = None) -> int:
    parser = harness.option_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=1.0, help="each job's wait")
    parser.add_argument(
        "--threads", default="100,1000", help="django-jobs' thread counts, comma-separated"
    )
    parser.add_argument("--only", choices=["django-jobs", "procrastinate"])
    parser.add_argument("--timeout", type=float, default=600.0, help="per run (seconds)")
    harness.add_json_option(parser)
    args = parser.parse_args(argv)
    options = {
        "jobs": args.jobs,
        "seconds": args.seconds,
        "threads": [int(count) for count in args.threads.split(",") if count],
        "only": args.only,
        "timeout": args.timeout,
    }
    harness.raise_on_sigterm()
    try:
        url = harness.postgresql_url("scripts/bench-peers starts one", "server")
        runs: list[Run] = []
        with harness.work_directory() as work:
            if args.only in (None, "django-jobs"):
                runs += django_jobs_runs(url, options, work)
            if args.only in (None, "procrastinate"):
                runs.append(procrastinate_run(url, options, work))
    except BenchError as exc:
        return harness.failed(exc)
    print(report(runs, options))
    if args.json:
        details = {"options": options, "runs": [asdict(run) for run in runs]}
        harness.write_json(args.json, harness.run_info("async_jobs", {}, details))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
