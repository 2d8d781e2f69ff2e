"""The measuring loop every system's driver shares (standard library only).

A driver (``run_<system>.py``) runs in that system's own virtualenv. It
describes the system as a :class:`System` and calls :func:`main`, which runs
the same phases for every system and writes one JSON result file:

1. bulk enqueue: ``--jobs`` no-op jobs in calls of ``--batch`` (skipped when
   the system has no bulk API), timed, the jobs deleted after it; in rounds
   until 20,000 jobs, at least three (:data:`BULK_JOBS`);
2. one-by-one enqueue: ``--jobs`` calls, each its own transaction, timed; these
   jobs stay for the drain;
3. drain: the system's workers are started; the driver polls the database and
   times from the first job picked up until every job has succeeded, then
   stops any worker still running;
4. pickup latency: an idle worker is started; one job at a time is enqueued,
   after a random pause, and the time from the enqueue's commit to the
   handler's start (the handler appends ``time.time()`` to a file) is kept.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# bench/, for bench/harness.py (standard library only at module level, as a peer's virtualenv
# needs); the drivers import it too, once this module has put it on the path.
BENCH = str(Path(__file__).resolve().parent.parent)
if BENCH not in sys.path:
    sys.path.append(BENCH)

import harness  # noqa: E402
from harness import BenchError  # noqa: E402

DB_POLL_SECONDS = 0.05
FILE_POLL_SECONDS = 0.005
STOP_GRACE_SECONDS = 15.0
PICKUP_TIMEOUT_SECONDS = 30.0
WARM_UP_TIMEOUT_SECONDS = 60.0
# Pauses between pickups are drawn from this range, so that an enqueue falls at
# any phase of a polling worker's interval rather than always at the same one.
PICKUP_PAUSE_SECONDS = (0.1, 1.1)


@dataclass(frozen=True)
class Options:
    jobs: int
    pickups: int
    batch: int
    timeout: float
    log_dir: Path
    result: Path


@dataclass
class Result:
    """What a driver reports; rates in jobs per second, latencies in seconds."""

    system: str
    versions: dict[str, str]
    workers: str
    bulk_api: str | None = None
    bulk_rate: float | None = None
    one_by_one_rate: float = 0.0
    drain_start_up_seconds: float = 0.0
    drain_seconds: float = 0.0
    drain_rate: float = 0.0
    pickups: list[float] = field(default_factory=list)
    pickup_p50: float | None = None
    pickup_p90: float | None = None
    #: the database as the driver's connection sees it, when the report cannot ask the server
    database: str | None = None
    #: further drains of the same jobs, in other shapes: how they ran (words) -> jobs/s
    drains: dict[str, float] = field(default_factory=dict)


class System(ABC):
    """One queue system, as the measuring loop sees it."""

    name: str
    #: how the workers run, in words, for the report
    workers: str
    #: the bulk call's name, or None when the system has none
    bulk_api: str | None = None

    @abstractmethod
    def versions(self) -> dict[str, str]: ...

    @abstractmethod
    def prepare(self) -> None:
        """Create the schema in the (empty) database."""

    @abstractmethod
    def delete_jobs(self) -> None: ...

    @abstractmethod
    def enqueue_one(self, number: int) -> None:
        """Enqueue one no-op job in its own transaction."""

    def enqueue_many(self, numbers: range) -> None:
        """Enqueue a no-op job per number in one bulk call."""
        raise NotImplementedError

    @abstractmethod
    def enqueue_pickup(self, log: Path) -> None:
        """Enqueue one job whose handler appends ``time.time()`` to ``log``."""

    @abstractmethod
    def drain_commands(self) -> list[list[str]]:
        """The worker processes that drain the queue."""

    @abstractmethod
    def idle_commands(self) -> list[list[str]]:
        """The worker processes that wait for jobs (for the pickup latency)."""

    @abstractmethod
    def counts(self) -> tuple[int, int, int]:
        """(picked up so far, succeeded, finished otherwise), read from the database."""

    @abstractmethod
    def unfinished(self) -> bool:
        """Whether a job waits or runs: the probe polled through the drain, by the system's
        own index of waiting and running jobs. The counts read every row; polled every
        50 ms through a drain, they cost the server more than some systems' claims do
        (10-12 ms a call at 20,000 jobs on PostgreSQL), so they are read once, at the end."""

    def describe_database(self) -> str | None:
        """The database in words (a SQLite file's settings), or None to leave it to the report."""
        return None


# -- processes ----------------------------------------------------------------


class Workers:
    """Worker processes started by this driver, stopped by pid."""

    def __init__(self, log_dir: Path, label: str) -> None:
        self.log_dir = log_dir
        self.label = label
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, commands: list[list[str]]) -> None:
        for number, command in enumerate(commands):
            log = self.log_dir / f"{self.label}-{number}.log"
            self.processes.append(harness.start_process(command, log))

    def all_exited(self) -> bool:
        return all(process.poll() is not None for process in self.processes)

    def stop(self) -> None:
        """SIGTERM each live worker by pid, SIGKILL those that do not exit in time."""
        harness.stop_processes(self.processes, STOP_GRACE_SECONDS)

    def print_logs(self) -> None:
        for path in sorted(self.log_dir.glob(f"{self.label}-*.log")):
            harness.print_log_tail(path)


