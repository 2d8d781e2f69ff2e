"""bench/admin_pages.py's pure parts: its options, the fill's SQL and the table it prints.

The fill is bench/admin_data.py's, the timing of a page bench/admin_timing.py's.
"""

from pathlib import Path

import pytest

from tests.support.bench_modules import load_bench_module

admin_pages = load_bench_module("admin_pages")
admin_data = load_bench_module("admin_data")
admin_timing = load_bench_module("admin_timing")

TABLES = admin_data.Tables('"jobs"', '"attempts"')


def test_bench_admin_options_default_to_a_million_finished_jobs() -> None:
    options = admin_pages.parse_options([])

    assert options.fill.finished == 1_000_000
    assert options.fill.dead_letters == 300
    assert options.fill.running == 40
    assert options.requests == 5
    assert options.directory is None
    assert not options.reuse


def test_bench_admin_options_reuse_names_the_folder_to_reuse() -> None:
    options = admin_pages.parse_options(["--reuse", "pg", "--json", "out.json"])

    assert options.directory == Path("pg")
    assert options.reuse
    assert options.json == Path("out.json")


def test_bench_admin_options_dir_keeps_the_folder_without_reusing_it() -> None:
    options = admin_pages.parse_options(["--dir", "pg", "--finished", "5000"])

    assert options.directory == Path("pg")
    assert not options.reuse
    assert options.fill.finished == 5000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dir", "a", "--reuse", "b"], "not allowed with argument"),
        (["--finished", "0"], "--finished, --dead-letters and --schedules must be at least 1"),
        (["--due", "-1"], "cannot be negative"),
        (["--workers", "0"], "running jobs need at least one worker"),
        (["--requests", "0"], "--requests must be at least 1"),
    ],
)
def test_bench_admin_options_refuse_what_cannot_be_measured(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        admin_pages.parse_options(argv)

    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_bench_admin_schedule_names_are_numbered() -> None:
    assert admin_data.Fill(schedules=3).schedule_names() == [
        "bench-schedule-01",
        "bench-schedule-02",
        "bench-schedule-03",
    ]


def test_bench_admin_finished_jobs_sql_is_one_bound_insert_oldest_first() -> None:
    sql = admin_data.finished_jobs_sql(TABLES)

    assert sql.count("INSERT INTO") == 1
    assert 'INSERT INTO "jobs" (' in sql
    assert "generate_series(%(count)s::bigint, 1, -1)" in sql
    for name in ("count", "now", "span_seconds", "names", "queues", "schedules"):
        assert f"%({name})s" in sql
    # Every literal % is doubled, since the statement is always run with bound parameters.
    assert "%%" in sql
    assert "% " not in sql.replace("%%", "")


def test_bench_admin_finished_attempts_sql_gives_each_finished_job_one_attempt() -> None:
    sql = admin_data.finished_attempts_sql(TABLES)

    assert 'INSERT INTO "attempts"' in sql
    assert 'FROM "jobs" AS j' in sql
    assert "j.status IN ('succeeded', 'cancelled')" in sql
    assert 'NOT EXISTS (SELECT 1 FROM "attempts" AS a WHERE a.job_id = j.id)' in sql


def test_bench_admin_live_part_is_deleted_attempts_first() -> None:
    attempts, jobs = admin_data.delete_live_sql(TABLES)

    assert attempts.startswith('DELETE FROM "attempts" WHERE job_id IN (SELECT id FROM "jobs"')
    assert jobs.startswith('DELETE FROM "jobs" WHERE')
    for sql in (attempts, jobs):
        assert "status IN ('pending', 'running', 'dead_lettered')" in sql
    assert "'succeeded'" not in attempts + jobs


def test_bench_admin_finished_count_reads_the_finished_part_only() -> None:
    assert admin_data.count_finished_sql(TABLES) == (
        "SELECT count(*) FROM \"jobs\" WHERE status IN ('succeeded', 'cancelled')"
    )


def test_bench_admin_slowest_query_is_the_longest_timed_one() -> None:
    timer = admin_timing.QueryTimer()
    fast = admin_timing.Query("SELECT 1", None, 0.5)
    slow = admin_timing.Query("SELECT 2", None, 12.0)
    timer.queries += [fast, slow]

    assert max(timer.queries, key=lambda query: query.ms) is slow


def test_bench_admin_query_timer_times_each_statement_and_passes_its_result_on() -> None:
    timer = admin_timing.QueryTimer()
    calls = []

    def execute(sql: str, params: object, many: bool, context: object) -> str:
        calls.append((sql, params, many))
        return "result"

    assert timer(execute, "SELECT %s", [1], False, {}) == "result"
    assert calls == [("SELECT %s", [1], False)]
    [query] = timer.queries
    assert (query.sql, query.params) == ("SELECT %s", [1])
    assert query.ms >= 0


def test_bench_admin_table_flags_slow_pages_and_notes_untimed_ones() -> None:
    fast = admin_timing.Timing("jobs", "/admin/jobs/", 200, 42.25, 50.0, 9, 3.5)
    slow = admin_timing.Timing("jobs, page 1,000", "/admin/jobs/?p=1000", 200, 812.0, 900.4, 9, 700)
    refused = admin_timing.Timing("jobs, name", "/admin/jobs/?name=x", 302, 4.0, 4.0, 3, 0.2)
    missing = admin_timing.Timing("dashboard", "", note="not timed: no such URL")

    header, *rows = admin_pages.format_table([fast, slow, refused, missing]).splitlines()

    assert header.split() == ["page", "status", "median", "ms", "max", "ms", "queries"] + [
        "slowest",
        "query",
        "ms",
    ]
    assert rows[0].split() == ["jobs", "200", "42.2", "50.0", "9", "3.5"]
    assert rows[1].split()[-6:] == ["200", "812.0", "900.4", "9", "700.0", "SLOW"]
    assert rows[2].endswith("SLOW")
    assert rows[3].split()[:6] == ["dashboard", "-", "-", "-", "-", "-"]
    assert rows[3].endswith("not timed: no such URL")
    assert len({len(row.split(" SLOW")[0]) for row in rows[:2]}) == 1  # figures line up
