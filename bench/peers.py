#!/usr/bin/env python
"""Peers benchmark: django-jobs beside django-tasks-db, procrastinate and the raw limits.

    bash scripts/bench-peers                      # sets up the virtualenvs and the server
    DATABASE_URL=postgres://... python bench/peers.py --jobs 2000 --only procrastinate
    python bench/peers.py --database sqlite-wal   # django-jobs and django-tasks-db on SQLite
    DATABASE_URL=mysql://... python bench/peers.py --database mariadb

``--database postgresql`` (the default): each system gets a fresh database of
its own on the server ``DATABASE_URL`` names (``bench_django_jobs``, ...:
dropped and created again). ``--database sqlite-wal``: django-jobs and
django-tasks-db each get a new SQLite file of their own in a temporary
directory, put in WAL journal mode before the run (``DATABASE_URL`` is not
read); procrastinate, which needs PostgreSQL, is skipped. ``--database
mariadb``: each system gets a fresh database of its own on the MariaDB (or
MySQL) server ``DATABASE_URL`` names, as on PostgreSQL, in utf8mb4;
procrastinate is skipped.

``raw`` is not a queue but the limit of the database for django-jobs' own
statements (bench/peers/run_raw.py): the driver's INSERT sent again in a
plain loop, and its claim-and-settle statement in plain loops on
``--django-jobs-processes`` x ``--django-jobs-workers`` connections, and on
16 (on SQLite: 1 and 2), with no handler (on SQLite and MariaDB the
driver's own claim-and-settle call, its statements sent on a plain
connection). The report gives django-jobs'
drain as a fraction of the raw drains, and its one-by-one enqueue as a
multiple of the raw INSERT's time per job.

Each system runs in its own virtualenv, through a driver in bench/peers/ that
measures, with the same shape for every system (see bench/peers/common.py):

- bulk enqueue, jobs/s: ``--jobs`` no-op jobs in calls of ``--batch``;
- one-by-one enqueue, jobs/s: ``--jobs`` calls, each its own transaction;
- drain, jobs/s: those jobs, from the first pickup until all have succeeded;
- pickup latency of an idle worker: enqueue commit to handler start, p50 and
  p90 of ``--pickups`` jobs enqueued one at a time (on SQLite and MariaDB,
  which have no LISTEN, both systems poll, once a second).

django-jobs runs ``runjobs --workers 2`` by default; ``--django-jobs-processes N
--django-jobs-workers T`` run ``runjobs --processes N --workers T`` instead
(``--processes`` is passed only when N > 1).

``--rounds N`` runs the sitting N times, each round's order turned by one
system (the first runs last in the second round, ...), so that neither its
place in the order nor the machine's drift over the sitting favours a system:
each round's table, then each system's drains round by round with their
median, and each limited variant's drain as a fraction of the plain drain of
its own round.

``--keep DIR`` keeps each round's logs (the drivers' and their workers', each
system's ``result.json``) under ``DIR/round-N/SYSTEM/``, where they would go
with the temporary folder: a round that falls out of line can be read
afterwards. On a PostgreSQL server that loads ``pg_stat_statements``
(``PGSERVER_PRELOAD=pg_stat_statements bash scripts/bench-peers ...``), each
system's directory also gets ``statements.tsv``: the statements its run sent
to its database, the costliest first.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import harness
from harness import ROOT, BenchError

DRIVERS = ROOT / "bench" / "peers"
ENVS = ROOT / "bench" / ".envs"
STOP_GRACE_SECONDS = 30.0
#: The raw drain's second count of connections, besides django-jobs' threads (SQLite: 1, 2).
RAW_MANY_CONNECTIONS = 16
#: The rate limit of the variant whose limit binds: below every database's drain here.
BINDING_RATE = "500/s"
SQLITE_RAW_CONNECTIONS = (1, 2)


@dataclass(frozen=True)
class Peer:
    name: str
    python: Path
    driver: str
    #: the database's name on the server, and the SQLite file's stem
    database: str
    postgresql_only: bool = False
    #: the driver's own arguments, from the bench's options
    arguments: Callable[[Options], list[str]] = field(default=lambda options: [])
    #: django-jobs under a limit: run with --limits, or when --only names it
    variant: bool = False
    #: a peer set up another way: run with --peer-defaults, or when --only names it
    peer_variant: bool = False


def django_jobs_arguments(options: Options) -> list[str]:
    """run_django_jobs.py's: the runjobs shape."""
    return [
        *("--processes", str(options.django_jobs_processes)),
        *("--workers", str(options.django_jobs_workers)),
    ]


