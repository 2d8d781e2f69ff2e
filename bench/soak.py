#!/usr/bin/env python
"""Soak benchmark: a steady load for a long while, and a snapshot held open in the middle.

    DATABASE_URL=postgres://... python bench/soak.py                   # 20 minutes
    DATABASE_URL=postgres://... python bench/soak.py --minutes 3 --hold-at 1 --hold 1
    DATABASE_URL=postgres://... python bench/soak.py --rate 800 --json soak.json --svg soak.svg
    DATABASE_URL=postgres://... python bench/soak.py --minutes 30 --load 0.8 --hold 0 \
        --retention 120 --unique 0.1 --keyed 0.05          # an hour's wear: pruning, keys

``--warmup`` runs the load that many minutes before the measured ones begin: a project's
table is never empty, and a soak that starts on an empty one measures the table filling
to what ``--retention`` keeps, not its wear. The warm-up's samples are printed (at
negative minutes) and kept in the JSON, but the phases, the chart and the comparison with
the first minute are of the measured minutes alone.

``--retention`` has the leader prune finished jobs that many seconds after they end;
``--unique`` and ``--keyed`` enqueue that share of the load with a ``unique_key`` (one per
job), and as keyed jobs (``demo.keyed_noop``, 64 keys, 4 at once, on a queue ``keyed`` the
same workers serve).

What it shows is what a transaction left open elsewhere does to the queue (the health of
the jobs tables, docs/how-to/observability.md): while it holds PostgreSQL's snapshot
horizon, vacuum cannot remove the dead row versions each claim and each end leave, and
the claim reads more of them.

1. Calibrate (unless ``--rate`` is given): ``--calibrate`` no-op jobs drained by the same
   workers; the load is ``--load`` (0.5) of that drain rate. Where producer and workers
   share a few cores that burst drain is more than they take beside the producer: with
   ``--calibrate-loaded SECONDS`` the producer then offers them rising rates, from half
   the burst drain up in twentieths of it, that long each, and the load is ``--load`` of
   the last rate after which no more than a second's worth of jobs waited.
2. Start ``--processes`` processes of ``manage.py runjobs --workers --threads``, and enqueue
   no-op jobs at the load's rate (``schedule_jobs()`` every 100 ms) for ``--minutes``.
3. From ``--hold-at`` minutes, for ``--hold`` minutes, another session holds a snapshot
   open (``REPEATABLE READ``, one read, then idle in transaction), as a forgotten shell does.
4. Every ``--sample`` seconds: the claims since the last sample (the drain), their claim
   latency (p50 and p99 of attempt start minus the job's ``run_at``), the backlog of due
   jobs, the jobs tables' live and dead rows and size, the claim's candidate scan (the
   claim index's read, ``EXPLAIN (ANALYZE, BUFFERS)``: time and buffers), and what
   ``django_jobs.health`` reports (the holder's age, and its warning past ``--horizon``
   seconds: 60 here, so that it shows within the hold; ``HEALTH_HORIZON_SECONDS``, 300 by
   default, in a project).

PostgreSQL only (the horizon it shows is PostgreSQL's). The jobs tables are emptied
first: do not point it at a database whose jobs you want to keep. The jobs tables keep
their own autovacuum settings (migration 0019); ``--server-autovacuum`` resets them to the
server's for the run (the comparison in the performance page). The report names the
server's ``autovacuum_naptime``, how often autovacuum visits the database at most (a
server setting: ``ALTER SYSTEM SET autovacuum_naptime = '10s'``, then a reload).
"""

from __future__ import annotations

import importlib
import json
import math
import os
import shutil
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import harness
from harness import JOB_NAME, KEYED_JOB_NAME, KEYED_QUEUE, QUEUE, BenchError