def wait_until(
    predicate: Callable[[], bool], deadline: float, what: str, workers: Workers | None = None
) -> float:
    """Poll until ``predicate()``; return the perf_counter time it first held."""
    while True:
        if predicate():
            return time.perf_counter()
        if workers is not None and workers.all_exited() and not predicate():
            raise BenchError(f"every worker exited before {what}")
        if time.monotonic() > deadline:
            raise BenchError(f"timed out waiting for {what}")
        time.sleep(DB_POLL_SECONDS)


# -- phases -------------------------------------------------------------------


def warm_up(system: System, options: Options) -> None:
    """One untimed call of each way the system enqueues, its jobs deleted: a process's
    first call pays what no later call does (imports, statements prepared), about 40 ms
    of django-jobs' first bulk call, a fifth of the bulk phase of 5,000 jobs."""
    if system.bulk_api:
        system.enqueue_many(range(min(options.batch, options.jobs)))
    system.enqueue_one(0)
    system.delete_jobs()


#: The bulk enqueue is timed in rounds of ``--jobs`` until it has enqueued this many jobs,
#: and at least :data:`BULK_ROUNDS` times; the report gives all its jobs over all its time.
#: A round of 5,000 jobs lasts a tenth of a second, and a full collection of Python's
#: garbage collector (30 ms or more in a process that has set Django up) falls in one
#: round of three or four: the same code measured 0.38 to 0.61 of the raw `COPY` a round.
#: Over 20,000 jobs each run pays its share of collections.
BULK_JOBS = 20_000
BULK_ROUNDS = 3


def enqueue_in_bulk(system: System, options: Options) -> float:
    """One round: ``--jobs`` jobs in calls of ``--batch``; the seconds it took."""
    start = time.perf_counter()
    for first in range(0, options.jobs, options.batch):
        system.enqueue_many(range(first, min(first + options.batch, options.jobs)))
    return time.perf_counter() - start


