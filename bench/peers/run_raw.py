"""The raw limits: django-jobs' statements with nothing around them; runs in the project's .venv.

Driven by bench/peers/common.py beside the peers, it measures what the
database allows for the statements the django-jobs driver sends, sent in
plain loops: no worker, no handler, no settler, no Django around the call.
The statements are the driver's own, never copies: each enqueue statement is
recorded (Django's ``execute_wrapper``) while ``schedule_job()`` or
``schedule_jobs()`` sends it once, and sent again as recorded; the drain's
texts come from the driver's builders (``claim_sql``) or from one call of
``claim_and_settle`` recorded the same way, its parameters from the driver's
builders (``claim_ctes``, ``settle_params``), checked once against what the
driver sent. When the driver changes, so does the raw loop.

- one-by-one enqueue: what one ``schedule_job()`` sends, on one connection in
  autocommit: on PostgreSQL one statement, the one-row INSERT with its
  ``pg_notify`` in the same statement, and its commit: one round trip a job;
- bulk enqueue: what one ``schedule_jobs()`` of ``--batch`` jobs sends, once
  per batch, each its own transaction: on PostgreSQL the ids' statement, a
  ``COPY`` of the same rows (a batch of 100 or more; below, one INSERT of one
  array per column) and the NOTIFY, in one transaction;
- drain, on PostgreSQL: each connection (a thread, with its own psycopg
  connection; psycopg lets go of the GIL while it waits) claims up to
  ``--claim-limit`` jobs with the driver's claim statement, runs nothing, and
  settles them as succeeded in its next claim (the driver's
  claim-and-settle statement, prepared on the server as the driver does),
  until the queue is empty. Each ``--connections`` count drains the same
  number of jobs (enqueued again in bulk, untimed, before each further drain);
- drain, on SQLite: the SQLite driver sends several statements per claim in a
  transaction (it has no one-statement claim), with parameters built inside
  the calls, so the loop calls the driver's ``claim`` and
  ``claim_and_settle`` themselves, on Django's connection (Python's sqlite3
  under Django's thin cursor wrapper), one thread per connection;
- drain, on MariaDB: the MySQL driver's claim is a locking read, an UPDATE and
  an INSERT, its settle a locking read and two UPDATEs, in one transaction,
  with parameters built inside the calls, so the loop calls the driver's
  ``claim_and_settle`` too, but the driver's statements go, unchanged, to a
  plain MySQLdb connection of the thread's own (Django's connection
  parameters, the driver's isolation level), out of autocommit, one COMMIT
  per call: no Django cursor or ``atomic()`` between the driver and the
  connection; each thread (MySQLdb lets go of the GIL while it waits) has one;
- pickup latency: not measured (``-``).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import common
import harness  # bench/harness.py, on the path once common is imported
from harness import JOB_NAME, QUEUE, BenchError
from raw_statements import Sender, Statement, only, record_schedule_jobs, recording

#: The owner of the statements sent only to record them.
RECORDING_OWNER = "raw-recording"
CONNECT_TIMEOUT_SECONDS = 10
SQLITE_TIMEOUT_SECONDS = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--connections", default="2,16", help="a drain per count, comma-separated (default 2,16)"
    )
    parser.add_argument("--claim-limit", type=int, default=2, help="jobs per claim statement")


@dataclass
class Span:
    """One connection's drain: when its first claim answered, when it was done, how many."""

    first: float | None = None
    done: float = 0.0
    claimed: int = 0
    error: BaseException | None = None


# -- the databases ---------------------------------------------------------------------