TICK_SECONDS = 0.1
#: The keyed jobs (``--keyed``: ``harness.KEYED_JOB_NAME`` on its queue) spread over this
#: many keys.
KEYS = 64
#: The jobs tables' own autovacuum settings, as migration 0019 sets them.
AUTOVACUUM = importlib.import_module("django_jobs.migrations.0019_jobs_tables_autovacuum").SETTINGS
PROBE = (
    "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT id FROM django_jobs_job"
    " WHERE status = 'pending' AND queue = %s AND run_at <= now()"
    " ORDER BY priority DESC, run_at, id LIMIT 10"
)
COLUMNS = [
    ("minute", 7),
    ("claims/s", 9),
    ("p50 ms", 8),
    ("p99 ms", 8),
    ("due", 7),
    ("job dead", 9),
    ("job MB", 7),
    ("scan ms", 8),
    ("scan buf", 9),
    ("horizon s", 10),
    ("warning", 8),
    ("cpu %", 6),
    ("ckpt", 5),
    ("av", 3),
    ("keyed due", 10),
    ("waits", 0),
]


@dataclass
class Sample:
    at: float  # seconds since the load started
    claims_per_second: float
    p50_ms: float | None
    p99_ms: float | None
    due: int
    job_live: int
    job_dead: int
    attempt_dead: int
    job_mb: float
    scan_ms: float
    scan_buffers: int
    horizon_seconds: float | None
    warning: str
    holding: bool
    #: What the samples of later runs add: the keyed queue's due jobs, the machine's CPU
    #: busy since the last sample (all cores, %), the server's checkpoints and the jobs
    #: table's autovacuums since then, and what the server's active sessions wait on now.
    keyed_due: int = 0
    cpu_busy: float | None = None
    checkpoints: int = 0
    autovacuums: int = 0
    waits: dict[str, int] = field(default_factory=dict)


@dataclass
class Run:
    rate: float
    calibrated: float | None
    minutes: float
    hold_at: float
    hold: float
    autovacuum: bool
    samples: list[Sample] = field(default_factory=list)
    #: Finished jobs kept this long, then pruned by the leader (None: the project's 7 days).
    retention_seconds: float | None = None
    #: The shares of the load enqueued with a unique key, and as keyed jobs (their own queue).
    unique: float = 0.0
    keyed: float = 0.0
    #: The server's ``autovacuum_naptime``: how often autovacuum visits each database, at
    #: most (60 s by default), whatever the tables' own settings.
    naptime: str = ""
    #: Minutes of load before the measured ones (their samples' ``at`` is negative).
    warmup: float = 0.0
    #: The rate the workers kept up with, the producer beside them (``--calibrate-loaded``).
    calibrated_loaded: float | None = None

    def measured(self) -> list[Sample]:
        """The samples of the measured minutes, after any warm-up (a sample covers the
        interval before it: one taken at 0 s is the warm-up's last)."""
        return [sample for sample in self.samples if sample.at > 0]