def raw_connections(options: Options) -> list[int]:
    """The raw drains' connection counts: as many as django-jobs' handler threads, and 16."""
    if options.sqlite:
        return list(SQLITE_RAW_CONNECTIONS)
    threads = options.django_jobs_processes * options.django_jobs_workers
    return sorted({threads, RAW_MANY_CONNECTIONS}, key=lambda count: count != threads)


def raw_arguments(options: Options) -> list[str]:
    """run_raw.py's: its drains' connections, and claims as large as a runjobs process's."""
    connections = ",".join(str(count) for count in raw_connections(options))
    return ["--connections", connections, "--claim-limit", str(options.django_jobs_workers)]


PEERS = [
    Peer(
        "django-jobs",
        ROOT / ".venv/bin/python",
        "run_django_jobs.py",
        "bench_django_jobs",
        arguments=django_jobs_arguments,
    ),
    # django-jobs again with a limit configured that never binds: the cost of the limited
    # claim (--limits, or --only NAME).
    Peer(
        "django-jobs+global_limit",
        ROOT / ".venv/bin/python",
        "run_django_jobs.py",
        "bench_django_jobs_global",
        arguments=lambda options: [*django_jobs_arguments(options), "--global-limit", "1000"],
        variant=True,
    ),
    Peer(
        "django-jobs+rate_limit",
        ROOT / ".venv/bin/python",
        "run_django_jobs.py",
        "bench_django_jobs_rate",
        arguments=lambda options: [*django_jobs_arguments(options), "--rate-limit", "1000000/s"],
        variant=True,
    ),
    # ... a per-key concurrency that never binds (the keyed claim's cost), on a queue of
    # its own; and a rate limit that binds: the drain held at it.
    Peer(
        "django-jobs+keyed",
        ROOT / ".venv/bin/python",
        "run_django_jobs.py",
        "bench_django_jobs_keyed",
        arguments=lambda options: [*django_jobs_arguments(options), "--keyed"],
        variant=True,
    ),
    Peer(
        "django-jobs+rate_binds",
        ROOT / ".venv/bin/python",
        "run_django_jobs.py",
        "bench_django_jobs_binding",
        arguments=lambda options: [
            *django_jobs_arguments(options),
            *("--rate-limit", BINDING_RATE, "--label", "django-jobs+rate_binds"),
        ],
        variant=True,
    ),
    Peer("django-tasks-db", ENVS / "tasks-db/bin/python", "run_tasks_db.py", "bench_tasks_db"),
    # The peer as its documentation has a user run it: plain db_worker, Django's
    # CONN_MAX_AGE (--peer-defaults, or when --only names it).
    Peer(
        "django-tasks-db-defaults",
        ENVS / "tasks-db/bin/python",
        "run_tasks_db.py",
        "bench_tasks_db_defaults",
        arguments=lambda options: ["--defaults"],
        peer_variant=True,
    ),
    Peer(
        "procrastinate",
        ENVS / "procrastinate/bin/python",
        "run_procrastinate.py",
        "bench_procrastinate",
        postgresql_only=True,
    ),
    Peer("raw", ROOT / ".venv/bin/python", "run_raw.py", "bench_raw", arguments=raw_arguments),
]
PEERS_BY_NAME = {peer.name: peer for peer in PEERS}
#: django-jobs under a limit: not a peer to measure django-jobs against.
VARIANTS = tuple(peer.name for peer in PEERS if peer.variant)


@dataclass(frozen=True)
class Options:
    jobs: int
    pickups: int
    batch: int
    timeout: float
    only: str | None
    database: str
    django_jobs_processes: int
    django_jobs_workers: int
    limits: bool = False
    peer_defaults: bool = False
    rounds: int = 1
    keep: Path | None = None

    @property
    def sqlite(self) -> bool:
        return self.database == "sqlite-wal"

    @property
    def postgresql(self) -> bool:
        return self.database == "postgresql"

    @property
    def mariadb(self) -> bool:
        return self.database == harness.MARIADB


