#!/usr/bin/env python
"""Claim cycle benchmark: what one dispatcher's claim costs, in time and CPU, while draining.

    DATABASE_URL=postgres://... python bench/claim_cycle.py            # 5,000 jobs, 2 threads
    python bench/claim_cycle.py --jobs 2000 --workers 2                # a temporary SQLite file
    python bench/claim_cycle.py --claim-ahead 0                        # without claiming ahead

Enqueues ``--jobs`` no-op jobs, then drains them with one worker serving with
threads in this process (``django_jobs.worker.serve``: the dispatcher, the
handler threads, the settler and the heartbeat of a ``runjobs`` process,
``--workers`` handler threads) until all have succeeded. Every call of the
dispatcher's claim (``Claimer.claim_and_settle``) is timed: its wall clock,
the CPU of the dispatcher's thread during it (``time.thread_time()``), the
jobs it claimed and the outcomes it carried. It prints per cycle the median
and mean of each, the share of the drain the dispatcher spent in its claims
(the rest it waited for room: for threads to free up), and the drain's rate
with the process's CPU per job. Like ``bench/drain.py``, a non-SQLite database
is migrated and its Job and Attempt rows are deleted.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import harness
from harness import KEYED_JOB_NAME, KEYED_PER_KEY, KEYED_QUEUE, keyed_key

COLUMNS = [("per claim cycle", 34), ("median", 10), ("mean", 10)]
#: The drain's bound; and with no claim timed after a tenth of it, the worker is stuck.
TIMEOUT_SECONDS = 300


@dataclass(frozen=True)
class Options:
    jobs: int
    workers: int
    claim_ahead: float | None
    keyed: bool = False


@dataclass
class Cycle:
    wall: float
    cpu: float
    claimed: int
    carried: int


def parse_options(argv: list[str] | None = None) -> Options:
    parser = harness.option_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=5000, help="jobs to enqueue and drain")
    parser.add_argument("--workers", type=int, default=2, help="handler threads")
    parser.add_argument(
        "--claim-ahead",
        type=float,
        default=None,
        metavar="SECONDS",
        help="DJANGO_JOBS['CLAIM_AHEAD_SECONDS'] (default: the setting's default)",
    )
    parser.add_argument(
        "--keyed",
        action="store_true",
        help=f"the jobs are {KEYED_JOB_NAME} on the queue {KEYED_QUEUE!r}, {KEYED_PER_KEY} a key"
        " (its limit of 4 never binds at 2 threads): a keyed claim's cost",
    )
    args = parser.parse_args(argv)
    harness.require_at_least_one(parser, args, "jobs", "workers")
    return Options(args.jobs, args.workers, args.claim_ahead, args.keyed)


def schedule_keyed_jobs(count: int) -> None:
    from django_jobs.scheduling import JobSpec, schedule_jobs

    for first in range(0, count, 500):
        numbers = range(first, min(first + 500, count))
        schedule_jobs(
            [JobSpec(KEYED_JOB_NAME, {}, concurrency_key=keyed_key(number)) for number in numbers]
        )


def measure(options: Options) -> tuple[list[Cycle], float, float]:
    """Drain the jobs; the claim cycles, the drain's seconds and the process's CPU seconds."""
    from django.conf import settings as django_settings

    from django_jobs.models import Job, JobStatus
    from django_jobs.worker import Worker, serve

    jobs_settings = dict(getattr(django_settings, "DJANGO_JOBS", {}))
    queue = KEYED_QUEUE if options.keyed else harness.QUEUE
    jobs_settings["QUEUES"] = {queue: {"workers": options.workers}}
    if options.claim_ahead is not None:
        jobs_settings["CLAIM_AHEAD_SECONDS"] = options.claim_ahead
    django_settings.DJANGO_JOBS = jobs_settings

    harness.delete_jobs()
    if options.keyed:
        schedule_keyed_jobs(options.jobs)
    else:
        harness.schedule_noop_jobs(options.jobs, 500)
    worker = Worker([queue])
    cycles: list[Cycle] = []
    claim_and_settle = worker.claimer.claim_and_settle
    settler = worker.settler

    def timed_claim(*args: Any, **kwargs: Any) -> list:
        carried = len(settler._pending)  # what the claim will carry (read without the lock)
        wall, cpu = time.perf_counter(), time.thread_time()
        claimed = claim_and_settle(*args, **kwargs)
        cycles.append(
            Cycle(time.perf_counter() - wall, time.thread_time() - cpu, len(claimed), carried)
        )
        return claimed

    worker.claimer.claim_and_settle = timed_claim  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=serve, args=(worker, stop))
    started, cpu = time.perf_counter(), time.process_time()
    started_at = time.monotonic()
    thread.start()
    try:
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while Job.objects.filter(status=JobStatus.SUCCEEDED).count() < options.jobs:
            if not thread.is_alive():
                raise harness.BenchError("the worker stopped before the drain ended")
            waited = time.monotonic() - started_at
            if time.monotonic() > deadline or (not cycles and waited > TIMEOUT_SECONDS / 10):
                raise harness.BenchError(
                    f"the drain did not end within {TIMEOUT_SECONDS} s (claims timed:"
                    f" {len(cycles)}); see the worker's log above"
                )
            time.sleep(0.01)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        stop.set()
        thread.join(30)
    busy = [cycle for cycle in cycles if cycle.claimed]  # the drain's, not the idle polls
    return busy, seconds, cpu


def report(options: Options, cycles: list[Cycle], seconds: float, cpu: float) -> None:
    def row(what: str, values: list[float], unit: str, scale: float = 1.0) -> list[str]:
        return [
            what,
            f"{statistics.median(values) * scale:,.2f}{unit}",
            f"{statistics.fmean(values) * scale:,.2f}{unit}",
        ]

    rows = [
        row("wall clock", [c.wall for c in cycles], " ms", 1000),
        row("CPU of the dispatcher's thread", [c.cpu for c in cycles], " ms", 1000),
        row("jobs claimed", [float(c.claimed) for c in cycles], ""),
        row("outcomes carried", [float(c.carried) for c in cycles], ""),
    ]
    print(harness.format_table(COLUMNS, rows))
    in_claims = sum(c.wall for c in cycles)
    print(
        f"{len(cycles):,} claim cycles in {seconds:.2f} s: the dispatcher spent "
        f"{in_claims / seconds:.0%} of the drain in its claims, the rest waiting for room"
    )
    print(
        f"drain: {options.jobs / seconds:,.0f} jobs/s; this process's CPU: "
        f"{cpu / options.jobs * 1e6:,.0f} us per job"
    )


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    with harness.work_directory() as work:
        harness.configure_environment(
            harness.temporary_sqlite_url(os.environ.get("DATABASE_URL", ""), work)
        )
        harness.setup_django()
        harness.migrate()
        try:
            cycles, seconds, cpu = measure(options)
        except harness.BenchError as exc:
            return harness.failed(exc)
        if not cycles:
            return harness.failed(harness.BenchError("no claim took a job"))
        harness.heading(
            f"claim cycles: {options.jobs:,} no-op jobs, 1 worker, {options.workers} threads"
        )
        report(options, cycles, seconds, cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