def parse(argv: list[str] | None) -> Any:
    parser = harness.option_parser(__doc__ or "")
    parser.add_argument("--minutes", type=float, default=20.0, help="how long the load runs")
    parser.add_argument(
        "--warmup", type=float, default=0.0, help="minutes of load before the measured ones"
    )
    parser.add_argument("--rate", type=float, help="jobs/s (default: --load of the drain)")
    parser.add_argument("--load", type=float, default=0.5, help="fraction of the drain")
    parser.add_argument("--calibrate", type=int, default=20_000, help="jobs to calibrate on")
    parser.add_argument(
        "--calibrate-loaded",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="then offer rising rates, this long each, with the producer beside the workers",
    )
    parser.add_argument("--hold-at", type=float, default=5.0, help="minute the snapshot opens")
    parser.add_argument("--hold", type=float, default=5.0, help="minutes it stays open")
    parser.add_argument("--processes", type=int, default=2, help="runjobs processes")
    parser.add_argument("--workers", type=int, default=2, help="handler threads each")
    parser.add_argument("--sample", type=float, default=15.0, help="seconds between samples")
    parser.add_argument(
        "--server-autovacuum",
        action="store_true",
        help="reset the tables' own autovacuum settings (migration 0019) to the server's",
    )
    parser.add_argument(
        "--horizon", type=float, default=60.0, help="HEALTH_HORIZON_SECONDS for the warning"
    )
    parser.add_argument(
        "--retention",
        type=float,
        help="seconds finished jobs are kept before the leader prunes them (default 7 days)",
    )
    parser.add_argument(
        "--unique", type=float, default=0.0, help="share of the jobs with a unique_key"
    )
    parser.add_argument(
        "--keyed",
        type=float,
        default=0.0,
        help="share of the jobs keyed (demo.keyed_noop: 64 keys, 4 at once, queue 'keyed')",
    )
    parser.add_argument("--logs", type=Path, help="keep the workers' logs in this folder")
    parser.add_argument("--svg", type=Path, help="draw the samples to this SVG file")
    parser.add_argument("--redraw", type=Path, help="no run: draw --svg from a run's --json file")
    harness.add_json_option(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.redraw:
        if not args.svg:
            return harness.failed(BenchError("--redraw needs --svg"))
        args.svg.write_text(draw(load(args.redraw)))
        return 0
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        return harness.failed(BenchError("the soak runs on PostgreSQL: set DATABASE_URL"))
    harness.raise_on_sigterm()
    retention = {"JOBS_RETENTION_SECONDS": str(args.retention)} if args.retention else {}
    harness.configure_environment(url, JOBS_POLL_SECONDS="1", **retention)
    harness.setup_django()
    harness.migrate()
    harness.empty_tables()
    autovacuum(not args.server_autovacuum)
    with harness.work_directory("django-jobs-soak.") as work:
        calibrated = None
        rate = args.rate
        loaded = None
        if rate is None:
            calibrated = drained = calibrate(args, work)
            if args.calibrate_loaded:
                drained = loaded = calibrate_loaded(args, work, calibrated)
            rate = round(drained * args.load)
            harness.log(f"drain {drained:,.0f} jobs/s: the load is {rate:,.0f} jobs/s")
        own = not args.server_autovacuum
        run = Run(rate, calibrated, args.minutes, args.hold_at, args.hold, own)
        run.calibrated_loaded = loaded
        run.retention_seconds, run.unique, run.keyed = args.retention, args.unique, args.keyed
        run.warmup = args.warmup
        run.naptime = server_setting("autovacuum_naptime")
        try:
            soak(run, args, work)
        finally:
            if args.logs:
                args.logs.mkdir(parents=True, exist_ok=True)
                for log_file in work.glob("*.log"):
                    shutil.copy(log_file, args.logs / log_file.name)
    report(run)
    if args.json:
        harness.write_json(args.json, harness.run_info("soak", database(), asdict(run)))
    if args.svg:
        args.svg.write_text(draw(run))
    return 0


def load(path: Path) -> Run:
    """A run from its ``--json`` file."""
    data = json.loads(path.read_text())
    fields = {name: data[name] for name in ("rate", "calibrated", "minutes", "hold_at", "hold")}
    samples = [Sample(**sample) for sample in data["samples"]]
    return Run(
        **fields,
        autovacuum=data["autovacuum"],
        samples=samples,
        naptime=data.get("naptime", ""),
        warmup=data.get("warmup", 0.0),
        calibrated_loaded=data.get("calibrated_loaded"),
    )


def autovacuum(own: bool) -> None:
    """The jobs tables' own autovacuum settings (migration 0019's), or the server's."""
    from django.db import connection

    names = ", ".join(AUTOVACUUM)
    with connection.cursor() as cursor:
        for table in ("django_jobs_job", "django_jobs_attempt"):
            if own:
                values = ", ".join(f"{name} = {value}" for name, value in AUTOVACUUM.items())
                cursor.execute(f"ALTER TABLE {table} SET ({values})")
            else:
                cursor.execute(f"ALTER TABLE {table} RESET ({names})")


def workers(args: Any, work: Path, tag: str, *extra: str) -> list[Any]:
    queues = ["--queue", QUEUE, *(["--queue", KEYED_QUEUE] if args.keyed else [])]
    command = harness.runjobs_command(*queues, "--workers", str(args.workers), *extra)
    return [
        harness.start_process(command, work / f"{tag}-{number}.log")
        for number in range(args.processes)
    ]


def calibrate(args: Any, work: Path) -> float:
    """The drain rate of ``--calibrate`` no-op jobs by the soak's workers (jobs/s)."""
    harness.schedule_noop_jobs(args.calibrate, 500)
    harness.settle_database()
    processes = workers(args, work, "calibrate", "--burst")
    try:
        for process in processes:
            process.wait(timeout=600)
    finally:
        harness.stop_processes(processes, 10)
    first, last = harness.drain_span(args.calibrate)
    # The calibration's finished jobs stay, and are analyzed: the soak starts on tables
    # with a history, as a project's do, and on plans made for them (emptied tables,
    # analyzed empty, would have the claim planned for an empty table until the next
    # autoanalyze).
    harness.settle_database()
    return args.calibrate / max((last - first).total_seconds(), 0.001)


#: The loaded calibration's offered rates, as fractions of the burst drain: from half of it
#: up in steps of a twentieth.
RAMP = [0.5 + 0.05 * step for step in range(11)]


def calibrate_loaded(args: Any, work: Path, burst: float) -> float:
    """What the soak's workers keep up with while the producer, on the same machine, feeds
    them: offered rates from half the burst drain ``burst`` up (:data:`RAMP`), each for
    ``--calibrate-loaded`` seconds, until at the end of one more than a second's worth of
    jobs waits; the last rate they kept up with (or, if they kept up with none, what they
    drained at the first). The backlog left is drained before the workers stop."""
    processes = workers(args, work, "calibrate-loaded")
    kept_up = None
    try:
        for fraction in RAMP:
            offered = round(burst * fraction)
            drained, due = offer(offered, args.calibrate_loaded)
            behind = due > offered
            harness.log(
                f"offered {offered:,} jobs/s: drained {drained:,.0f}, {due:,} due at the end"
                + (": behind" if behind else "")
            )
            if behind:
                break
            kept_up = offered
        deadline = time.monotonic() + 600
        while harness.unfinished():
            if time.monotonic() > deadline:
                raise BenchError("the calibration's backlog was not drained in 10 minutes")
            time.sleep(1)
    finally:
        harness.stop_processes(processes, 30)
    harness.settle_database()
    return float(kept_up) if kept_up is not None else drained


def offer(rate: float, seconds: float) -> tuple[float, int]:
    """``rate`` jobs a second from the producer for ``seconds``: the claims a second over
    the second half, and the jobs due at the end."""
    from django.db import connection

    from django_jobs.models import Attempt

    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(rate, stop), daemon=True)
    producer.start()
    try:
        time.sleep(seconds / 2)
        newest, began = newest_attempt(), time.monotonic()
        time.sleep(seconds / 2)
        claims = Attempt.objects.filter(id__gt=newest).count()
        drained = claims / (time.monotonic() - began)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM django_jobs_job"
                " WHERE status = 'pending' AND queue = %s AND run_at <= now()",
                [QUEUE],
            )
            (due,) = cursor.fetchone()
    finally:
        stop.set()
        producer.join(30)
    return drained, int(due)


