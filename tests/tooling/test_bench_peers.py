"""bench/peers.py's choices of database and systems, and the django-tasks-db project's settings."""

import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.support.bench_modules import load_bench_module

peers = load_bench_module("peers")
harness = load_bench_module("harness")


@pytest.fixture
def tasks_db_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    """bench/peers/tasks_db_project/settings.py, loaded as db_worker loads it."""
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'tasks.sqlite3'}")
    monkeypatch.delenv("TASKS_DB_CONN_MAX_AGE", raising=False)
    return load_bench_module("peers/tasks_db_project/settings")


def names(chosen: list[Any]) -> list[str]:
    return [peer.name for peer in chosen]


# -- options ------------------------------------------------------------------------


def test_peers_options_default_to_postgresql_and_take_sqlite_wal() -> None:
    assert peers.parse_options([]).database == "postgresql"
    assert not peers.parse_options([]).sqlite
    sqlite = peers.parse_options(["--database", "sqlite-wal", "--jobs", "2000"])
    assert sqlite.database == "sqlite-wal"
    assert sqlite.sqlite
    assert sqlite.jobs == 2000


def test_peers_options_take_mariadb() -> None:
    options = peers.parse_options(["--database", "mariadb"])

    assert options.database == "mariadb"
    assert options.mariadb
    assert not options.sqlite and not options.postgresql


