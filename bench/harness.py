"""What the bench scripts share: options, the database, Django, processes, run info, tables.

Standard library only at module level: bench/peers/common.py imports it in the peers'
virtualenvs, which lack django_jobs (procrastinate's lacks Django), so a function that
needs either imports it inside. The database is Django's default connection, unless a
function takes a DB-API cursor.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from argparse import ArgumentParser, Namespace
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
JOB_NAME = "demo.noop"
QUEUE = "default"
#: Keyed jobs (``--keyed``): the test project's keyed no-op (``concurrency=4`` a key), on
#: its queue, with this many jobs a key: a runjobs of two threads never holds four of a
#: key, so the key's limit never binds and what a drain shows is the keyed claim's cost.
KEYED_JOB_NAME = "demo.keyed_noop"
KEYED_QUEUE = "keyed"
KEYED_PER_KEY = 5


def keyed_key(number: int) -> str:
    """The concurrency key of keyed job ``number``: :data:`KEYED_PER_KEY` jobs a key."""
    return f"k{number // KEYED_PER_KEY}"


DATABASES = ("postgresql", "sqlite-wal")
#: MariaDB (or MySQL): a server of its own, for the benches that take it (bench/peers.py).
MARIADB = "mariadb"
SQLITE_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


class BenchError(RuntimeError):
    """A run that cannot go on; the script prints it as ``bench failed: ...`` and exits 1."""


# -- options ----------------------------------------------------------------------------


def option_parser(doc: str) -> ArgumentParser:
    """A parser described by the first paragraph of the script's docstring."""
    return ArgumentParser(description=doc.split("\n\n")[0])


def add_batch_option(parser: ArgumentParser, help: str = "jobs per schedule_jobs() call") -> None:
    parser.add_argument("--batch", type=int, default=500, help=help)


def add_database_option(
    parser: ArgumentParser, help: str | None = None, choices: Sequence[str] = DATABASES
) -> None:
    """``--database postgresql`` (the default) or ``sqlite-wal`` (or another of ``choices``)."""
    parser.add_argument("--database", choices=list(choices), default="postgresql", help=help)