def parse_options(argv: list[str] | None = None) -> Options:
    parser = harness.option_parser(__doc__)
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs to enqueue and drain")
    parser.add_argument("--pickups", type=int, default=30, help="jobs for the pickup latency")
    harness.add_batch_option(parser, "jobs per bulk enqueue call")
    parser.add_argument("--timeout", type=float, default=900.0, help="per system (seconds)")
    parser.add_argument("--only", choices=list(PEERS_BY_NAME), help="one system")
    harness.add_database_option(
        parser,
        "PostgreSQL (DATABASE_URL), a SQLite file per system in WAL mode, or MariaDB"
        " (DATABASE_URL)",
        choices=(*harness.DATABASES, harness.MARIADB),
    )
    parser.add_argument(
        "--limits",
        action="store_true",
        help="django-jobs also with a global limit and with a rate limit that never bind",
    )
    parser.add_argument(
        "--peer-defaults",
        action="store_true",
        help="django-tasks-db also as its documentation runs it (db_worker, CONN_MAX_AGE 0)",
    )
    parser.add_argument(
        "--django-jobs-processes", type=int, default=1, help="runjobs --processes (default 1)"
    )
    parser.add_argument(
        "--django-jobs-workers", type=int, default=2, help="runjobs --workers (default 2)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the sitting this many times, the order turned by one system each round",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep each round's logs under DIR/round-N/ (and per-system statements, where"
        " the server has pg_stat_statements)",
    )
    args = parser.parse_args(argv)
    if min(args.jobs, args.batch, args.rounds) < 1 or args.pickups < 0:
        parser.error("--jobs, --batch and --rounds must be at least 1, --pickups at least 0")
    if min(args.django_jobs_processes, args.django_jobs_workers) < 1:
        parser.error("--django-jobs-processes and --django-jobs-workers must be at least 1")
    options = Options(**vars(args))
    if options.only and not options.postgresql and PEERS_BY_NAME[options.only].postgresql_only:
        parser.error(
            f"{options.only} runs on PostgreSQL only, not with --database {options.database}"
        )
    return options


def choose_peers(options: Options) -> tuple[list[Peer], list[Peer]]:
    """The peers to run, and those skipped because they cannot run on the database."""
    peers = [
        peer
        for peer in PEERS
        if options.only == peer.name
        or (options.only in (None, "django-jobs") and peer.variant and options.limits)
        or (
            options.only in (None, "django-tasks-db")
            and peer.peer_variant
            and options.peer_defaults
        )
        or (options.only is None and not peer.variant and not peer.peer_variant)
    ]
    skipped = [peer for peer in peers if not options.postgresql and peer.postgresql_only]
    return [peer for peer in peers if peer not in skipped], skipped


# -- the server -----------------------------------------------------------------


def server_url(options: Options) -> str:
    """The server the databases are made on (``DATABASE_URL``): PostgreSQL or MariaDB."""
    given = harness.mariadb_url if options.mariadb else harness.postgresql_url
    try:
        return given("scripts/bench-peers", "server")
    except BenchError as exc:
        sys.exit(f"bench/peers.py: {exc}")