def soak(run: Run, args: Any, work: Path) -> None:
    stop = threading.Event()
    held = threading.Event()
    mix = Mix(run.unique, run.keyed)
    producer = threading.Thread(target=produce, args=(run.rate, stop, mix), daemon=True)
    warmup = run.warmup * 60
    holder = threading.Thread(
        target=hold_snapshot,
        args=(warmup + run.hold_at * 60, run.hold * 60, stop, held),
        daemon=True,
    )
    processes = workers(args, work, "soak")
    print("  ".join(name.rjust(width) for name, width in COLUMNS))
    try:
        started = time.monotonic()
        producer.start()
        if run.hold > 0:
            holder.start()
        last_id = newest_attempt()
        counters = Counters.read()
        end = started + warmup + run.minutes * 60
        next_at = started + args.sample
        while time.monotonic() < end:
            time.sleep(max(0.0, next_at - time.monotonic()))
            for process in processes:
                if process.poll() is not None:
                    raise BenchError(f"a runjobs process stopped (exit {process.returncode})")
            at = time.monotonic() - started - warmup
            holding = held.is_set()
            sample, last_id = measure(at, last_id, args.sample, holding, args.horizon)
            counters = counters.since(sample)
            run.samples.append(sample)
            print_row(sample)
            next_at += args.sample
    finally:
        stop.set()
        harness.stop_processes(processes, 30)
        producer.join(5)
        if holder.is_alive():
            holder.join(5)