def add_json_option(parser: ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")


def require_at_least_one(parser: ArgumentParser, args: Namespace, *names: str) -> None:
    """``--a, --b and --c must be at least 1``, a usage error, unless the options are."""
    if min(getattr(args, name) for name in names) < 1:
        flags = [f"--{name.replace('_', '-')}" for name in names]
        listed = " and ".join([", ".join(flags[:-1]), flags[-1]]) if flags[1:] else flags[0]
        parser.error(f"{listed} must be at least 1")


# -- the database's URL -----------------------------------------------------------------


def sqlite_url(path: Path, query: str = "") -> str:
    return f"sqlite:///{path}" + (f"?{query}" if query else "")


def temporary_sqlite_url(given: str, work_dir: Path) -> str:
    """``given``, or a new SQLite file in ``work_dir`` (keeping a SQLite URL's options)."""
    parts = urlsplit(given)
    if given and not parts.scheme.startswith("sqlite"):
        return given
    return sqlite_url(work_dir / "bench.sqlite3", parts.query)


def postgresql_url(script: str, what: str = "database") -> str:
    """``DATABASE_URL``, which must name PostgreSQL (``script`` sets it up)."""
    url = os.environ.get("DATABASE_URL", "")
    if urlsplit(url).scheme not in ("postgres", "postgresql"):
        raise BenchError(f"set DATABASE_URL to a PostgreSQL {what} (as {script})")
    return url


def mariadb_url(script: str, what: str = "database") -> str:
    """``DATABASE_URL``, which must name MariaDB or MySQL (``script`` sets it up)."""
    url = os.environ.get("DATABASE_URL", "")
    if urlsplit(url).scheme not in ("mysql", "mariadb"):
        raise BenchError(f"set DATABASE_URL to a MariaDB {what} (as {script})")
    return url


# -- Django -----------------------------------------------------------------------------


def configure_environment(url: str, **settings: str) -> None:
    """Environment for this process and the runjobs it starts; testproject/settings.py reads it."""
    django = {"DJANGO_SETTINGS_MODULE": "testproject.settings", "DEBUG": "false"}
    os.environ.update({"DATABASE_URL": url, **django, **settings})


def setup_django() -> None:
    """``django.setup()`` with the project's root importable (testproject, django_jobs)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def use_wal_journal() -> None:
    """Put a SQLite database in WAL journal mode (it stays with the file); others as they are."""
    from django.db import connection

    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=wal")


def delete_jobs() -> None:
    """Delete every attempt, dependency, job and batch, the other tables as they are."""
    from django.db import connection

    from django_jobs.models import Attempt, Batch, Job, JobDependency

    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for model in (Attempt, JobDependency, Job, Batch):
            cursor.execute(f"DELETE FROM {quote(model._meta.db_table)}")


def empty_tables() -> None:
    """Every django_jobs table emptied, its sequences reset (PostgreSQL: TRUNCATE)."""
    from django.apps import apps
    from django.core.management.color import no_style
    from django.db import connection

    models = apps.get_app_config("django_jobs").get_models()
    tables = sorted({model._meta.db_table for model in models if model._meta.managed})
    flush = connection.ops.sql_flush(no_style(), tables, reset_sequences=True)
    connection.ops.execute_sql_flush(flush)


def settle_database() -> None:
    """Fresh statistics, no dirty pages left over (ANALYZE, CHECKPOINT): each drain starts alike.

    SQLite checkpoints its WAL; MariaDB analyzes the tables (``ANALYZE TABLE``) alone."""
    from django.db import DatabaseError, connection

    from django_jobs.models import Attempt, Job

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return
        quote = connection.ops.quote_name
        analyze = "ANALYZE TABLE" if connection.vendor == "mysql" else "ANALYZE"
        for model in (Job, Attempt):
            cursor.execute(f"{analyze} {quote(model._meta.db_table)}")
        if connection.vendor == "mysql":
            return
        try:
            cursor.execute("CHECKPOINT")
        except DatabaseError as exc:  # needs superuser or pg_checkpoint
            log(f"no CHECKPOINT ({exc})")


def schedule_noop_jobs(count: int, batch: int) -> float:
    """``count`` no-op jobs through ``schedule_jobs()``, ``batch`` per call; the seconds taken."""
    from django_jobs.scheduling import JobSpec, schedule_jobs

    start = time.perf_counter()
    for first in range(0, count, batch):
        numbers = range(first, min(first + batch, count))
        schedule_jobs([JobSpec(JOB_NAME, {"n": number}) for number in numbers])
    return time.perf_counter() - start


def status_counts(name: str | None = None) -> dict[str, int]:
    """How many jobs (named ``name``, if given) are in each status."""
    from django.db.models import Count

    from django_jobs.models import Job

    jobs = Job.objects.all() if name is None else Job.objects.filter(name=name)
    return dict(jobs.order_by().values_list("status").annotate(count=Count("id")))


def unfinished() -> bool:
    """Whether a job is pending or running, each read by its partial index."""
    from django_jobs.models import Job, JobStatus

    jobs = Job.objects.order_by()
    return (
        jobs.filter(status=JobStatus.PENDING).exists()
        or jobs.filter(status=JobStatus.RUNNING).exists()
    )


def drain_span(total: int) -> tuple[datetime, datetime]:
    """First ``started_at`` and last ``finished_at`` of the no-op jobs, all ``total`` succeeded."""
    from django.db.models import Max, Min

    from django_jobs.models import Job, JobStatus

    statuses = status_counts(JOB_NAME)
    if statuses.get(JobStatus.SUCCEEDED, 0) != total or sum(statuses.values()) != total:
        raise BenchError(f"expected {total} succeeded jobs, found {statuses}")
    jobs = Job.objects.filter(name=JOB_NAME)
    span = jobs.aggregate(first=Min("started_at"), last=Max("finished_at"))
    if span["first"] is None or span["last"] is None:
        raise BenchError(f"the jobs carry no started_at or finished_at: {span}")
    return span["first"], span["last"]


# -- processes --------------------------------------------------------------------------


def runjobs_command(*arguments: str) -> list[str]:
    """``manage.py runjobs ARGUMENTS`` with this Python."""
    return [sys.executable, str(ROOT / "manage.py"), "runjobs", *arguments]


def start_process(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    """``command`` in the project's root, its output (both streams) in the file ``log``."""
    with open(log, "wb") as output:
        return subprocess.Popen(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)


def stop_processes(processes: Iterable[subprocess.Popen[bytes]], grace: float) -> None:
    """SIGTERM each live process by pid, then SIGKILL those not gone within ``grace`` seconds."""
    processes = list(processes)
    for process in processes:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def print_log_tail(path: Path, lines: int = 20) -> None:
    tail = "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    print(f"--- last lines of {path.name}:\n{tail}", file=sys.stderr)


def raise_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that what the bench started is stopped on the way out."""

    def handle(signum: int, frame: Any) -> NoReturn:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


@contextmanager
def work_directory(prefix: str = "django-jobs-bench.") -> Iterator[Path]:
    """A temporary folder for the logs and the SQLite files, deleted on the way out."""
    with tempfile.TemporaryDirectory(prefix=prefix) as name:
        yield Path(name)


# -- describing the run -----------------------------------------------------------------


def log(message: str) -> None:
    """A line of progress on stderr, so that stdout holds the report alone."""
    print(f"bench: {message}", file=sys.stderr, flush=True)


@contextmanager
def timed(what: str) -> Iterator[None]:
    """Log how long the block took: ``bench: WHAT: 1.2 s``."""
    start = time.perf_counter()
    yield
    log(f"{what}: {time.perf_counter() - start:.1f} s")


def heading(message: str) -> None:
    """A step of the run (a system, a shape, a round) on stderr."""
    print(f"== {message}", file=sys.stderr, flush=True)


def failed(exc: BenchError) -> int:
    """Say why the run stopped; the exit code."""
    print(f"bench failed: {exc}", file=sys.stderr)
    return 1


def short_version(version: str) -> str:
    """``15.18 (Debian 15.18-0+deb12u1)``: ``15.18``."""
    return version.split()[0]


def server_settings(cursor: Any, names: Sequence[str]) -> dict[str, str]:
    """PostgreSQL's settings ``names`` (``current_setting()``), through a DB-API cursor."""
    cursor.execute("SELECT " + ", ".join(f"current_setting('{name}')" for name in names))
    return {name: str(value) for name, value in zip(names, cursor.fetchone(), strict=True)}


def sqlite_settings(cursor: Any) -> dict[str, str]:
    """SQLite's version, journal mode and ``synchronous`` (a number), through a DB-API cursor."""
    cursor.execute(
        "SELECT sqlite_version(), (SELECT * FROM pragma_journal_mode),"
        " (SELECT * FROM pragma_synchronous)"
    )
    names = ("version", "journal_mode", "synchronous")
    return {name: str(value) for name, value in zip(names, cursor.fetchone(), strict=True)}


def describe_sqlite(cursor: Any) -> str:
    """A SQLite connection's version, journal mode and ``synchronous``, through a DB-API cursor."""
    settings = sqlite_settings(cursor)
    version = settings.pop("version")
    synchronous = int(settings["synchronous"])
    settings["synchronous"] = SQLITE_SYNCHRONOUS.get(synchronous, str(synchronous))
    return f"SQLite {version} ({format_settings(settings)})"


def durability() -> dict[str, str]:
    """PostgreSQL's ``fsync`` and ``synchronous_commit``, through Django's connection."""
    from django.db import connection

    with connection.cursor() as cursor:
        return server_settings(cursor, ("fsync", "synchronous_commit"))


def database_version() -> str:
    """The database as Django names it, with its version: ``PostgreSQL 15.18``."""
    from django.db import connection

    if connection.vendor == "sqlite":
        query = "SELECT sqlite_version()"
    elif connection.vendor == "mysql":
        query = "SELECT VERSION()"
    else:
        query = "SELECT current_setting('server_version')"
    with connection.cursor() as cursor:
        cursor.execute(query)
        (version,) = cursor.fetchone()
    return f"{connection.display_name} {short_version(str(version))}"


def format_settings(settings: dict[str, Any]) -> str:
    """``fsync=on, synchronous_commit=on``."""
    return ", ".join(f"{name}={value}" for name, value in settings.items())


def package_versions(*names: str) -> dict[str, str]:
    """Python's version, then each installed distribution's, by name."""
    return {"python": sys.version.split()[0], **{name: package_version(name) for name in names}}


def dbapi_package() -> str:
    """The DB-API package under Django's connection, by its distribution's name."""
    from django.db import connection

    return "mysqlclient" if connection.vendor == "mysql" else "psycopg"


def software() -> dict[str, Any]:
    """Python's, Django's and django-jobs' versions, and the machine's cores."""
    import django

    import django_jobs

    return {
        "python": sys.version.split()[0],
        "django": django.get_version(),
        "django_jobs": django_jobs.__version__,
        "cpus": os.cpu_count(),
    }


def software_line(info: dict[str, Any]) -> str:
    """``python 3.11.7, django 5.2.19, django-jobs 0.1.0, 2 cpus``, from :func:`run_info`."""
    return (
        f"python {info['python']}, django {info['django']}, django-jobs {info['django_jobs']},"
        f" {info['cpus']} cpus"
    )


def measured_at() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_info(bench: str, database: dict[str, Any], details: dict[str, Any]) -> dict[str, Any]:
    """What a JSON result opens with: the bench, when, the database, the software, the run."""
    return {"bench": bench, "measured_at": measured_at(), **database, **software(), **details}


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


# -- tables -----------------------------------------------------------------------------


def format_table(
    columns: Sequence[tuple[str, int]], rows: Iterable[Sequence[str]], align: str | None = None
) -> str:
    """A header and ``rows`` in fixed-width columns, (title, width) pairs, without trailing blanks.

    ``align``: ``<`` (left) or ``>`` (right) per column; by default the first left, the others
    right. A cell is never cut; a row's cells past the last column follow it, a space apart.
    """
    align = align or "<" + ">" * (len(columns) - 1)
    if len(align) != len(columns):
        raise ValueError(f"{len(columns)} columns, aligned as {align!r}")
    lines = []
    for row in [[title for title, _ in columns], *rows]:
        cells, extra = row[: len(columns)], row[len(columns) :]
        line = "".join(
            cell.ljust(width) if side == "<" else cell.rjust(width)
            for cell, (_, width), side in zip(cells, columns, align, strict=True)
        )
        lines.append(" ".join([line, *extra]).rstrip())
    return "\n".join(lines)
