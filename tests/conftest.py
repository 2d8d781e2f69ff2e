from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
START = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def execute_held_on_a_thread(w: Any, claimed: Any, statuses: list[Any]) -> threading.Thread:
    """Run ``w.executor.execute(claimed)`` on a handler thread of its own, as the server does;
    its job status goes into ``statuses`` (None: not written there)."""

    def run() -> None:
        from django.db import connections

        try:
            written = w.executor.execute(claimed)
            statuses.append(None if written is None else written.status)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


#: marker -> (the driver's capability, the value the test needs, why it skips otherwise)
CAPABILITY_MARKERS = {
    "skip_locked": ("supports_skip_locked", True, "needs SELECT ... FOR UPDATE SKIP LOCKED"),
    "guarded_update": ("supports_skip_locked", False, "needs the guarded-update claimer"),
    "listen_notify": ("supports_listen", True, "needs LISTEN/NOTIFY"),
    "without_listen_notify": (
        "supports_listen",
        False,
        "needs a database without LISTEN/NOTIFY",
    ),
    "prepared_statements": (
        "prepares_statements",
        True,
        "needs a driver that prepares its statements on the server",
    ),
    "host_clock": ("clock_is_hosts", True, "needs a database whose clock is this host's (SQLite)"),
    "database_clock": (
        "clock_is_hosts",
        False,
        "needs a database with a clock of its own, apart from this host's",
    ),
    "overlapping_claims": (
        "claims_overlap",
        True,
        "needs claims of one queue that may be under way at once (PostgreSQL's)",
    ),
    "journal_modes": (
        "has_journal_modes",
        True,
        "needs a database file with journal modes (SQLite's WAL)",
    ),
}