@dataclass(frozen=True)
class Counters:
    """What the server and the machine count up, read at a sample, for the next one's
    differences: the CPU's busy and total ticks, checkpoints, the jobs table's autovacuums."""

    busy: int
    total: int
    checkpoints: int
    autovacuums: int

    @classmethod
    def read(cls) -> Counters:
        from django.db import connection

        with open("/proc/stat") as stat:
            ticks = [int(value) for value in stat.readline().split()[1:]]
        idle = ticks[3] + ticks[4]  # idle and iowait
        with connection.cursor() as cursor:
            cursor.execute("SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter")
            (checkpoints,) = cursor.fetchone()
            cursor.execute(
                "SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'django_jobs_job'"
            )
            (autovacuums,) = cursor.fetchone()
        return cls(sum(ticks) - idle, sum(ticks), int(checkpoints), int(autovacuums))

    def since(self, sample: Sample) -> Counters:
        """The counters now; their differences since these go into ``sample``."""
        now = Counters.read()
        total = now.total - self.total
        sample.cpu_busy = 100.0 * (now.busy - self.busy) / total if total else None
        sample.checkpoints = now.checkpoints - self.checkpoints
        sample.autovacuums = now.autovacuums - self.autovacuums
        return now


def newest_attempt() -> int:
    """The newest attempt's id (the calibration's claims are not the soak's)."""
    from django.db.models import Max

    from django_jobs.models import Attempt

    return Attempt.objects.aggregate(newest=Max("id"))["newest"] or 0


@dataclass
class Mix:
    """Which jobs of the load are unique and which keyed, in turn (no randomness: two
    runs enqueue the same jobs)."""

    unique: float
    keyed: float
    made: int = 0

    def spec(self) -> Any:
        from django_jobs.scheduling import JobSpec

        self.made += 1
        n = self.made
        if self.keyed and n % round(1 / self.keyed) == 0:
            return JobSpec(KEYED_JOB_NAME, {}, concurrency_key=f"k{n % KEYS}")
        if self.unique and n % round(1 / self.unique) == 1:
            return JobSpec(JOB_NAME, {}, unique_key=f"soak-{n}")
        return JobSpec(JOB_NAME, {})


def produce(rate: float, stop: threading.Event, mix: Mix | None = None) -> None:
    """``rate`` no-op jobs a second, a batch every :data:`TICK_SECONDS`, until ``stop``:
    some unique and some keyed, as ``mix`` says."""
    from django.db import connection

    from django_jobs.scheduling import schedule_jobs

    mix = mix or Mix(0.0, 0.0)
    owed = 0.0
    next_at = time.monotonic()
    try:
        while not stop.is_set():
            owed += rate * TICK_SECONDS
            count = int(owed)
            owed -= count
            if count:
                schedule_jobs([mix.spec() for _ in range(count)])
            next_at += TICK_SECONDS
            stop.wait(max(0.0, next_at - time.monotonic()))
    finally:
        connection.close()


def hold_snapshot(
    after: float, seconds: float, stop: threading.Event, held: threading.Event
) -> None:
    """From ``after`` seconds on, hold a snapshot open for ``seconds`` (``held`` set while
    it is): a forgotten shell."""
    from django.db import connection

    if stop.wait(after):
        return
    raw = connection.get_new_connection(connection.get_connection_params())
    try:
        raw.autocommit = True
        cursor = raw.cursor()
        cursor.execute("SET application_name = 'soak: forgotten shell'")
        raw.autocommit = False
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cursor.execute("SELECT count(*) FROM django_jobs_recurringjob")
        cursor.fetchall()
        harness.log("a snapshot is held open")
        held.set()
        stop.wait(seconds)
        raw.rollback()
        held.clear()
        harness.log("the snapshot is released")
    finally:
        raw.close()