def test_peers_options_refuse_an_unknown_database(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        peers.parse_options(["--database", "sqlite"])

    assert exit_info.value.code == 2
    assert "argument --database: invalid choice: 'sqlite'" in capsys.readouterr().err


def test_peers_options_refuse_procrastinate_alone_on_sqlite(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        peers.parse_options(["--database", "sqlite-wal", "--only", "procrastinate"])

    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "procrastinate runs on PostgreSQL only, not with --database sqlite-wal" in err


def test_peers_options_refuse_procrastinate_alone_on_mariadb(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        peers.parse_options(["--database", "mariadb", "--only", "procrastinate"])

    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "procrastinate runs on PostgreSQL only, not with --database mariadb" in err


def test_peers_on_mariadb_skip_procrastinate_and_run_the_others() -> None:
    ran, skipped = peers.choose_peers(peers.parse_options(["--database", "mariadb"]))

    assert names(ran) == ["django-jobs", "django-tasks-db", "raw"]
    assert names(skipped) == ["procrastinate"]


def test_peers_on_sqlite_skip_procrastinate_and_run_the_others() -> None:
    ran, skipped = peers.choose_peers(peers.parse_options(["--database", "sqlite-wal"]))

    assert names(ran) == ["django-jobs", "django-tasks-db", "raw"]
    assert names(skipped) == ["procrastinate"]


def test_peers_on_postgresql_run_every_system_or_the_one_asked_for() -> None:
    ran, skipped = peers.choose_peers(peers.parse_options([]))
    only, none_skipped = peers.choose_peers(peers.parse_options(["--only", "procrastinate"]))
    raw, _ = peers.choose_peers(peers.parse_options(["--only", "raw"]))

    assert names(ran) == ["django-jobs", "django-tasks-db", "procrastinate", "raw"]
    assert skipped == []
    assert names(only) == ["procrastinate"]
    assert none_skipped == []
    assert names(raw) == ["raw"]


def test_peers_run_django_tasks_db_also_with_its_defaults_when_asked() -> None:
    """As a user runs it: plain db_worker processes and Django's CONN_MAX_AGE, beside the
    bench's own set-up of the peer."""
    both, _ = peers.choose_peers(peers.parse_options(["--peer-defaults"]))
    alone, _ = peers.choose_peers(peers.parse_options(["--only", "django-tasks-db-defaults"]))
    peer, _ = peers.choose_peers(
        peers.parse_options(["--only", "django-tasks-db", "--peer-defaults"])
    )
    assert names(both) == [
        "django-jobs",
        "django-tasks-db",
        "django-tasks-db-defaults",
        "procrastinate",
        "raw",
    ]
    assert names(alone) == ["django-tasks-db-defaults"]
    assert names(peer) == ["django-tasks-db", "django-tasks-db-defaults"]
    assert arguments("django-tasks-db-defaults") == ["--defaults"]


# -- the drivers' own arguments ----------------------------------------------------------


def arguments(system: str, *given: str) -> list[str]:
    return peers.PEERS_BY_NAME[system].arguments(peers.parse_options(list(given)))


def test_peers_run_django_jobs_as_one_process_of_two_threads_by_default() -> None:
    assert arguments("django-jobs") == ["--processes", "1", "--workers", "2"]
    assert arguments("django-tasks-db") == []


def test_peers_raw_drains_on_as_many_connections_as_django_jobs_threads_and_on_16() -> None:
    shape = ["--django-jobs-processes", "2", "--django-jobs-workers", "4"]

    assert arguments("raw") == ["--connections", "2,16", "--claim-limit", "2"]
    assert arguments("django-jobs", *shape) == ["--processes", "2", "--workers", "4"]
    assert arguments("raw", *shape) == ["--connections", "8,16", "--claim-limit", "4"]
    assert arguments("raw", "--django-jobs-workers", "16") == [
        *("--connections", "16", "--claim-limit", "16")
    ]
    assert arguments("raw", "--database", "sqlite-wal") == [
        *("--connections", "1,2", "--claim-limit", "2")
    ]
    assert arguments("raw", "--database", "mariadb") == [
        *("--connections", "2,16", "--claim-limit", "2")
    ]


def test_peers_refuse_no_django_jobs_threads(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        peers.parse_options(["--django-jobs-workers", "0"])

    assert "--django-jobs-workers must be at least 1" in capsys.readouterr().err


def test_peers_django_jobs_driver_passes_processes_only_past_one() -> None:
    if str(ROOT / "bench" / "peers") not in sys.path:
        sys.path.append(str(ROOT / "bench" / "peers"))
    driver = load_bench_module("peers/run_django_jobs")

    assert driver.shape(1, 2) == ["--workers", "2"]
    assert driver.shape(3, 4) == ["--processes", "3", "--workers", "4"]
    assert driver.describe_shape(1, 2) == "1 runjobs process, --workers 2"
    assert driver.describe_shape(3, 4) == "runjobs --processes 3 --workers 4"


def test_peers_drivers_take_their_own_options_beside_the_shared_ones(tmp_path: Path) -> None:
    common = load_bench_module("peers/common")
    shared = ["--jobs", "5", "--pickups", "0", "--batch", "2", "--timeout", "9"]
    shared += ["--log-dir", str(tmp_path), "--result", str(tmp_path / "r.json")]

    def add(parser: Any) -> None:
        parser.add_argument("--workers", type=int, default=2)

    options, own = common.parse_options([*shared, "--workers", "4"], add)
    plain, none = common.parse_options(shared)

    assert (options.jobs, options.batch, own) == (5, 2, {"workers": 4})
    assert (plain, none) == (options, {})
    with pytest.raises(SystemExit):
        common.parse_options([*shared, "--workers", "4"])


@pytest.mark.parametrize("bulk_api", ["schedule_jobs()", ""], ids=["bulk", "no bulk call"])
def test_peers_warm_each_way_of_enqueuing_up_untimed_and_leave_no_job(
    tmp_path: Path, bulk_api: str
) -> None:
    common = load_bench_module("peers/common")
    calls: list[tuple[str, Any]] = []

    class System:
        def __init__(self) -> None:
            self.bulk_api = bulk_api

        def enqueue_many(self, numbers: range) -> None:
            calls.append(("many", numbers))

        def enqueue_one(self, number: int) -> None:
            calls.append(("one", number))

        def delete_jobs(self) -> None:
            calls.append(("delete", None))

    system = System()
    options = common.Options(1200, 0, 500, 9.0, tmp_path, tmp_path / "r.json")

    common.warm_up(system, options)

    bulk = [("many", range(500))] if bulk_api else []
    assert calls == [*bulk, ("one", 0), ("delete", None)]


def test_peers_poll_a_drain_by_the_cheap_probe_and_count_once_it_says_none_waits() -> None:
    """The counts read every row: polled through a drain, they competed with the drain
    they measured."""
    common = load_bench_module("peers/common")
    calls: list[str] = []
    probes = iter([True, True, False, False])
    counts = iter([(10, 10, 0), (10, 9, 1)])

    class System:
        def unfinished(self) -> bool:
            calls.append("probe")
            return next(probes)

        def counts(self) -> tuple[int, int, int]:
            calls.append("counts")
            return next(counts)

    system = System()
    assert [common.succeeded_all(system, 10) for _ in range(3)] == [False, False, True]
    assert calls == ["probe", "probe", "probe", "counts"]
    with pytest.raises(common.BenchError, match="1 jobs did not succeed"):
        common.succeeded_all(system, 10)


@pytest.mark.parametrize(("jobs", "rounds"), [(1000, 20), (5000, 4), (20_000, 3), (50_000, 3)])
def test_peers_report_the_bulk_enqueue_over_rounds_of_20000_jobs_each_on_an_empty_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int, rounds: int
) -> None:
    """All the rounds' jobs over all their time: a round that a full garbage collection
    fell in counts as much as its jobs do, no more and no less."""
    common = load_bench_module("peers/common")
    seconds = iter([0.5, 0.1, 0.3] + [0.2] * 17)
    events: list[str] = []
    timed: list[float] = []

    def enqueue_in_bulk(system: Any, options: Any) -> float:
        events.append("bulk")
        timed.append(next(seconds))
        return timed[-1]

    class System:
        def delete_jobs(self) -> None:
            events.append("delete")

    monkeypatch.setattr(common, "enqueue_in_bulk", enqueue_in_bulk)
    options = common.Options(jobs, 0, 500, 9.0, tmp_path, tmp_path / "r.json")

    rate = common.bulk_rate(System(), options)

    assert events == ["bulk", "delete"] * rounds
    assert rate == pytest.approx(rounds * jobs / sum(timed))


def test_peers_drivers_common_part_needs_nothing_beyond_the_standard_library() -> None:
    """A peer's virtualenv has no django_jobs (nor this Django): common and the harness it
    imports must load without any site-packages."""
    drivers = str(ROOT / "bench" / "peers")
    check = (
        f"import sys; sys.path.insert(0, {drivers!r}); import common, harness;"
        " assert not {'django', 'django_jobs'} & set(sys.modules), sorted(sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", check],  # isolated, without site-packages
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert result.returncode == 0, result.stderr


# -- the server ---------------------------------------------------------------------


def test_peers_server_is_the_database_url_s_for_its_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mariadb = peers.parse_options(["--database", "mariadb"])
    monkeypatch.setenv("DATABASE_URL", "mysql://root@127.0.0.1:3307/django_jobs")

    assert peers.server_url(mariadb) == "mysql://root@127.0.0.1:3307/django_jobs"
    with pytest.raises(SystemExit, match="set DATABASE_URL to a PostgreSQL server"):
        peers.server_url(peers.parse_options([]))
    monkeypatch.setenv("DATABASE_URL", "postgres://bench@127.0.0.1:5433/bench")
    with pytest.raises(SystemExit, match="set DATABASE_URL to a MariaDB server"):
        peers.server_url(mariadb)


def test_peers_mariadb_database_is_the_peer_s_on_the_server() -> None:
    server = "mysql://root@127.0.0.1:3307/django_jobs"

    assert (
        peers.database_url(server, "bench_tasks_db") == "mysql://root@127.0.0.1:3307/bench_tasks_db"
    )


def test_peers_mariadb_description_names_the_server_and_its_durability() -> None:
    assert peers.describe_mariadb("10.11.6-MariaDB-0+deb12u1", [1, 1, 0]) == (
        "MariaDB 10.11.6 (innodb_flush_log_at_trx_commit=1, innodb_doublewrite=ON, log_bin=OFF)"
    )
    assert peers.describe_mariadb("8.0.36", [2, 0, 1]).startswith("MySQL 8.0.36 (")


# -- the SQLite files -----------------------------------------------------------------


def test_peers_sqlite_database_is_a_new_file_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "bench_django_jobs.sqlite3"

    url = peers.create_sqlite_database(path)

    assert url == f"sqlite:///{path}"
    assert url.startswith("sqlite:////")  # an absolute path, as django-environ reads it
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        connection.close()
    with pytest.raises(peers.BenchError, match="exists already"):
        peers.create_sqlite_database(path)


def test_peers_sqlite_database_goes_in_the_peer_s_directory(tmp_path: Path) -> None:
    options = peers.parse_options(["--database", "sqlite-wal"])
    peer = peers.PEERS_BY_NAME["django-tasks-db"]

    url = peers.prepare_database(peer, options, None, tmp_path)

    assert url == f"sqlite:///{tmp_path / 'bench_tasks_db.sqlite3'}"


def test_peers_sqlite_description_names_the_journal_mode(tmp_path: Path) -> None:
    path = tmp_path / "bench.sqlite3"
    peers.create_sqlite_database(path)
    connection = sqlite3.connect(path)
    try:
        described = harness.describe_sqlite(connection.cursor())
    finally:
        connection.close()

    assert described == f"SQLite {sqlite3.sqlite_version} (journal_mode=wal, synchronous=FULL)"


def test_peers_sqlite_report_describes_the_files_once_when_they_agree() -> None:
    same = "SQLite 3.40.1 (journal_mode=wal, synchronous=FULL)"
    other = "SQLite 3.45.0 (journal_mode=wal, synchronous=FULL)"
    agreeing = [{"system": "django-jobs", "database": same}, {"system": "b", "database": same}]
    differing = [{"system": "django-jobs", "database": same}, {"system": "b", "database": other}]

    assert peers.sqlite_description(agreeing) == f"{same}, a file per system"
    assert peers.sqlite_description(differing) == f"django-jobs: {same}; b: {other}"
    assert peers.sqlite_description([]) == "SQLite in WAL mode"


def test_peers_report_says_the_database_and_what_was_skipped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    options = peers.parse_options(["--database", "sqlite-wal", "--jobs", "2000"])
    database = "SQLite 3.40.1 (journal_mode=wal, synchronous=FULL)"
    result = {
        "system": "django-jobs",
        "workers": "1 runjobs process, --workers 2",
        "bulk_api": "schedule_jobs()",
        "bulk_rate": 12000.0,
        "one_by_one_rate": 2000.0,
        "drain_rate": 3000.0,
        "drain_start_up_seconds": 0.4,
        "pickup_p50": 0.5,
        "pickup_p90": 0.9,
        "versions": {"python": "3.11.7"},
        "database": database,
    }
    _, skipped = peers.choose_peers(options)

    peers.print_report([result], peers.sqlite_description([result]), options, skipped)

    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(rf"{re.escape(database)}, a file per system; \d+ cpus", lines[1])
    assert lines[-1] == "procrastinate: skipped, it runs on PostgreSQL only"
    assert not any("limits" in line for line in lines)  # no raw system in the run


def result(system: str, one_by_one: float, drain: float, **more: Any) -> dict[str, Any]:
    return {"system": system, "workers": f"{system}'s", "one_by_one_rate": one_by_one,
            "drain_rate": drain, "bulk_api": None, "bulk_rate": None,
            "drain_start_up_seconds": 0.5, "pickup_p50": None, "pickup_p90": None,
            **more}  # fmt: skip


def test_peers_report_gives_django_jobs_against_the_raw_limits_and_the_fastest_peer() -> None:
    raw = result("raw", 2500.0, 4000.0, drains={"16 connections": 8000.0})
    results = [result("django-jobs", 2000.0, 2000.0), result("a", 1000.0, 1.0), raw]
    results.append(result("b", 1600.0, 1.0))

    assert peers.limit_lines(results) == [
        "django-jobs against the limits:",
        "  1-by-1 enqueue: 1.25x the raw INSERT's time per job"
        " (what schedule_job() sends, with its commit, in a plain loop)",
        "  drain: 0.50 of raw's (raw's), 0.25 of raw's (16 connections)",
        "  1-by-1 enqueue: 1.25x the rate of the fastest peer (b)",
    ]
    assert peers.limit_lines(results[1:]) == []


def test_peers_report_puts_each_further_raw_drain_on_a_row_of_its_own() -> None:
    raw = result("raw", 2500.0, 4000.0, drains={"16 connections": 8000.0})

    first, further = peers.table_rows(raw)

    assert first[:5] == ["raw", "raw's", "none", "2,500", "4,000"]
    assert further == ["", "16 connections", "", "", "8,000", "", "", ""]


# -- the django-tasks-db project's settings --------------------------------------------


def test_tasks_db_settings_open_sqlite_as_a_worker_would(
    tasks_db_settings: ModuleType, tmp_path: Path
) -> None:
    assert tasks_db_settings.DATABASES == {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(tmp_path / "tasks.sqlite3"),
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
            "CONN_MAX_AGE": 600,
        }
    }


def test_tasks_db_settings_read_a_sqlite_url_s_path(tasks_db_settings: ModuleType) -> None:
    absolute = tasks_db_settings.database("sqlite:////tmp/bench/tasks.sqlite3", 0)
    relative = tasks_db_settings.database("sqlite:///tasks.sqlite3", 0)
    quoted = tasks_db_settings.database("sqlite:////tmp/a%20b/tasks.sqlite3", 0)

    assert absolute["NAME"] == "/tmp/bench/tasks.sqlite3"  # noqa: S108
    assert relative["NAME"] == "tasks.sqlite3"
    assert quoted["NAME"] == "/tmp/a b/tasks.sqlite3"  # noqa: S108
    assert absolute["CONN_MAX_AGE"] == 0


def test_tasks_db_settings_take_the_bench_s_sqlite_url(
    tasks_db_settings: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "bench_tasks_db.sqlite3"

    entry = tasks_db_settings.database(peers.create_sqlite_database(path), 600)

    assert entry["NAME"] == str(path)


def test_tasks_db_settings_keep_the_connection_as_told(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'tasks.sqlite3'}")
    monkeypatch.setenv("TASKS_DB_CONN_MAX_AGE", "0")

    settings = load_bench_module("peers/tasks_db_project/settings")

    assert settings.DATABASES["default"]["CONN_MAX_AGE"] == 0


def test_tasks_db_settings_open_mariadb_in_utf8mb4(tasks_db_settings: ModuleType) -> None:
    entry = tasks_db_settings.database("mysql://bench:p%40ss@127.0.0.1:3307/bench_tasks_db", 600)

    assert entry == {
        "ENGINE": "django.db.backends.mysql",
        "NAME": "bench_tasks_db",
        "USER": "bench",
        "PASSWORD": "p@ss",
        "HOST": "127.0.0.1",
        "PORT": "3307",
        "CONN_MAX_AGE": 600,
        "OPTIONS": {"charset": "utf8mb4"},
    }


def test_tasks_db_settings_keep_postgresql_urls(tasks_db_settings: ModuleType) -> None:
    entry = tasks_db_settings.database("postgres://bench:p%40ss@127.0.0.1:5433/bench_tasks_db", 600)

    assert entry == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "bench_tasks_db",
        "USER": "bench",
        "PASSWORD": "p@ss",
        "HOST": "127.0.0.1",
        "PORT": "5433",
        "CONN_MAX_AGE": 600,
    }
    assert "OPTIONS" not in entry


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "sqlite://host/tasks.sqlite3"])
def test_tasks_db_settings_refuse_a_sqlite_url_without_a_file(
    tasks_db_settings: ModuleType, url: str
) -> None:
    with pytest.raises(ValueError, match=r"a SQLite DATABASE_URL is sqlite:///PATH, a file"):
        tasks_db_settings.database(url, 600)