def database_url(url: str, database: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


def create_database(url: str, database: str) -> None:
    """Drop ``database`` if it exists and create it empty, then checkpoint.

    The checkpoint writes out what the previous system left dirty, so that its
    writes are not spread over the next system's run.
    """
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as connection:
        name = sql.Identifier(database)
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        connection.execute(sql.SQL("CREATE DATABASE {}").format(name))
        connection.execute("CHECKPOINT")


def vacuum_database(url: str) -> None:
    """VACUUM a PostgreSQL database a system has finished with, then checkpoint.

    Its drain and its deletes leave tens of thousands of dead rows; left to
    autovacuum, they are cleaned up while the next system runs, on the same cores
    and the same WAL, and the system that runs after a fast drain pays for it.
    """
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("VACUUM")
        connection.execute("CHECKPOINT")


#: The columns of ``statements.tsv``: a statement's calls, its time on the server (total
#: and mean, ms), its rows, its WAL records and bytes, and the text's start.
STATEMENT_COLUMNS = ("calls", "total_ms", "mean_ms", "rows", "wal_records", "wal_bytes", "query")


def statements_reset(url: str) -> bool:
    """Forget ``pg_stat_statements``' counts of the database ``url`` names, before a system
    runs on it; False (nothing done) where the server does not load the module."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        loaded = connection.execute("SHOW shared_preload_libraries").fetchone()
        if loaded is None or "pg_stat_statements" not in loaded[0]:
            return False
        connection.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        connection.execute(
            "SELECT pg_stat_statements_reset(0, d.oid, 0) FROM pg_database d"
            " WHERE d.datname = current_database()"
        )
    return True


def statements_write(url: str, path: Path, most: int = 40) -> None:
    """The ``most`` statements a system sent to its database, the costliest first, as
    tab-separated lines under a header (:data:`STATEMENT_COLUMNS`)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT s.calls, round(s.total_exec_time::numeric, 1),"
            " round(s.mean_exec_time::numeric, 3), s.rows, s.wal_records, s.wal_bytes,"
            " left(regexp_replace(s.query, '\\s+', ' ', 'g'), 200)"
            " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
            " WHERE d.datname = current_database() ORDER BY s.total_exec_time DESC LIMIT %s",
            [most],
        ).fetchall()
    lines = ["\t".join(STATEMENT_COLUMNS)]
    lines += ["\t".join(str(value) for value in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")


def keep_round(work_dir: Path, keep: Path, index: int) -> Path:
    """Copy a round's folder, but its SQLite files, to ``keep/round-N``; that path."""
    import shutil

    kept = keep / f"round-{index + 1}"
    shutil.copytree(work_dir, kept, ignore=shutil.ignore_patterns("*.sqlite3*"))
    return kept


def server_description(url: str) -> str:
    if urlsplit(url).scheme in ("mysql", "mariadb"):
        return mariadb_description(url)
    import psycopg

    names = ("server_version", "fsync", "synchronous_commit")
    with psycopg.connect(url) as connection, connection.cursor() as cursor:
        settings = harness.server_settings(cursor, names)
    return f"PostgreSQL {settings.pop('server_version')} ({harness.format_settings(settings)})"


# -- MariaDB ------------------------------------------------------------------------

#: What makes a MariaDB commit durable, for the report's first line.
MARIADB_SETTINGS = ("innodb_flush_log_at_trx_commit", "innodb_doublewrite", "log_bin")
#: Those of them that are on or off (the server says 1 or 0).
MARIADB_SWITCHES = {"innodb_doublewrite", "log_bin"}


def mariadb_connect(url: str) -> Any:
    """A MySQLdb connection to the server ``url`` names (no database chosen), in utf8mb4."""
    import MySQLdb

    parts = urlsplit(url)
    return MySQLdb.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        charset="utf8mb4",
        autocommit=True,
    )


def create_mariadb_database(url: str, database: str) -> None:
    """Drop ``database`` if it exists and create it empty, in utf8mb4 (MariaDB has no
    CHECKPOINT: InnoDB writes its dirty pages out in the background)."""
    connection = mariadb_connect(url)
    try:
        cursor = connection.cursor()
        name = f"`{database.replace('`', '``')}`"
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        cursor.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    finally:
        connection.close()


def mariadb_description(url: str) -> str:
    """The server's version and its durability settings (:func:`describe_mariadb`)."""
    connection = mariadb_connect(url)
    try:
        cursor = connection.cursor()
        names = ("version", *MARIADB_SETTINGS)
        cursor.execute("SELECT " + ", ".join(f"@@{name}" for name in names))
        version, *values = cursor.fetchone()
    finally:
        connection.close()
    return describe_mariadb(str(version), values)


def describe_mariadb(version: str, values: list[Any]) -> str:
    """``MariaDB 10.11.6 (innodb_flush_log_at_trx_commit=1, ...)``, from ``@@version`` and
    the values of :data:`MARIADB_SETTINGS`."""
    settings = {
        name: ("ON" if int(value) else "OFF") if name in MARIADB_SWITCHES else str(value)
        for name, value in zip(MARIADB_SETTINGS, values, strict=True)
    }
    server = "MariaDB" if "mariadb" in version.lower() else "MySQL"
    return f"{server} {version.split('-')[0]} ({harness.format_settings(settings)})"


# -- SQLite ---------------------------------------------------------------------------


def create_sqlite_database(path: Path) -> str:
    """A new SQLite file at ``path`` in WAL journal mode (the mode stays with the file); its URL."""
    if path.exists():
        raise BenchError(f"{path} exists already")
    connection = sqlite3.connect(path)
    try:
        (journal_mode,) = connection.execute("PRAGMA journal_mode=WAL").fetchone()
    finally:
        connection.close()
    if journal_mode != "wal":
        raise BenchError(f"{path} is in journal mode {journal_mode}, not wal")
    return harness.sqlite_url(path.resolve())


def sqlite_description(results: list[dict[str, Any]]) -> str:
    """The SQLite files' settings, as the drivers saw them: once if they agree."""
    seen = {result["system"]: result.get("database") or "SQLite" for result in results}
    if not seen:
        return "SQLite in WAL mode"
    if len(set(seen.values())) == 1:
        return f"{next(iter(seen.values()))}, a file per system"
    return "; ".join(f"{system}: {database}" for system, database in seen.items())


# -- running a driver -------------------------------------------------------------


def prepare_database(peer: Peer, options: Options, server: str | None, log_dir: Path) -> str:
    """A fresh, empty database for ``peer``; its URL."""
    if options.sqlite:
        return create_sqlite_database(log_dir / f"{peer.database}.sqlite3")
    if server is None:
        raise BenchError("no server to create the database on")
    if options.mariadb:
        create_mariadb_database(server, peer.database)
    else:
        create_database(server, peer.database)
    return database_url(server, peer.database)


def run_peer(
    peer: Peer, options: Options, server: str | None, work_dir: Path
) -> dict[str, Any] | None:
    """Run ``peer``'s driver in its virtualenv; its result, or None if it failed."""
    if not peer.python.exists():
        print(f"{peer.name}: no virtualenv at {peer.python} (run scripts/bench-peers)")
        return None
    log_dir = work_dir / peer.name.replace("+", "-")  # a "+" in a SQLite URL reads as a space
    log_dir.mkdir()
    url = prepare_database(peer, options, server, log_dir)
    result = log_dir / "result.json"
    command = [str(peer.python), str(DRIVERS / peer.driver), "--jobs", str(options.jobs)]
    command += ["--pickups", str(options.pickups), "--batch", str(options.batch)]
    command += ["--timeout", str(options.timeout), "--log-dir", str(log_dir)]
    command += ["--result", str(result), *peer.arguments(options)]
    env = {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}
    harness.heading(peer.name)
    counting = options.postgresql and statements_reset(url)
    process = subprocess.Popen(command, cwd=ROOT, env=env)
    try:
        # Enqueues and pickups take far less than a drain; the drain has its own timeout.
        code = process.wait(options.timeout * 2)
    except subprocess.TimeoutExpired:
        print(f"{peer.name}: timed out", file=sys.stderr)
        code = None
    finally:
        harness.stop_processes([process], STOP_GRACE_SECONDS)  # it stops its own workers
    if counting:
        statements_write(url, log_dir / "statements.tsv")
    if options.postgresql:
        vacuum_database(url)  # before the next system starts, not during its run
    if code != 0 or not result.exists():
        print(f"{peer.name}: the driver failed (exit code {code})", file=sys.stderr)
        return None
    data: dict[str, Any] = json.loads(result.read_text())
    return data


# -- the report -------------------------------------------------------------------

COLUMNS = [
    ("system", 26),
    ("workers", 36),
    ("bulk enqueue/s", 30),
    ("1-by-1 enqueue/s", 17),
    ("drain jobs/s", 13),
    ("start-up s", 11),
    ("pickup p50", 11),
    ("p90", 9),
]


def rate(value: float | None) -> str:
    return "none" if value is None else f"{value:,.0f}"


def milliseconds(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f} ms"


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    """A system's row, and a row under it for each further drain (the raw system's)."""
    bulk = rate(result["bulk_rate"])
    if result["bulk_api"]:
        bulk = f"{bulk} ({result['bulk_api']})"
    row = [
        result["system"],
        result["workers"],
        bulk,
        rate(result["one_by_one_rate"]),
        rate(result["drain_rate"]),
        f"{result['drain_start_up_seconds']:.2f}",
        milliseconds(result["pickup_p50"]),
        milliseconds(result["pickup_p90"]),
    ]
    drains = result.get("drains") or {}
    return [row] + [["", how, "", "", rate(value), "", "", ""] for how, value in drains.items()]


def limit_lines(results: list[dict[str, Any]]) -> list[str]:
    """django-jobs against the raw limits and the fastest peer, when the run has them."""
    by_system = {result["system"]: result for result in results}
    ours, raw = by_system.get("django-jobs"), by_system.get("raw")
    if ours is None:
        return []
    lines = []
    if raw is not None:
        enqueue = raw["one_by_one_rate"] / ours["one_by_one_rate"]
        lines.append(
            f"  1-by-1 enqueue: {enqueue:.2f}x the raw INSERT's time per job"
            " (what schedule_job() sends, with its commit, in a plain loop)"
        )
        drains = {raw["workers"]: raw["drain_rate"], **(raw.get("drains") or {})}
        fractions = ", ".join(
            f"{ours['drain_rate'] / value:.2f} of raw's ({how})" for how, value in drains.items()
        )
        lines.append(f"  drain: {fractions}")
    peers = [r for r in results if r["system"] not in ("django-jobs", "raw", *VARIANTS)]
    if peers:
        fastest = max(peers, key=lambda result: result["one_by_one_rate"])
        ratio = ours["one_by_one_rate"] / fastest["one_by_one_rate"]
        lines.append(
            f"  1-by-1 enqueue: {ratio:.2f}x the rate of the fastest peer ({fastest['system']})"
        )
    return ["django-jobs against the limits:", *lines] if lines else []


def skipped_line(peer: Peer) -> str:
    return f"{peer.name}: skipped, it runs on PostgreSQL only"


def print_report(
    results: list[dict[str, Any]], description: str, options: Options, skipped: list[Peer]
) -> None:
    print(f"\n{description}; {os.cpu_count()} cpus")
    print(
        f"{options.jobs:,} no-op jobs; bulk calls of {options.batch};"
        f" pickup latency over {options.pickups} jobs"
    )
    rows = [row for result in results for row in table_rows(result)]
    print(harness.format_table(COLUMNS, rows, align="<" * len(COLUMNS)))
    for line in limit_lines(results):
        print(line)
    print("versions:")
    for result in results:
        versions = ", ".join(f"{name} {version}" for name, version in result["versions"].items())
        print(f"  {result['system']}: {versions}")
    for peer in skipped:
        print(skipped_line(peer))


def round_order(peers: list[Peer], index: int) -> list[Peer]:
    """The order of round ``index`` (from 0): the systems turned by one each round."""
    turn = index % len(peers) if peers else 0
    return peers[turn:] + peers[:turn]


def rounds_lines(rounds: list[list[dict[str, Any]]]) -> list[str]:
    """Each system's drain round by round with the median; each limited variant's as a
    fraction of the plain drain of its own round, with the median."""
    drains: dict[str, list[float | None]] = {}
    for index, results in enumerate(rounds):
        for result in results:
            drains.setdefault(result["system"], [None] * len(rounds))[index] = result["drain_rate"]
    lines = [f"drain jobs/s over {len(rounds)} rounds (median):"]
    for system, values in drains.items():
        known = [value for value in values if value is not None]
        each = ", ".join(rate(value) for value in values)
        lines.append(f"  {system}: {each} ({rate(median(known)) if known else 'none'})")
    plain = drains.get("django-jobs", [])
    for system in (name for name in VARIANTS if name in drains):
        fractions = [
            limited / base
            for limited, base in zip(drains[system], plain, strict=False)
            if limited is not None and base
        ]
        if fractions:
            each = ", ".join(f"{fraction:.2f}" for fraction in fractions)
            lines.append(
                f"  {system} / django-jobs, round by round: {each} (median {median(fractions):.2f})"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    harness.raise_on_sigterm()
    server = None if options.sqlite else server_url(options)
    peers, skipped = choose_peers(options)
    for peer in skipped:
        print(skipped_line(peer), file=sys.stderr)
    rounds: list[list[dict[str, Any]]] = []
    failed = 0
    for index in range(options.rounds):
        finished: dict[str, dict[str, Any]] = {}
        if options.rounds > 1:
            harness.heading(f"round {index + 1} of {options.rounds}")
        with harness.work_directory("django-jobs-peers.") as work_dir:
            for peer in round_order(peers, index):
                try:
                    result = run_peer(peer, options, server, work_dir)
                except BenchError as exc:
                    print(f"{peer.name}: {exc}", file=sys.stderr)
                    result = None
                if result is None:
                    failed += 1
                else:
                    finished[peer.name] = result
            if options.keep is not None:
                kept = keep_round(work_dir, options.keep, index)
                print(f"logs of round {index + 1}: {kept}", file=sys.stderr)
        # Reported in the systems' own order, whatever order they ran in.
        rounds.append([finished[peer.name] for peer in peers if peer.name in finished])
    for results in rounds:
        description = sqlite_description(results) if server is None else server_description(server)
        print_report(results, description, options, skipped)
    if options.rounds > 1:
        print()
        for line in rounds_lines(rounds):
            print(line)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