def measure(
    at: float, last_id: int, interval: float, holding: bool, horizon: float
) -> tuple[Sample, int]:
    """One sample: the claims since the attempt ``last_id``, and the tables as they are."""
    from django.db import connection

    from django_jobs import health

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), max(a.id),"
            " percentile_cont(0.5) WITHIN GROUP (ORDER BY a.started_at - j.run_at),"
            " percentile_cont(0.99) WITHIN GROUP (ORDER BY a.started_at - j.run_at)"
            " FROM django_jobs_attempt a JOIN django_jobs_job j ON j.id = a.job_id"
            " WHERE a.id > %s",
            [last_id],
        )
        claims, newest, p50, p99 = cursor.fetchone()
        cursor.execute(
            "SELECT count(*) FROM django_jobs_job"
            " WHERE status = 'pending' AND queue = %s AND run_at <= now()",
            [QUEUE],
        )
        (due,) = cursor.fetchone()
        cursor.execute(
            "SELECT count(*) FROM django_jobs_job"
            " WHERE status = 'pending' AND queue = %s AND run_at <= now()",
            [KEYED_QUEUE],
        )
        (keyed_due,) = cursor.fetchone()
        cursor.execute(
            "SELECT COALESCE(wait_event_type || ':' || wait_event, 'cpu'), count(*)"
            " FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend' GROUP BY 1"
        )
        waits = dict(cursor.fetchall())
        cursor.execute(
            "SELECT relname, n_live_tup, n_dead_tup, pg_total_relation_size(relid)"
            " FROM pg_stat_user_tables"
            " WHERE relname IN ('django_jobs_job', 'django_jobs_attempt')"
        )
        tables = {name: (live, dead, size) for name, live, dead, size in cursor.fetchall()}
        cursor.execute(PROBE, [QUEUE])
        [plan] = cursor.fetchone()[0]
        scan_ms = plan["Execution Time"]
        top = plan["Plan"]
        scan_buffers = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    seen = health.read()
    problems = health.problems(seen, horizon_seconds=horizon)
    job_live, job_dead, job_size = tables.get("django_jobs_job", (0, 0, 0))
    sample = Sample(
        at=round(at, 1),
        claims_per_second=claims / interval,
        p50_ms=None if p50 is None else p50.total_seconds() * 1000,
        p99_ms=None if p99 is None else p99.total_seconds() * 1000,
        due=due,
        job_live=job_live,
        job_dead=job_dead,
        attempt_dead=tables.get("django_jobs_attempt", (0, 0, 0))[1],
        job_mb=job_size / 1e6,
        scan_ms=scan_ms,
        scan_buffers=scan_buffers,
        horizon_seconds=seen.horizon_seconds,
        warning=problems[0] if problems else "",
        holding=holding,
        keyed_due=keyed_due,
        waits=waits,
    )
    return sample, newest or last_id


def print_row(sample: Sample) -> None:
    cells = [
        f"{sample.at / 60:.2f}",
        f"{sample.claims_per_second:,.0f}",
        "-" if sample.p50_ms is None else f"{sample.p50_ms:.1f}",
        "-" if sample.p99_ms is None else f"{sample.p99_ms:.1f}",
        f"{sample.due:,}",
        f"{sample.job_dead:,}",
        f"{sample.job_mb:.1f}",
        f"{sample.scan_ms:.2f}",
        f"{sample.scan_buffers:,}",
        "-" if sample.horizon_seconds is None else f"{sample.horizon_seconds:.0f}",
        "yes" if sample.warning else "",
        "-" if sample.cpu_busy is None else f"{sample.cpu_busy:.0f}",
        str(sample.checkpoints),
        str(sample.autovacuums),
        f"{sample.keyed_due:,}",
        " ".join(f"{name}={count}" for name, count in sorted(sample.waits.items())),
    ]
    print("  ".join(cell.rjust(width) for cell, (_, width) in zip(cells, COLUMNS, strict=True)))
    sys.stdout.flush()