PROCESSES = ROOT / "tests" / "processes"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/processes is a process test (the ``processes`` marker), as
    are the tooling tests marked so: scripts/test runs them in suites of their own."""
    for item in items:
        if PROCESSES in item.path.parents:
            item.add_marker(pytest.mark.processes)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker, (capability, wanted, why) in CAPABILITY_MARKERS.items():
        if item.get_closest_marker(marker):
            from django_jobs.db import driver_class

            if bool(getattr(driver_class("default"), capability)) != wanted:
                pytest.skip(why)
    if item.get_closest_marker("rolled_back_ddl"):
        from django.db import connection

        if not connection.features.can_rollback_ddl:
            pytest.skip(f"{connection.display_name} commits DDL at once: it cannot be rolled back")


@pytest.fixture
def clock():
    from django_jobs.testing import FakeClock

    return FakeClock(START)


@pytest.fixture
def clock_ahead():
    """The workers' clock a minute ahead of the host's, which ``schedule_job()`` reads: each
    job it enqueues is due to them. A module that needs it makes it its ``clock``::

        @pytest.fixture
        def clock(clock_ahead):
            return clock_ahead
    """
    from django.utils import timezone

    from django_jobs.testing import FakeClock

    return FakeClock(timezone.now() + timedelta(minutes=1))


@pytest.fixture
def worker(clock):
    from django_jobs.worker import Worker

    made: list[Worker] = []

    def make(**overrides: Any) -> Worker:
        options: dict[str, Any] = {
            "queues": {"default": 1},
            "clock": clock,
            "rng": random.Random(7),
            "owner": "test-worker",
        }
        options.update(overrides)
        made.append(Worker(options.pop("queues"), **options))
        return made[-1]

    yield make
    for w in made:
        w.inflight.close()  # the renewal thread's long-lived connection


@pytest.fixture
def make_job(clock):
    """Insert a Job row directly, as a hand-written or older row would be."""
    from django_jobs.models import Job

    def make(**overrides: Any) -> Job:
        values: dict[str, Any] = {
            "name": "tests.ok",
            "queue": "default",
            "payload": {},
            "run_at": clock.now(),
            "created_at": clock.now(),
            "max_attempts": 3,
        }
        values.update(overrides)
        return Job.objects.create(**values)

    return make


def manage(*args: str, url: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS`` in a subprocess, on ``url`` (default: the live test database),
    with ``env`` added to the environment; its output captured as text."""
    return subprocess.run(  # noqa: S603
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env={**os.environ, **database_env(), **({"DATABASE_URL": url} if url else {}), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# scripts/test sets this for the suite whose subprocesses reach PostgreSQL through a
# PgBouncer in transaction mode (scripts/pgbouncer.py): the test process itself, which
# creates and drops the test database, goes straight to the server.
PGBOUNCER_DIR = os.environ.get("JOBS_TEST_PGBOUNCER_DIR")


def pooler_port() -> int | None:
    """The port of the suite's PgBouncer, if its subprocesses go through one."""
    if not PGBOUNCER_DIR:
        return None
    url = (Path(PGBOUNCER_DIR) / "url").read_text().strip()
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def database_url(*, direct: bool = False) -> str:
    """A DATABASE_URL for the live (test) database, for subprocesses: on PostgreSQL
    through the suite's PgBouncer if it has one, unless ``direct``."""
    from django.db import connection

    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    user = settings.get("USER") or ""
    password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    scheme = "mysql" if connection.vendor == "mysql" else "postgres"
    port = settings["PORT"]
    if connection.vendor == "postgresql" and not direct:
        port = pooler_port() or port
    return f"{scheme}://{auth}{settings['HOST']}:{port}/{settings['NAME']}"


def database_env() -> dict[str, str]:
    """The environment that points a subprocess at the live (test) database: through the
    pooler, it LISTENs on a direct connection (the testproject's ``listen`` alias)."""
    env = {"DATABASE_URL": database_url()}
    if PGBOUNCER_DIR:
        env["LISTEN_DATABASE_URL"] = database_url(direct=True)
    return env


def release_pooled(database: str) -> None:
    """Have the suite's PgBouncer, if there is one, drop the server connections it keeps to
    ``database``: PostgreSQL refuses to drop a database in use."""
    if PGBOUNCER_DIR:
        script = str(ROOT / "scripts" / "pgbouncer.py")
        command = [sys.executable, script, "release", PGBOUNCER_DIR, database]
        subprocess.run(command, check=False, timeout=30)  # noqa: S603


@pytest.fixture(scope="session", autouse=True)
def _pooler_lets_go_of_the_test_database(request: pytest.FixtureRequest) -> Iterator[None]:
    if PGBOUNCER_DIR:
        request.getfixturevalue("django_db_setup")  # torn down after this one
    yield
    if PGBOUNCER_DIR:
        from django.db import connection

        release_pooled(connection.settings_dict["NAME"])


class StillRunning(subprocess.TimeoutExpired):
    """``wait(timeout)`` ran out: says what the process printed, as a failed assert would."""

    def __str__(self) -> str:
        return f"{super().__str__()}; its log:\n{self.output}"


class LoggedProcess(subprocess.Popen[bytes]):
    """A subprocess whose output goes to ``log_path``, shown with its threads' stacks when
    ``wait()`` times out."""

    log_path: Path

    def wait(self, timeout: float | None = None) -> int:
        """As Popen's; when ``timeout`` runs out, the process is aborted and the error says
        what each of its threads was doing (:meth:`stacks`): a test waits for a process
        that should end, and a hang seen once in CI must be readable from its report."""
        try:
            return super().wait(timeout)
        except subprocess.TimeoutExpired as expired:
            raise StillRunning(expired.cmd, expired.timeout, output=self.stacks()) from None

    def stacks(self, tail: int = 15) -> str:
        """What a process that should have exited was doing: what the database says its
        sessions wait for (:func:`database_waits`), then the process is aborted (SIGABRT)
        and Python's faulthandler (on in every process a test starts) writes every
        thread's stack to its output. The last ``tail`` lines of its log come first, then
        the stacks (:func:`thread_stacks`): a report which keeps only the first part of a
        failure keeps what matters."""
        waits = database_waits() if self.poll() is None else ""
        if self.poll() is None:
            os.kill(self.pid, signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                super().wait(5)
        log = self.log_path.read_text(errors="replace")
        start = log.find("Fatal Python error")
        if start < 0:
            return f"(no stacks written: exit status {self.returncode})\n{log}"
        before = log[:start].splitlines()[-tail:]
        return (
            f"the last {len(before)} lines of its log:\n"
            + "\n".join(before)
            + f"\n{waits}its threads' stacks:\n"
            + thread_stacks(log[start:])
        )


#: threading's frames under every thread's own: left out of the stacks.
THREADING_FRAME = re.compile(r"threading\.py\", line \d+ in (run|_bootstrap|_bootstrap_inner)$")
#: A thread whose innermost frame is in one of these waits for work: its stack is one line.
IDLE_FRAME = re.compile(r"(threading|selectors|queue)\.py\", line \d+ in \w+$")


def thread_stacks(written: str) -> str:
    """faulthandler's stacks (``written``) made short: the thread that took the signal (the
    main one) first, then every thread busy elsewhere, whole; a thread that waits for work
    is one line, named by its innermost frame of the app's code. threading's own
    frames go, and the repo's paths are made relative."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", written.strip())
    current: list[str] = []
    busy: list[str] = []
    idle: list[str] = []
    for block in blocks[1:]:  # blocks[0]: "Fatal Python error: Aborted"
        header, *frames = block.strip().splitlines()
        frames = [
            frame.replace(str(ROOT) + os.sep, "")
            for frame in frames
            if not THREADING_FRAME.search(frame)
        ]
        if header.startswith("Current thread"):
            current.append("\n".join([header, *frames]))
        elif frames and IDLE_FRAME.search(frames[0]):
            own = next((frame for frame in frames if "django_jobs" + os.sep in frame), frames[0])
            where = own.strip().removeprefix("File ")
            idle.append(f"{header.split(' (')[0]} waits for work, in {where}")
        else:
            busy.append("\n".join([header, *frames]))
    return "\n\n".join([*current, *busy, "\n".join(idle)])


def unfinished_jobs(most: int = 10) -> list[dict[str, Any]] | str:
    """The jobs not yet finished (at most ``most``), for the report of a process that
    hangs; why not, where the test cannot ask (no database access)."""
    try:
        from django_jobs.models import FINISHED_STATUSES, Job

        columns = ("id", "status", "lease_owner", "lease_expires_at", "attempts_used", "run_at")
        unfinished = Job.objects.exclude(status__in=FINISHED_STATUSES).order_by("id")
        return list(unfinished.values(*columns)[:most])
    except Exception as exc:  # noqa: BLE001 -- a report of a failure must not fail
        return f"unfinished jobs: not read ({type(exc).__name__}: {exc})"


def database_waits() -> str:
    """What the test database's server says its other sessions are doing, for the report
    of a process that hangs: on PostgreSQL each session's wait and the sessions that block
    it; on MariaDB each open transaction and the transactions it waits for, and the
    sessions at work outside a transaction. Empty where
    the test cannot ask (SQLite, or a test without database access)."""
    from django.db import connection

    queries = {
        "postgresql": (
            "SELECT pid, state, wait_event_type, wait_event, pg_blocking_pids(pid),"
            " round(extract(epoch FROM now() - xact_start)::numeric, 1), left(query, 300)"
            " FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ),
        # Each open transaction, with those it waits for; then each other session at work
        # outside one (waiting for a table's metadata lock, say).
        "mysql": (
            "SELECT t.trx_mysql_thread_id, t.trx_state, t.trx_started, t.trx_rows_locked,"
            " (SELECT GROUP_CONCAT(b.trx_mysql_thread_id) FROM"
            " information_schema.INNODB_LOCK_WAITS w JOIN information_schema.INNODB_TRX b"
            " ON b.trx_id = w.blocking_trx_id WHERE w.requesting_trx_id = t.trx_id),"
            " p.COMMAND, p.TIME, LEFT(COALESCE(t.trx_query, p.INFO), 300)"
            " FROM information_schema.INNODB_TRX t LEFT JOIN information_schema.PROCESSLIST p"
            " ON p.ID = t.trx_mysql_thread_id WHERE t.trx_mysql_thread_id <> CONNECTION_ID()"
            " UNION ALL SELECT p.ID, p.STATE, NULL, NULL, NULL, p.COMMAND, p.TIME,"
            " LEFT(p.INFO, 300) FROM information_schema.PROCESSLIST p"
            " WHERE p.COMMAND NOT IN ('Sleep', 'Daemon') AND p.ID <> CONNECTION_ID()"
            " AND p.ID NOT IN (SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX)"
        ),
    }
    sql = queries.get(connection.vendor)
    if sql is None:
        return ""
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql)
            rows = cursor.fetchall()
    except Exception as exc:  # noqa: BLE001 -- a report of a failure must not fail
        return f"the database's sessions: not read ({type(exc).__name__}: {exc})\n"
    listed = "\n".join("  " + " | ".join(str(value) for value in row) for row in rows)
    what = "sessions" if connection.vendor == "postgresql" else "transactions and sessions"
    return f"the database's {what} (the test's own left out):\n{listed or '  none'}\n"


class RunjobsProcesses:
    """Real ``manage.py runjobs`` subprocesses; every one is killed at teardown."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        project: Path = ROOT,
        command: str = "runjobs",
        start_new_session: bool = False,
        prefix: Sequence[str] = (),
    ) -> subprocess.Popen[bytes]:
        """``manage.py runjobs *args`` (or another ``command``) of ``project``, the test
        project unless told; ``start_new_session``: in a process group of its own, as a
        terminal starts a command (``os.killpg`` then signals it as Ctrl-C does);
        ``prefix``: run by way of it (``ip netns exec NAME``, which execs: the process's
        pid is the command's)."""
        environment = {
            **os.environ,
            **database_env(),
            "JOBS_LEASE_SECONDS": "5",
            "JOBS_POLL_SECONDS": "0.05",
            "JOBS_MAINTENANCE_SECONDS": "0.5",
            # A leader killed in a test is followed within 3 s.
            "JOBS_LEADER_LEASE_SECONDS": "3",
            "JOBS_RETRY_BASE_SECONDS": "0",
            "PYTHONUNBUFFERED": "1",
            "PYTHONFAULTHANDLER": "1",  # LoggedProcess.stacks()
            **(env or {}),
        }
        log_path = self.tmp_path / f"runjobs-{len(self.processes)}.log"
        log = open(log_path, "wb")  # noqa: SIM115
        process = LoggedProcess(
            [*prefix, sys.executable, str(project / "manage.py"), command, *args],
            cwd=project,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=start_new_session,
        )
        log.close()
        process.log_path = log_path
        self.processes.append(process)
        return process

    def finish(self, processes: Sequence[subprocess.Popen[bytes]], timeout: float) -> None:
        """Wait for ``processes`` to exit, all within ``timeout`` seconds together (below
        the test's own timeout, so that a hang is reported by :meth:`LoggedProcess.stacks`
        rather than cut off by pytest-timeout), and assert that each exited with 0."""
        deadline = time.monotonic() + timeout
        for process in processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except StillRunning as hung:
                hung.output = self.hang_report(processes, hung.output)
                raise
            assert process.returncode == 0, self.log(process)

    def hang_report(
        self, processes: Sequence[subprocess.Popen[bytes]], stacks: str, tail: int = 3
    ) -> str:
        """The report of processes that did not exit, ``stacks`` those of the first: it
        leads with the jobs the database holds unfinished and the last lines of each
        process still running; then the stacks of those holding a running job (a burst
        worker waits for a job another one holds), then ``stacks``."""
        running = [process for process in processes if process.poll() is None]
        lines = [f"{len(running)} more of {len(processes)} process(es) still running"]
        jobs = unfinished_jobs()
        if isinstance(jobs, str):
            lines.append(jobs)
            jobs = []
        lines += [f"unfinished: {job}" for job in jobs] or ["no job unfinished"]
        for process in running:
            last = self.log(process).splitlines()[-tail:]
            lines += [f"pid {process.pid}, its last lines:", *(f"  {line}" for line in last)]
        # A lease's owner is "host:pid:token".
        holders = {str(job["lease_owner"]).rsplit(":", 2)[-2] for job in jobs if job["lease_owner"]}
        for process in running:
            if str(process.pid) in holders and isinstance(process, LoggedProcess):
                lines += [f"pid {process.pid} holds a job:", process.stacks()]
        return "\n".join([*lines, stacks])

    def log(self, process: subprocess.Popen[bytes]) -> str:
        index = self.processes.index(process)
        return (self.tmp_path / f"runjobs-{index}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(10)


@pytest.fixture
def runjobs_process(tmp_path: Path) -> Iterator[RunjobsProcesses]:
    processes = RunjobsProcesses(tmp_path)
    try:
        yield processes
    finally:
        processes.stop_all()


@pytest.fixture
def fresh_database_url(tmp_path: Path) -> Iterator[str]:
    """A DATABASE_URL of an empty database on the server the tests use (needs
    ``django_db(transaction=True)`` on PostgreSQL, where it is created)."""
    from django.db import connection

    if connection.vendor == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
        return
    name = f"jobs_fresh_{secrets.token_hex(4)}"
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {qn(name)}")
    try:
        yield database_url().rsplit("/", 1)[0] + f"/{name}"
    finally:
        release_pooled(name)
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE {qn(name)}")


@pytest.fixture(autouse=True, scope="session")
def _register_test_jobs() -> None:
    import tests.support.jobs  # noqa: F401


@pytest.fixture(autouse=True)
def _drivers_forget_the_flushed_queues() -> Iterator[None]:
    """Each test's database starts empty: what a driver's flow control kept of the last
    one's queue rows (the starts of a rate window counted ahead) does not hold there."""
    yield
    from django_jobs.db import _drivers

    for driver in list(_drivers.values()):
        driver.flow.forget()


@pytest.fixture
def project_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str, str], None]]:
    """``write(name, text)``: a module of the project's own (not a test module: see
    ``django_jobs.reach``), importable; forgotten after the test, with the jobs it
    registered. Give a task's module a name of its test's: a task's path stays declared."""
    from django_jobs.registry import unreached_jobs, unregister

    monkeypatch.syspath_prepend(str(tmp_path))
    packages: set[str] = set()

    def write(name: str, text: str) -> None:
        parts = name.split(".")
        for depth in range(1, len(parts)):
            package = tmp_path.joinpath(*parts[:depth])
            package.mkdir(exist_ok=True)
            (package / "__init__.py").touch()
        tmp_path.joinpath(*parts[:-1], f"{parts[-1]}.py").write_text(dedent(text))
        packages.add(parts[0])
        importlib.invalidate_caches()

    yield write
    for name, module in unreached_jobs():
        if module.split(".")[0] in packages:
            unregister(name)
    for name in [name for name in sys.modules if name.split(".")[0] in packages]:
        del sys.modules[name]


@pytest.fixture
def staff_client(client: Any, django_user_model: Any) -> Callable[..., Any]:
    """Log ``client`` in as a staff user who has only the given django_jobs permissions."""
    from django.contrib.auth.models import Permission

    def login(*codenames: str) -> Any:
        user = django_user_model.objects.create_user(  # one user per set: a test may make two
            "staff-" + "-".join(codenames), password="unused", is_staff=True
        )
        permissions = Permission.objects.filter(
            content_type__app_label="django_jobs", codename__in=codenames
        )
        assert permissions.count() == len(codenames)
        user.user_permissions.set(permissions)
        client.force_login(user)
        return client

    return login


def jobs(*args: str) -> str:
    """``manage.py jobs ARGS`` in this process at START; its output."""
    from django.core.management import call_command
    from freezegun import freeze_time

    out = io.StringIO()
    with freeze_time(START):
        call_command("jobs", *args, stdout=out)
    return out.getvalue()


def jobs_json(*args: str) -> Any:
    return json.loads(jobs(*args, "--json"))


def by_queue(document: Any) -> dict[str, dict[str, Any]]:
    """``jobs status --json``'s queues by name."""
    return {row["queue"]: row for row in document["queues"]}