def test_tasks_db_settings_refuse_other_databases_without_showing_the_url(
    tasks_db_settings: ModuleType,
) -> None:
    with pytest.raises(ValueError, match=r"not oracle://\.\.\.$") as error:
        tasks_db_settings.database("oracle://bench:hunter2@127.0.0.1/bench", 600)

    assert "hunter2" not in str(error.value)


def test_limits_adds_django_jobs_under_each_kind_of_limit_to_the_sitting() -> None:
    def names(*argv: str) -> list[str]:
        chosen, _ = peers.choose_peers(peers.parse_options(list(argv)))
        return [peer.name for peer in chosen]

    limited = [
        "django-jobs+global_limit",
        "django-jobs+rate_limit",
        "django-jobs+keyed",
        "django-jobs+rate_binds",
    ]
    assert not set(limited) & set(names())
    assert names("--only", "django-jobs", "--limits") == ["django-jobs", *limited]
    assert names("--limits")[:5] == ["django-jobs", *limited]
    assert names("--only", "django-jobs+rate_limit") == ["django-jobs+rate_limit"]


def test_the_keyed_variant_enqueues_keyed_jobs_on_their_queue_and_serves_the_pickups_too() -> None:
    if str(ROOT / "bench" / "peers") not in sys.path:
        sys.path.append(str(ROOT / "bench" / "peers"))
    run_django_jobs = load_bench_module("peers/run_django_jobs")
    keyed = run_django_jobs.DjangoJobs(keyed=True)
    assert keyed.name == "django-jobs+keyed"
    assert [keyed.key(n) for n in (0, 4, 5)] == ["k0", "k0", "k1"]
    command = keyed.runjobs("--burst")
    assert command[command.index("--queue") :][:4] == ["--queue", "keyed", "--queue", "default"]
    plain = run_django_jobs.DjangoJobs()
    assert plain.key(3) is None
    assert plain.runjobs().count("--queue") == 1