def report(run: Run) -> None:
    """The phases' medians: before, while and after the snapshot is held."""
    samples = run.measured()
    held = [index for index, sample in enumerate(samples) if sample.holding]
    first, last = (held[0], held[-1] + 1) if held else (len(samples), len(samples))
    phases = {
        "before": samples[:first],
        "holding": samples[first:last],
        "after": samples[last:],
    }
    print(f"\nload {run.rate:,.0f} jobs/s for {run.minutes:g} minutes", end="")
    if run.warmup:
        print(f" after {run.warmup:g} of warm-up", end="")
    if run.calibrated:
        print(f" ({run.calibrated:,.0f} jobs/s drained when calibrated", end="")
        if run.calibrated_loaded:
            print(f", {run.calibrated_loaded:,.0f} kept up with beside the producer", end="")
        print(")", end="")
    print(f"; autovacuum: {autovacuum_label(run)}")

    def median(values: list[float | None]) -> float:
        found = median_of(values)
        return math.nan if found is None else found

    for name, phase in phases.items():
        if not phase:
            continue
        print(
            f"{name:>8}: claims/s {median([s.claims_per_second for s in phase]):,.0f},"
            f" latency p50 {median([s.p50_ms for s in phase]):.1f} ms,"
            f" p99 {median([s.p99_ms for s in phase]):.1f} ms,"
            f" dead rows (max) {max(s.job_dead for s in phase):,},"
            f" scan {median([s.scan_ms for s in phase]):.2f} ms"
            f" / {median([s.scan_buffers for s in phase]):,.0f} buffers,"
            f" warned in {sum(1 for s in phase if s.warning)} of {len(phase)} samples"
        )
    report_minutes(samples)