class PostgresLimit:
    """Raw psycopg loops of the PostgreSQL driver's statements."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.claim_and_settle_text = ""

    def connect(self) -> Any:
        """A plain psycopg connection to Django's database, with Django's adapters (as the
        driver's connection has) and psycopg's own cursor, which binds on the server (as the
        driver's ``hot_cursor``, and reads timestamps as it does: :meth:`session`); in
        autocommit, as Django's."""
        import psycopg
        from django.db import connection

        from django_jobs.db.prepared import NEVER_BY_COUNT

        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        # Django's params say prepare_threshold None, under which psycopg prepares nothing:
        # the driver's threshold, so that prepare=True prepares, as on the driver's connection.
        params["prepare_threshold"] = NEVER_BY_COUNT
        params.setdefault("connect_timeout", CONNECT_TIMEOUT_SECONDS)
        return psycopg.connect(**params, autocommit=True)

    def describe(self, connections: int, limit: int) -> str:
        return f"psycopg loop, {connections} conn., claims of {limit}"

    def record(self, request: Any) -> None:
        """The claim-and-settle text, from one call of the driver's (it settles nothing: the
        settlement it carries is fenced out); its parameters checked against the builders'."""
        settlement = succeeded(0, 0, request.owner, request.now)
        with recording() as statements:
            self.driver.claim_and_settle(request, [settlement])
        sent = only(statements, "claim_and_settle()")
        if sent.params != self.claim_and_settle_params(request, [settlement]):
            raise BenchError("claim_and_settle()'s parameters are not the raw loop's")
        self.claim_and_settle_text = sent.sql

    def claim_and_settle_params(self, request: Any, settlements: list[Any]) -> list[Any]:
        return [*self.driver.settle_params(settlements), *self.driver.claim_ctes(request)[1]]

    @contextmanager
    def session(self) -> Iterator[Callable[[Any, list[Any]], list[tuple[int, int]]]]:
        """A claim on a connection of its own: settle ``settlements``, claim; the (id, attempt)
        pairs claimed."""
        from django_jobs.db.postgresql import ClaimedOrSettledRow, ClaimedRow
        from django_jobs.db.prepared import read_times_in_c

        with self.connect() as connection, connection.cursor() as cursor:
            read_times_in_c(cursor)  # as the driver's hot cursor reads them

            def claim(request: Any, settlements: list[Any]) -> list[tuple[int, int]]:
                if not settlements:
                    sql, params = self.driver.claim_sql(request)
                    cursor.execute(sql, params, prepare=True)
                    return [row.pair for row in map(ClaimedRow.read, cursor)]
                params = self.claim_and_settle_params(request, settlements)
                cursor.execute(self.claim_and_settle_text, params, prepare=True)
                rows = list(map(ClaimedOrSettledRow.read, cursor))
                if sum(not row.claimed for row in rows) != len(settlements):
                    raise BenchError("a settlement was fenced out")
                return [row.job.pair for row in rows if row.claimed]

            yield claim

    @contextmanager
    def replayer(self) -> Iterator[Callable[[list[Statement]], None]]:
        with self.connect() as connection:
            sender = Sender(connection, "postgresql")
            try:
                yield sender.send
            finally:
                sender.close()


class SQLiteLimit:
    """Loops of the SQLite driver's own calls, and raw sqlite3 for the enqueues."""

    def __init__(self, driver: Any, path: str) -> None:
        self.driver = driver
        self.path = path

    def describe(self, connections: int, limit: int) -> str:
        return f"driver loop, {connections} conn., claims of {limit}"

    def record(self, request: Any) -> None:
        """Nothing to record: the loop calls the driver."""

    @contextmanager
    def session(self) -> Iterator[Callable[[Any, list[Any]], list[tuple[int, int]]]]:
        from django_jobs.db import DatabaseBusy

        def claim(request: Any, settlements: list[Any]) -> list[tuple[int, int]]:
            while True:
                try:
                    claimed, settled = self.driver.claim_and_settle(request, settlements)
                except DatabaseBusy:  # the worker keeps the outcomes and claims again
                    continue
                if settled.lost:
                    raise BenchError("a settlement was fenced out")
                return [job.pair for job in claimed]

        yield claim

    @contextmanager
    def replayer(self) -> Iterator[Callable[[list[Statement]], None]]:
        """Django's statements on a plain sqlite3 connection, with Django's busy timeout."""
        connection = sqlite3.connect(
            self.path, timeout=SQLITE_TIMEOUT_SECONDS, isolation_level=None
        )
        try:
            yield Sender(connection, "sqlite").send
        finally:
            connection.close()


class RawConnection:
    """Django's connection for all but the cursors: a plain MySQLdb connection's."""

    def __init__(self, django: Any, raw: Any) -> None:
        self.django = django
        self.raw = raw

    def cursor(self) -> Any:
        return self.raw.cursor()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.django, name)


def on_connection(driver: Any, raw: Any) -> Any:
    """A driver of ``driver``'s class whose statements go to ``raw``, a MySQLdb connection
    out of autocommit: each write transaction is committed (or rolled back) on it."""
    from django.db import connections

    class OnRawConnection(type(driver)):  # type: ignore[misc]
        @property
        def connection(self) -> Any:
            return RawConnection(connections[self.using], raw)

        @contextmanager
        def write_transaction(self) -> Iterator[None]:
            try:
                yield
            except BaseException:
                raw.rollback()
                raise
            raw.commit()

    return OnRawConnection(driver.using)


class MariaDBLimit:
    """Loops of the MariaDB driver's own calls, their statements on plain MySQLdb connections."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def describe(self, connections: int, limit: int) -> str:
        return f"MySQLdb loop, {connections} conn., claims of {limit}"

    def record(self, request: Any) -> None:
        """Nothing to record: the loop calls the driver."""

    def connect(self, autocommit: bool) -> Any:
        """A plain MySQLdb connection with Django's parameters (its converters, utf8mb4,
        ``FOUND_ROWS``, which the driver's row counts read) at the driver's isolation level."""
        import MySQLdb
        from django.db import connection

        raw = MySQLdb.connect(**connection.get_connection_params())
        level = self.driver.isolation_level().upper()
        with raw.cursor() as cursor:
            cursor.execute(f"SET SESSION TRANSACTION ISOLATION LEVEL {level}")
        raw.autocommit(autocommit)
        return raw

    @contextmanager
    def session(self) -> Iterator[Callable[[Any, list[Any]], list[tuple[int, int]]]]:
        raw = self.connect(autocommit=False)
        driver = on_connection(self.driver, raw)

        def claim(request: Any, settlements: list[Any]) -> list[tuple[int, int]]:
            claimed, settled = driver.claim_and_settle(request, settlements)
            if settled.lost:
                raise BenchError("a settlement was fenced out")
            return [job.pair for job in claimed]

        try:
            yield claim
        finally:
            raw.close()

    @contextmanager
    def replayer(self) -> Iterator[Callable[[list[Statement]], None]]:
        raw = self.connect(autocommit=True)
        sender = Sender(raw, "mysql")
        try:
            yield sender.send
        finally:
            sender.close()
            raw.close()


def succeeded(job_id: int, attempt: int, owner: str, now: Any) -> Any:
    """A no-op's success, as ``outcomes.decide`` writes it (its handler returned None)."""
    from django_jobs.db.records import Settlement
    from django_jobs.models import AttemptOutcome, JobStatus

    outcome, status = AttemptOutcome.SUCCEEDED, JobStatus.SUCCEEDED
    return Settlement(job_id, owner, attempt, outcome, status, now, finished_at=now, last_error="")


# -- the system ----------------------------------------------------------------------------


class Raw(common.System):
    name = "raw"

    def __init__(self, connections: str = "2,16", claim_limit: int = 2) -> None:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
        os.environ.setdefault("DEBUG", "false")
        from django.apps import apps

        if not apps.ready:  # (the tests' Django is set up already)
            harness.setup_django()
        from django.db import connection

        from django_jobs.conf import settings
        from django_jobs.db import get_driver

        self.connections = [int(count) for count in connections.split(",")]
        self.claim_limit = claim_limit
        self.lease_seconds = float(settings.LEASE_SECONDS)
        driver = get_driver()
        if connection.vendor == "sqlite":
            self.limit: Any = SQLiteLimit(driver, connection.settings_dict["NAME"])
            self.bulk_api = "Django's INSERT"
        elif connection.vendor == "mysql":
            self.limit = MariaDBLimit(driver)
            self.bulk_api = "the driver's INSERT"
        else:
            self.limit = PostgresLimit(driver)
            self.bulk_api = "the driver's COPY"
        self.workers = self.limit.describe(self.connections[0], claim_limit)
        self.one: list[Statement] = []
        self.many: dict[int, list[Statement]] = {}
        self.send: Callable[[list[Statement]], None] | None = None

    def versions(self) -> dict[str, str]:
        return harness.package_versions("django-jobs", "Django", harness.dbapi_package())

    def prepare(self) -> None:
        harness.migrate()

    def delete_jobs(self) -> None:
        harness.delete_jobs()

    def request(self, owner: str) -> Any:
        """A claim of up to ``--claim-limit`` jobs, now, for ``owner``."""
        from django.utils import timezone

        from django_jobs.db import ClaimRequest

        return ClaimRequest(QUEUE, owner, timezone.now(), self.lease_seconds, self.claim_limit)

    def record(self, options: common.Options) -> None:
        """What schedule_job() and schedule_jobs() send, for each batch size the run needs."""
        from django.db import connection

        from django_jobs import schedule_job

        connection.ensure_connection()  # not its set-up statements among schedule_job()'s
        with recording() as self.one:
            schedule_job(JOB_NAME, {"n": 0})
        sizes = {min(options.batch, options.jobs), options.jobs % options.batch} - {0}
        for size in sizes:
            self.many[size] = record_schedule_jobs(JOB_NAME, size)
        self.delete_jobs()
        self.limit.record(self.request(RECORDING_OWNER))

    def enqueue_one(self, number: int) -> None:
        assert self.send is not None
        self.send(self.one)

    def enqueue_many(self, numbers: range) -> None:
        assert self.send is not None
        self.send(self.many[len(numbers)])

    def enqueue_pickup(self, log: Any) -> None:
        raise NotImplementedError("the raw system measures no pickups")

    def drain_commands(self) -> list[list[str]]:
        return []  # it drains in this process (drain_threads)

    def idle_commands(self) -> list[list[str]]:
        return []

    def counts(self) -> tuple[int, int, int]:
        counts = harness.status_counts()
        succeeded = counts.pop("succeeded", 0)
        counts.pop("pending", 0)
        counts.pop("running", 0)
        return succeeded, succeeded, sum(counts.values())

    def unfinished(self) -> bool:
        return harness.unfinished()

    def describe_database(self) -> str | None:
        from django.db import connection

        if connection.vendor != "sqlite":
            return None
        with connection.cursor() as cursor:
            return harness.describe_sqlite(cursor)

    # -- the drain ---------------------------------------------------------------------

    def pending(self) -> bool:
        from django.utils import timezone

        from django_jobs.models import Job

        return Job.objects.due(timezone.now()).exists()

    def drain_on_one_connection(self, number: int, start: threading.Barrier, span: Span) -> None:
        """Claim and settle until nothing is due; ``span`` says when and how many."""
        owner = f"raw-{number}"
        try:
            with self.limit.session() as claim:
                start.wait()
                settlements: list[Any] = []
                while True:
                    request = self.request(owner)
                    pairs = claim(request, settlements)
                    if pairs and span.first is None:
                        span.first = time.perf_counter()
                    span.claimed += len(pairs)
                    now = request.now
                    settlements = [succeeded(job, attempt, owner, now) for job, attempt in pairs]
                    if not pairs and not self.pending():
                        break
                span.done = time.perf_counter()
        except BaseException as exc:
            span.error = exc
            start.abort()
        finally:
            from django.db import connections

            connections.close_all()  # this thread's

    def drain_threads(self, connections: int, timeout: float) -> tuple[float, float, int]:
        """Drain on ``connections`` threads: (start-up, drain seconds, jobs claimed)."""
        spans = [Span() for _ in range(connections)]
        # The start is read as the barrier lets the threads go, before any of them runs: read
        # after wait() returns, a thread scheduled first could claim before it.
        released: list[float] = []
        start = threading.Barrier(
            connections + 1, action=lambda: released.append(time.perf_counter())
        )
        drain = self.drain_on_one_connection
        threads = [
            threading.Thread(target=drain, args=(n, start, span), daemon=True)
            for n, span in enumerate(spans)
        ]
        for thread in threads:
            thread.start()
        try:
            start.wait(timeout)
        except threading.BrokenBarrierError:
            pass
        began = released[0] if released else time.perf_counter()
        for thread in threads:
            thread.join(max(0.0, began + timeout - time.perf_counter()))
        failed = [span.error for span in spans if span.error is not None]
        if failed:
            raise BenchError(f"a drain connection failed: {failed[0]!r}")
        if any(thread.is_alive() for thread in threads):
            raise BenchError(f"the drain on {connections} connections timed out")
        first = min(span.first for span in spans if span.first is not None)
        done = max(span.done for span in spans)
        return first - began, done - first, sum(span.claimed for span in spans)


def drain(system: Raw, connections: int, options: common.Options) -> tuple[float, float]:
    """(start-up, drain seconds) of the queued jobs on ``connections``; all must succeed."""
    start_up, seconds, claimed = system.drain_threads(connections, options.timeout)
    if claimed != options.jobs or not common.succeeded_all(system, options.jobs):
        raise BenchError(f"{connections} connections claimed {claimed} of {options.jobs} jobs")
    return start_up, seconds


def run(system: Raw, options: common.Options) -> common.Result:
    """The peers' phases, with the drain in this process once per connection count."""
    result = common.Result(system.name, system.versions(), system.workers, system.bulk_api)
    system.prepare()
    result.database = system.describe_database()
    system.record(options)
    with system.limit.replayer() as system.send:
        common.warm_up(system, options)
        result.bulk_rate = common.bulk_rate(system, options)
        result.one_by_one_rate = common.enqueue_one_by_one(system, options)
        for number, connections in enumerate(system.connections):
            if number:
                system.delete_jobs()
                common.enqueue_in_bulk(system, options)  # the same jobs again, untimed
            start_up, seconds = drain(system, connections, options)
            rate = options.jobs / seconds
            if number == 0:
                result.drain_start_up_seconds, result.drain_seconds = start_up, seconds
                result.drain_rate = rate
            else:
                result.drains[system.limit.describe(connections, system.claim_limit)] = rate
    system.delete_jobs()
    return result


if __name__ == "__main__":
    sys.exit(common.main(Raw, add_arguments=add_arguments, run=run))