def bulk_rate(system: System, options: Options) -> float:
    """Jobs per second over rounds of the bulk enqueue (:data:`BULK_JOBS`, at least
    :data:`BULK_ROUNDS` rounds), each round's jobs deleted after it, untimed."""
    rounds = max(BULK_ROUNDS, -(-BULK_JOBS // options.jobs))
    seconds = 0.0
    for _ in range(rounds):
        seconds += enqueue_in_bulk(system, options)
        system.delete_jobs()
    return rounds * options.jobs / seconds


def enqueue_one_by_one(system: System, options: Options) -> float:
    start = time.perf_counter()
    for number in range(options.jobs):
        system.enqueue_one(number)
    return options.jobs / (time.perf_counter() - start)


def succeeded_all(system: System, total: int) -> bool:
    if system.unfinished():
        return False
    started, succeeded, otherwise = system.counts()
    if otherwise:
        raise BenchError(f"{otherwise} jobs did not succeed")
    return succeeded >= total


def drain(system: System, options: Options, result: Result) -> None:
    deadline = time.monotonic() + options.timeout
    workers = Workers(options.log_dir, f"{system.name}-drain")
    try:
        start = time.perf_counter()
        workers.start(system.drain_commands())
        first = wait_until(lambda: system.counts()[0] > 0, deadline, "the first pickup", workers)
        done = wait_until(
            lambda: succeeded_all(system, options.jobs), deadline, "the drain", workers
        )
    except BaseException:
        workers.print_logs()
        raise
    finally:
        workers.stop()
    result.drain_start_up_seconds = first - start
    result.drain_seconds = done - first
    result.drain_rate = options.jobs / (done - first)


def read_start_times(log: Path) -> list[float]:
    """The handlers' start times: one float a line, or a JSON line with ``event``/``at``."""
    if not log.exists():
        return []
    times = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == "started":
                times.append(float(record["at"]))
        elif line.strip():
            times.append(float(line))
    return times


def wait_for_starts(log: Path, count: int, timeout: float) -> list[float]:
    deadline = time.monotonic() + timeout
    while True:
        times = read_start_times(log)
        if len(times) >= count:
            return times
        if time.monotonic() > deadline:
            raise BenchError(f"timed out waiting for pickup {count}")
        time.sleep(FILE_POLL_SECONDS)


def measure_pickups(system: System, options: Options, result: Result) -> None:
    """Enqueue-commit to handler-start, one job at a time, with the worker idle."""
    log = options.log_dir / f"{system.name}-starts.log"
    workers = Workers(options.log_dir, f"{system.name}-idle")
    pause = random.Random(1)  # the same pauses for every system
    try:
        workers.start(system.idle_commands())
        system.enqueue_pickup(log)  # warm-up: the worker is up and has run a job
        wait_for_starts(log, 1, WARM_UP_TIMEOUT_SECONDS)
        for number in range(options.pickups):
            time.sleep(pause.uniform(*PICKUP_PAUSE_SECONDS))
            system.enqueue_pickup(log)
            committed = time.time()
            started = wait_for_starts(log, number + 2, PICKUP_TIMEOUT_SECONDS)[number + 1]
            result.pickups.append(started - committed)
    except BaseException:
        workers.print_logs()
        raise
    finally:
        workers.stop()
    if len(result.pickups) >= 2:
        result.pickup_p50 = statistics.median(result.pickups)
        result.pickup_p90 = statistics.quantiles(result.pickups, n=10)[8]


def run(system: System, options: Options) -> Result:
    result = Result(system.name, system.versions(), system.workers, system.bulk_api)
    system.prepare()
    result.database = system.describe_database()
    system.delete_jobs()
    warm_up(system, options)
    if system.bulk_api:
        result.bulk_rate = bulk_rate(system, options)
    result.one_by_one_rate = enqueue_one_by_one(system, options)
    drain(system, options, result)
    system.delete_jobs()
    if options.pickups:
        measure_pickups(system, options, result)
    return result


# -- main -----------------------------------------------------------------------


#: A driver's own options: a function that adds them to the parser.
AddArguments = Callable[[argparse.ArgumentParser], None]


def parse_options(
    argv: list[str] | None = None, add_arguments: AddArguments | None = None
) -> tuple[Options, dict[str, Any]]:
    """The options every driver takes, and the driver's own (``add_arguments``), by name."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--pickups", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--timeout", type=float, required=True, help="per drain (seconds)")
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True, help="JSON file to write")
    shared = {action.dest for action in parser._actions}
    if add_arguments is not None:
        add_arguments(parser)
    values = vars(parser.parse_args(argv))
    own = {name: value for name, value in values.items() if name not in shared}
    return Options(**{name: values[name] for name in shared if name in values}), own


def main(
    make_system: Callable[..., System],
    argv: list[str] | None = None,
    add_arguments: AddArguments | None = None,
    run: Callable[[Any, Options], Result] = run,
) -> int:
    """Run the phases (``run``) on ``make_system(**the driver's own options)``; write the result."""
    options, own = parse_options(argv, add_arguments)
    harness.raise_on_sigterm()
    try:
        result = run(make_system(**own), options)
    except BenchError as exc:
        return harness.failed(exc)
    options.result.write_text(json.dumps(asdict(result)))
    return 0