def median_of(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def by_minute(samples: list[Sample]) -> dict[int, dict[str, float | None]]:
    """Each measured minute's drain (the mean of its samples' claims/s) and claim latency
    (the median of its samples' p50, and of their p99)."""
    minutes: dict[int, list[Sample]] = {}
    for sample in samples:
        # A sample covers the interval before it: the one taken at 60.0 s is minute 0's.
        minutes.setdefault(math.ceil(sample.at / 60) - 1, []).append(sample)
    return {
        minute: {
            "claims/s": statistics.mean(s.claims_per_second for s in taken),
            "p50": median_of([s.p50_ms for s in taken]),
            "p99": median_of([s.p99_ms for s in taken]),
        }
        for minute, taken in sorted(minutes.items())
    }


def report_minutes(samples: list[Sample]) -> None:
    """Each later minute against the first: how many lie within 10 % of it, how many wore
    more than 10 % past it (a drain below, a latency above), and the range."""
    minutes = by_minute(samples)
    if len(minutes) < 2:
        return
    first, *later = minutes.values()
    print(f"against minute 0 ({len(later)} later minutes):")
    for name, value in first.items():
        if not value:
            continue
        ratios = [taken / value for figures in later if (taken := figures[name]) is not None]
        within = sum(1 for ratio in ratios if abs(ratio - 1) <= 0.10)
        # A drain wears downwards, a latency upwards.
        worse = sum(1 for ratio in ratios if (ratio < 0.90 if name == "claims/s" else ratio > 1.10))
        print(
            f"  {name:>8}: minute 0 {value:,.1f}; within 10 % in {within} of {len(ratios)},"
            f" more than 10 % worse in {worse}, median {statistics.median(ratios):.2f},"
            f" from {min(ratios):.2f} to {max(ratios):.2f}"
        )


def autovacuum_label(run: Run) -> str:
    label = "the tables' own (migration 0019)" if run.autovacuum else "the server's defaults"
    return f"{label}, naptime {run.naptime}" if run.naptime else label


def server_setting(name: str) -> str:
    """One of the server's settings, through Django's connection."""
    from django.db import connection

    with connection.cursor() as cursor:
        return harness.server_settings(cursor, (name,))[name]


def database() -> dict[str, Any]:
    return {"version": harness.database_version(), "settings": harness.durability()}


# -- the chart ----------------------------------------------------------------------------

WIDTH, PANEL, GAP, LEFT, RIGHT, TOP = 900, 150, 40, 80, 30, 70
PANELS = [
    ("claims/s", lambda s: s.claims_per_second),
    ("claim latency p50, ms", lambda s: s.p50_ms),
    ("claim latency p99, ms", lambda s: s.p99_ms),
    ("jobs table dead rows", lambda s: s.job_dead),
    ("candidate scan, buffers", lambda s: s.scan_buffers),
]


def draw_warnings(drawing: Any, run: Run, x_of: Any, top_y: float) -> None:
    """A red strip over the first panel where the health warning was on, and its legend."""
    previous = 0.0
    for sample in run.measured():
        if sample.warning:
            drawing.add(
                "rect",
                x=f"{x_of(previous):.1f}",
                y=top_y - 16,
                width=f"{x_of(sample.at) - x_of(previous):.1f}",
                height=6,
                fill="#c0392b",
            )
        previous = sample.at
    drawing.text(
        WIDTH - RIGHT, top_y - 6, "red: the health warning on", text_anchor="end", font_size=11
    )


def draw(run: Run) -> str:
    """The samples as four stacked line charts, the held snapshot shaded."""
    from chart import Drawing, nice_scale, number

    height = TOP + len(PANELS) * (PANEL + GAP) + 30
    drawing = Drawing()
    drawing.root.set("height", str(height))
    drawing.root.set("viewBox", f"0 0 {WIDTH} {height}")
    drawing.add("rect", width=WIDTH, height=height, fill="#ffffff")
    title = f"django-jobs soak: {run.rate:,.0f} jobs/s for {run.minutes:g} minutes"
    if run.warmup:
        title += f" after {run.warmup:g} of warm-up"
    drawing.text(WIDTH / 2, 28, title, text_anchor="middle", font_size=18)
    held = (
        f"a snapshot held open from minute {run.hold_at:g} to {run.hold_at + run.hold:g} (shaded)"
        if run.hold
        else "no snapshot held"
    )
    subtitle = f"{held}; autovacuum: {autovacuum_label(run)}"
    drawing.text(WIDTH / 2, 48, subtitle, text_anchor="middle", font_size=12)
    span = max(run.minutes * 60, 1.0)
    inner = WIDTH - LEFT - RIGHT

    def x_of(seconds: float) -> float:
        return LEFT + inner * seconds / span

    for index, (label, value_of) in enumerate(PANELS):
        top_y = TOP + index * (PANEL + GAP)
        bottom = top_y + PANEL
        if run.hold:
            drawing.add(
                "rect",
                x=f"{x_of(run.hold_at * 60):.1f}",
                y=top_y,
                width=f"{x_of((run.hold_at + run.hold) * 60) - x_of(run.hold_at * 60):.1f}",
                height=PANEL,
                fill="#f3e3d3",
            )
        values = [(s.at, value_of(s)) for s in run.measured()]
        known = [v for _, v in values if v is not None]
        top, step = nice_scale(max(known, default=1.0), ticks=3)
        for tick in range(round(top / step) + 1):
            y = bottom - PANEL * tick * step / top
            drawing.add(
                "line", x1=LEFT, x2=WIDTH - RIGHT, y1=f"{y:.1f}", y2=f"{y:.1f}", stroke="#dddddd"
            )
            drawing.text(LEFT - 6, y + 4, number(tick * step), text_anchor="end", font_size=11)
        drawing.text(LEFT, top_y - 6, label, font_size=12)
        points = " ".join(
            f"{x_of(at):.1f},{bottom - PANEL * v / top:.1f}" for at, v in values if v is not None
        )
        drawing.add("polyline", points=points, fill="none", stroke="#3b6ea8", stroke_width=2)
        if index == 0:
            draw_warnings(drawing, run, x_of, top_y)
    axis_y = TOP + len(PANELS) * (PANEL + GAP) - GAP + 18
    for minute in range(0, int(run.minutes) + 1, max(1, int(run.minutes) // 10)):
        drawing.text(x_of(minute * 60), axis_y, f"{minute} min", text_anchor="middle", font_size=11)
    return drawing.tostring()


if __name__ == "__main__":
    sys.exit(main())
