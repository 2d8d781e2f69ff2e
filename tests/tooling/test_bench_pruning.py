"""bench/pruning.py's pure parts: its options, the worker's log lines, the SQL and the table.

The SQL that inserts and counts the expired rows is bench/pruning_data.py's.
"""

from datetime import datetime, timedelta

import pytest

from tests.support.bench_modules import load_bench_module

pruning = load_bench_module("pruning")
pruning_data = load_bench_module("pruning_data")

PRUNED = "django_jobs.maintenance.cleaner: {} finished job(s) past their retention deleted"


def test_bench_pruning_options_default_to_200_000_expired_rows() -> None:
    options = pruning.parse_options([])

    assert (options.jobs, options.expired, options.rounds) == (20_000, 200_000, 1)
    assert options.maintenance_seconds == 1.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--expired", "0"], "must be at least 1"),
        (["--rounds", "0"], "must be at least 1"),
        (["--maintenance-seconds", "0"], "--maintenance-seconds must be positive"),
    ],
)
def test_bench_pruning_options_refuse_what_cannot_be_measured(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        pruning.parse_options(argv)

    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_bench_pruning_reads_each_pass_from_the_worker_s_log() -> None:
    lines = [
        "2026-12-01 15:42:06,123 INFO MainThread django_jobs.worker.server: worker started",
        f"2026-12-01 15:42:06,900 INFO MainThread {PRUNED.format(10000)}",
        "2026-12-01 15:42:07,001 INFO run-default-0 django_jobs.worker.execution: job done",
        f"2026-12-01 15:42:08,250 INFO MainThread {PRUNED.format(734)}",
    ]

    passes = pruning.parse_passes(lines)

    assert [one.count for one in passes] == [10000, 734]
    assert passes[0].at == datetime(2026, 12, 1, 15, 42, 6, 900_000).astimezone()
    assert passes[1].at - passes[0].at == timedelta(seconds=1.35)


def test_bench_pruning_counts_a_pass_s_batches_short_one_included() -> None:
    assert [pruning.batches(count, 1000) for count in (1, 1000, 1001, 10_000)] == [1, 1, 2, 10]


def test_bench_pruning_keeps_the_passes_inside_the_drain() -> None:
    start = datetime(2026, 12, 1, 15, 0).astimezone()
    passes = [pruning.Pass(start + timedelta(seconds=s), 1000) for s in (-1, 0, 5, 10, 11)]

    inside = pruning.passes_within(passes, start, start + timedelta(seconds=10))

    assert [one.at - start for one in inside] == [timedelta(seconds=s) for s in (0, 5, 10)]


def test_bench_pruning_expired_rows_are_inserted_by_one_bound_statement_each() -> None:
    jobs = pruning_data.expired_jobs_sql('"jobs"')
    attempts = pruning_data.expired_attempts_sql('"jobs"', '"attempts"')

    assert jobs.count("INSERT INTO") == 1 and 'INSERT INTO "jobs" (' in jobs
    assert "generate_series(1, %(count)s::bigint)" in jobs
    for name in ("count", "name", "queue", "newest", "oldest"):
        assert f"%({name})s" in jobs
    assert 'INSERT INTO "attempts" (' in attempts
    assert "j.finished_at <= %(newest)s" in attempts
    # One status, so that every batch of a pass but its last is full.
    assert "'succeeded'" in jobs and "cancelled" not in jobs + attempts


def test_bench_pruning_counts_expired_rows_through_the_finished_index_condition() -> None:
    sql = pruning_data.expired_count_sql('"jobs"')

    assert "status IN ('succeeded', 'dead_lettered', 'cancelled')" in sql
    assert "finished_at < %(cutoff)s" in sql


def test_bench_pruning_table_and_summary_compare_the_two_drains() -> None:
    without = pruning.DrainResult("without", 20_000, drain_seconds=20.0, drain_rate=1000.0)
    with_rows = pruning.DrainResult("with", 20_000, drain_seconds=25.0, drain_rate=800.0)
    with_rows.expired_before, with_rows.expired_after = 200_000, 10_000
    with_rows.pruned_during_drain, with_rows.passes_during_drain = 180_000, 18
    with_rows.batches_during_drain, with_rows.rate_while_pruning = 180, 765.4

    header, first, second = pruning.format_table([without, with_rows]).splitlines()

    assert header.split()[:4] == ["drain", "jobs", "drain", "jobs/s"]
    assert first.split() == ["without", "20,000", "1,000", "20.00", "-", "0", "0", "0", "0", "0"]
    assert second.split() == [
        "with",
        "20,000",
        "800",
        "25.00",
        "765",
        "200,000",
        "190,000",
        "180,000",
        "18",
        "180",
    ]
    assert pruning.summary([without, with_rows]) == (
        "median drain (without: 1,000 jobs/s, with: 800 jobs/s; with pruning at 80%)"
    )