def test_peers_rounds_turn_the_order_by_one_system_each_round() -> None:
    chosen, _ = peers.choose_peers(peers.parse_options(["--only", "django-jobs", "--limits"]))
    orders = [names(peers.round_order(chosen, index)) for index in range(len(chosen) + 1)]
    assert orders[0] == names(chosen)
    assert orders[1] == [*names(chosen)[1:], "django-jobs"]
    assert [order[0] for order in orders[: len(chosen)]] == names(chosen)  # each leads once
    assert orders[len(chosen)] == orders[0]


def test_peers_refuse_no_rounds(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        peers.parse_options(["--rounds", "0"])
    assert "--rounds" in capsys.readouterr().err


def test_peers_rounds_give_each_limit_against_the_plain_drain_of_its_own_round() -> None:
    def result(system: str, drain: float) -> dict[str, Any]:
        return {"system": system, "drain_rate": drain}

    rounds = [
        [result("django-jobs", 1000), result("django-jobs+keyed", 900), result("raw", 2000)],
        [result("django-jobs", 2000), result("django-jobs+keyed", 1000), result("raw", 2100)],
        [result("django-jobs", 1500), result("raw", 1900)],  # the keyed run failed
    ]
    lines = peers.rounds_lines(rounds)
    assert lines[0] == "drain jobs/s over 3 rounds (median):"
    assert "  django-jobs: 1,000, 2,000, 1,500 (1,500)" in lines
    assert "  django-jobs+keyed: 900, 1,000, none (950)" in lines
    assert "  raw: 2,000, 2,100, 1,900 (2,000)" in lines
    assert (
        lines[-1] == "  django-jobs+keyed / django-jobs, round by round: 0.90, 0.50 (median 0.70)"
    )


def test_peers_keep_takes_a_directory_and_copies_each_round_but_its_sqlite_files(
    tmp_path: Path,
) -> None:
    assert peers.parse_options([]).keep is None
    keep = tmp_path / "kept"
    assert peers.parse_options(["--keep", str(keep)]).keep == keep
    work = tmp_path / "work"
    (work / "django-jobs").mkdir(parents=True)
    (work / "django-jobs" / "worker.log").write_text("serving")
    (work / "django-jobs" / "django-jobs.sqlite3").write_text("data")
    (work / "django-jobs" / "django-jobs.sqlite3-wal").write_text("data")

    kept = peers.keep_round(work, keep, 1)

    assert kept == keep / "round-2"
    assert sorted(path.name for path in (kept / "django-jobs").iterdir()) == ["worker.log"]


def test_peers_count_statements_only_where_the_server_loads_pg_stat_statements(
    tmp_path: Path,
) -> None:
    import os

    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        pytest.skip("needs a PostgreSQL server")
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        loaded = connection.execute("SHOW shared_preload_libraries").fetchone()[0]
    counting = peers.statements_reset(url)
    assert counting == ("pg_stat_statements" in loaded)
    if counting:
        out = tmp_path / "statements.tsv"
        peers.statements_write(url, out)
        assert out.read_text().split("\n")[0].split("\t") == list(peers.STATEMENT_COLUMNS)
